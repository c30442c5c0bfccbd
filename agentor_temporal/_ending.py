"""Ending the process as a signal's default would: for a worker, a script and the CLI alike."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


def say_line(line: str) -> None:
    """Write `line` and its newline to stderr in one write, flushed; a stderr that cannot
    take it is ignored: the line is lost, never what the process was doing.

    `print` writes the text and the newline apart, and a signal handled between the two
    (the io layer runs handlers between its writes) printed its own line inside this one:
    "SIGINT: finishing ... SIGTERM: finishing ...\n\n", a line nobody could read or match.

    Said from signal handlers and the exit hook, mid-drain: a stderr closed before the
    script started (`python script.py 2>&-`, where Python sets `sys.stderr` to None) raised
    AttributeError there, which ended the drain; the approved call in flight was cut off,
    and the next worker ran it again. So is any other failure to write (a stream closed, a
    replacement that raises): print(file=None) would write to stdout instead, and none is used.
    """
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(Exception):
        stream.write(line + "\n")
        stream.flush()


def end_by(signum: signal.Signals) -> None:
    """End the process as `signum`'s default does (exit status 128 + signum), streams flushed.

    Returns only off the main thread where the signal's handler could not be reset.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(ValueError, OSError):  # off the main thread: the default stands
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    if os.getpid() == 1:
        # a container's first process (`CMD ["python", "worker.py"]`, no init): the kernel
        # takes no default action for it, so the kill above did nothing and the process
        # went on (a second SIGTERM did not abandon the calls); end it as Docker reports it
        os._exit(128 + signum)


class StoppedStarting(BaseException):
    """A stop signal that came while a worker was starting, before it polled: no work taken.

    A BaseException, so that no `except Exception` on the way (an agent module's import, a
    connection's retries) takes it for an error of its own.
    """

    def __init__(self, signum: signal.Signals) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_starting(signum: int, frame: object) -> None:
    raise StoppedStarting(signal.Signals(signum))


@contextlib.contextmanager
def stopped_while_starting(
    names: tuple[str, ...] = ("SIGTERM", "SIGINT", "SIGHUP"),
) -> Iterator[None]:
    """While the body runs, the signals `names` raise `StoppedStarting` (until a handler of the
    body's own replaces ours: the worker's, once it polls); those replaced come back after.

    The worker's handlers go on only once it is about to poll; before, SIGTERM (a container
    stopped as it started) killed the process by the default: exit status 143, and no line
    saying what happened. One the caller ignores (`nohup`) stays ignored. Main thread only.
    """
    replaced: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for name in names:
            number = getattr(signal, name, None)
            if number is None or signal.getsignal(number) is signal.SIG_IGN:
                continue
            replaced[number] = signal.signal(number, _stop_starting)
    try:
        yield
    finally:
        for number, previous in replaced.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(number, previous)


def starting_line(signum: signal.Signals) -> str:
    """What a worker stopped before it polled says (its one line)."""
    return f"Stopped by {signum.name} while starting, before polling: no work was taken"


@contextlib.contextmanager
def launching(worker: bool) -> Iterator[None]:
    """Around a launcher's own imports and start (`worker.py`, `python -m agentor_temporal`).

    The package's own signal handling goes on only once its modules are imported, 1-2 s
    after the interpreter starts; a stop signal meanwhile (a container stopped as it started)
    killed the process silently by the default (exit status 143). Now it says so in one
    line: a worker ends with exit status 0 (it took no work), a command with 130, as any
    command interrupted (nothing was started). Import only stdlib before this, so it is on at once.
    """
    try:
        with stopped_while_starting():
            yield
    except StoppedStarting as stopped:
        if worker:
            say_line(starting_line(stopped.signum))
            os._exit(0)
        # as any command interrupted (exit status 130, whichever signal: the CLI's own rule)
        say_line(f"interrupted ({stopped.signum.name}) while starting: nothing was done")
        os._exit(130)
