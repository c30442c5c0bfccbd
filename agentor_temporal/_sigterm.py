"""SIGTERM to a user's script lets its embedded worker finish the calls it runs.

Python's default for SIGTERM ends the process at once: a tool call the
embedded worker was running is cut off, and the next worker runs it again (a
transfer done twice). Following `asyncio.Runner`'s precedent for SIGINT,
`draining_on_sigterm()` installs a handler only while a facade call runs in
the main thread and only if SIGTERM's handler is still the default; it is
restored when the last such call ends. The handler stops the embedded
workers as the exit hook does (the SDK's graceful shutdown: calls in flight
finish and are recorded), then ends the process by SIGTERM as the default
would (exit status 143). A handler of the user's own, or the CLI's, is left
alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

logger = logging.getLogger("agentor_temporal")

#: Facade calls under way in the main thread with the handler installed
#: (concurrent async calls nest; only the main thread touches it).
_depth = 0


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # a second SIGTERM ends the process at once, as the default does
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from agentor_temporal._runtime import EXIT_DRAIN, Runtime

    runtime = Runtime._instance
    if runtime is not None and runtime.serving():
        logger.warning(
            "SIGTERM: finishing the calls this process's worker runs (up to %g s), then exiting",
            EXIT_DRAIN,
        )
        runtime.stop_workers(EXIT_DRAIN)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def draining_on_sigterm() -> Iterator[None]:
    """While the body runs, SIGTERM drains the embedded workers before ending the process.

    Does nothing outside the main thread or when SIGTERM already has a
    handler other than the default (Python's signal API allows handlers only
    in the main thread; another handler is the application's decision).
    """
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is not _on_sigterm and (current is not signal.SIG_DFL or _depth):
        # someone else's handler, or ours replaced by someone else mid-call
        yield
        return
    if current is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        # a stream closed by the garbage collector may end off the main thread
        main = threading.current_thread() is threading.main_thread()
        if _depth == 0 and main and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
