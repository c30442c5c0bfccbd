"""Ending the process as a signal's default would: for a worker, a script and the CLI alike."""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def end_by(signum: signal.Signals) -> None:
    """End the process as `signum`'s default does (exit status 128 + signum), streams flushed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(ValueError, OSError):  # off the main thread: the default stands
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
