"""Interrupts while a process finishes its calls: the first is noted, the same again obeyed.

An embedded worker may be running a tool call (an approved transfer, say)
when the process is told to end. With Python's default handling the call was
cut off, and the next worker ran it again (a transfer done twice). So in
three places a first interrupt lets the calls finish and the same one again
acts as before (another is noted too): a script's facade call
(`draining_on_sigterm`: Ctrl+C, SIGTERM or SIGHUP drains the workers, then
acts as the default would: KeyboardInterrupt, or the process ended, exit
status 143 or 129), a script's exit (`patient_exit`: the exit hook drains
them anyway, so Ctrl+C, SIGTERM or SIGHUP is only noted, and ends the
process once they are done) and the CLI (`cli.main`, once a command's
outcome is decided). `NoteFirst` is their one mechanism; each place says
which signals, over which handlers (Python's defaults only, for a script: an
application's own are its decision), and what the first one does.
Python's signal API allows handlers only in the main thread; elsewhere
nothing is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from types import FrameType
from typing import Any

from agentor_temporal._ending import end_by, say_line
from agentor_temporal._exit import calls_grace, exit_drain

logger = logging.getLogger("agentor_temporal")

#: A signal's handler as `signal.getsignal` returns it.
Handler = Callable[[int, FrameType | None], Any] | int | None


def over_default(signum: signal.Signals, current: Handler) -> bool:
    """Whether `current` is Python's own handler for `signum` (what a script leaves alone)."""
    default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
    return current is default


def asyncio_runs(current: Handler) -> bool:
    """Whether `current` is `asyncio.run`'s own Ctrl+C handler (its Runner's: it cancels the
    main task, and `asyncio.run` raises KeyboardInterrupt), Python's default for async code."""
    runner = getattr(asyncio, "Runner", None)  # Python 3.11+; before, the default stays on
    method = getattr(current, "func", None) if isinstance(current, functools.partial) else None
    return (
        runner is not None
        and isinstance(getattr(method, "__self__", None), runner)
        and getattr(method, "__name__", "") == "_on_sigint"
    )


def over_python(signum: signal.Signals, current: Handler) -> bool:
    """`over_default`, or for SIGINT `asyncio.run`'s handler (a call awaited on its loop)."""
    return over_default(signum, current) or (signum == signal.SIGINT and asyncio_runs(current))


class NoteFirst:
    """Handlers under which a first signal is noted and a second obeyed.

    Installed (in the main thread only) on each of `signals` whose current
    handler `over` accepts; installing again while installed nests, and the
    handlers replaced come back when the outermost installation ends (those
    still ours: a handler set meanwhile by someone else is theirs).

    Only the same signal again is obeyed, as the lines noting one say ("press
    Ctrl+C again"): another signal meanwhile is noted too (`again`). A Jupyter
    kernel's restart or shutdown interrupts the kernel, then terminates it,
    and a supervisor may escalate so: that SIGTERM, taken as the second
    signal, ended the process mid-call, and the next worker ran the call again.

    Args:
        signals: Signal names; one this platform lacks (SIGHUP on Windows) is skipped.
        note: What the first signal does.
        over: Whether ours may replace a signal's current handler.
        obey: What a signal not noted does. None: the replaced handler of a
            signal noted comes back, so that signal again acts as it did before.
        again: What another signal after the first does (default: `note`).
        when: Whether a signal arriving now is noted rather than obeyed
            (default: always); needs `obey`.
        linger: Signals whose handler stays on after the outermost installation ends
            while `lingers()` says so (then put back by a later one, or never).
        lingers: Whether they stay now.
    """

    def __init__(
        self,
        signals: Iterable[str],
        note: Callable[[signal.Signals], None],
        *,
        over: Callable[[signal.Signals, Handler], bool],
        obey: Callable[[int, FrameType | None], None] | None = None,
        again: Callable[[signal.Signals], None] | None = None,
        when: Callable[[], bool] | None = None,
        linger: Iterable[str] = (),
        lingers: Callable[[], bool] | None = None,
    ) -> None:
        if when is not None and obey is None:
            raise ValueError("NoteFirst: `when` needs `obey`, for the signals not noted")
        self._signals = tuple(signals)
        self._linger = frozenset(linger)
        self._lingers = lingers
        self._note = note
        self._again = again or note
        self._over = over
        self._obey = obey
        self._when = when
        # one object, so `signal.getsignal(...) is self._handler` recognises ours
        self._handler = self._handle
        self._kept: dict[signal.Signals, Handler] = {}
        #: installations under way (concurrent async facade calls nest)
        self._depth = 0
        #: the signals noted in this installation (each obeyed if it comes again)
        self._noted: set[int] = set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._obey is not None and (
            signum in self._noted or (self._when is not None and not self._when())
        ):
            self._obey(signum, frame)
            return
        first = not self._noted
        self._noted.add(signum)
        if self._obey is None:
            self.restore(only=signum)  # the same one again acts as before
        (self._note if first else self._again)(signal.Signals(signum))

    def count_noted(self, signum: signal.Signals) -> None:
        """Take `signum`, handled elsewhere, as the one noted: it is obeyed if it comes again."""
        self._noted.add(signum)

    def _ours(self) -> bool:
        return any(signal.getsignal(number) is self._handler for number in self._kept)

    def install(self) -> bool:
        """Install the handlers; whether ours is now on some signal (then `release` once)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if self._depth and not self._ours():
            # ours replaced by someone else mid-call, or put back by a first signal
            return False
        if not self._depth:
            self._noted = set()
        for name in self._signals:
            number = getattr(signal, name, None)
            if number is None:
                continue
            with contextlib.suppress(ValueError, OSError):
                current = signal.getsignal(number)
                # ours already: left on by an installation that ended off the main thread
                if current is not self._handler and not self._depth and self._over(number, current):
                    signal.signal(number, self._handler)
                    self._kept[number] = current
        if not self._ours():
            return False
        self._depth += 1
        return True

    def release(self) -> None:
        """End one installation; the outermost puts the replaced handlers back."""
        self._depth -= 1
        # a stream closed by the garbage collector may end off the main thread
        if self._depth == 0 and threading.current_thread() is threading.main_thread():
            lingering = self._lingers is not None and self._lingers()
            self.restore(keep=self._linger if lingering else frozenset())

    def restore(self, keep: frozenset[str] = frozenset(), only: int | None = None) -> None:
        """Put back the handlers replaced, on the signals where ours still is (but `keep`;
        `only`: that signal's alone)."""
        for number, previous in list(self._kept.items()):
            if number.name in keep or only not in (None, number):
                continue
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(number) is self._handler:
                    signal.signal(number, previous)
                del self._kept[number]

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The handlers, while the body runs."""
        installed = self.install()
        try:
            yield
        finally:
            if installed:
                self.release()


# -- a script's facade call ---------------------------------------------------------------


def note_line(signum: signal.Signals, then: str = "") -> None:
    """Say on stderr that the calls are being finished, and how to abandon them (one line)."""
    again = "press Ctrl+C again" if signum == signal.SIGINT else "send it again"
    say_line(
        f"{signum.name}: finishing the calls this process's worker runs "
        f"(up to {calls_grace():g} s){then}; {again} to abandon them "
        "(the next worker runs them again)"
    )


def _drain_then_end(signum: signal.Signals) -> None:
    """Stop the embedded workers as the exit hook does (the SDK's graceful shutdown: calls in
    flight finish and are recorded), then act as the signal's default: SIGTERM and SIGHUP end
    the process, SIGINT raises KeyboardInterrupt (in the facade call, which ends).

    The same signal again meanwhile meets the handler replaced (the default): it abandons the
    calls and ends the process at once, a second Ctrl+C as well (its KeyboardInterrupt, raised here,
    left the worker's shutdown to the exit hook, which cut the calls off with the SDK's
    tracebacks).

    Under `asyncio.run`, Ctrl+C then goes to asyncio's handler (back on by now), which
    cancels the main task: `asyncio.run` raises KeyboardInterrupt, as it would have. Before,
    asyncio's handler took it alone: a traceback, then a silent wait while the exit hook
    finished the calls, and a second Ctrl+C only got the line saying a third abandons them.
    During the drain a second Ctrl+C meets Python's default, to abandon them as in `run()`
    (asyncio's handler would only cancel the main task again). Another signal meanwhile is
    noted (`_drain_noted`): a SIGTERM or SIGHUP after Ctrl+C ends the process by it then.
    """
    from agentor_temporal._live import say_left_open
    from agentor_temporal._runtime import Runtime

    runner = signal.getsignal(signum) if signum == signal.SIGINT else None
    if not asyncio_runs(runner):
        runner = None
    runtime = Runtime._instance
    _then.clear()
    if runtime is not None and runtime.serving():
        # recorded before the line says it: another signal while it is written is noted
        # (`_drain_noted`), not taken for one coming after the drain
        _then.append(signum)
        note_line(signum, ", then stopping" if signum == signal.SIGINT else ", then exiting")
        try:
            if runner is not None:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            runtime.stop_workers(exit_drain())
        except KeyboardInterrupt:
            end_by(signal.SIGINT)
        finally:
            if runner is not None and signal.getsignal(signum) is signal.default_int_handler:
                signal.signal(signum, runner)
        # a SIGTERM or SIGHUP during a Ctrl+C's drain (`_drain_noted`) ends the process now
        signum = ending_signal(_then)
        _then.clear()
        if signum != signal.SIGINT:
            runner = None
    if callable(runner) and not _blocking:
        runner(signum, None)
        return
    if signum == signal.SIGINT:
        # a sync call blocking the main thread (inside a coroutine under `asyncio.run`, a
        # notebook cell) gets KeyboardInterrupt itself: asyncio's handler only cancels the
        # main task, which cannot run while the call blocks its loop, and the call then
        # waited for ever on a run whose worker had just stopped
        raise KeyboardInterrupt
    if runtime is not None:
        # no exit hook runs: the runs the process's callers waited on are named now
        say_left_open(runtime, ending=True)
    end_by(signum)


#: The signals noted during the drain under way, the first its own (empty: none under way).
_then: list[signal.Signals] = []


def ending_signal(noted: list[signal.Signals]) -> signal.Signals:
    """Which of the signals `noted` (in order) a process ends by: the first that ends one
    (SIGTERM, SIGHUP), else the first (SIGINT)."""
    return next((s for s in noted if s != signal.SIGINT), noted[0])


def _drain_noted(signum: signal.Signals) -> None:
    """Another signal after the first (`_DRAINING`'s `again`): while that one's drain is under
    way, a line says so, and the process ends by it once the calls are done if it is one that
    ends a process; after the drain, it acts as the default (the calls are done)."""
    if not _then:
        end_by(signum)
        return
    _then.append(signum)
    note_line(signum, ", then exiting" if ending_signal(_then) != signal.SIGINT else "")


#: Following `asyncio.Runner`'s precedent for SIGINT: only while a facade
#: call runs, only over Python's own (the default; for SIGINT also
#: `asyncio.run`'s, which is asked after the drain); the CLI's handler is left alone too.
#: SIGHUP (the terminal closed, an ssh session dropped) as SIGTERM: by its
#: default, a script's tool was cut off mid-call and the next worker ran it
#: again. Ctrl+C too: by its default, KeyboardInterrupt left the call the
#: worker ran to the exit hook, which finished it silently after a traceback
#: from the wait's locks. Each missing on a platform (SIGHUP on Windows) is skipped.
#: SIGTERM and SIGHUP stay so after the call while the embedded workers serve (for a while
#: after it, or runs started to go on: `astart`, a stream left) and the script goes on with
#: its own work: their calls in flight then (the transfer just approved) were cut off by the
#: default, and the next worker made them again. Ours acts as the default once they stopped.
#: Ctrl+C outside a call raises KeyboardInterrupt, and the exit hook finishes the calls.
_DRAINING = NoteFirst(
    ("SIGINT", "SIGTERM", "SIGHUP"),
    _drain_then_end,
    over=over_python,
    again=_drain_noted,
    linger=("SIGTERM", "SIGHUP"),
    lingers=lambda: _serving(),
)


def _serving() -> bool:
    """Whether this process's embedded workers serve (or are still stopping)."""
    from agentor_temporal._runtime import Runtime

    runtime = Runtime._instance
    return runtime is not None and runtime.serving()


def over_default_or_draining(signum: signal.Signals, current: Handler) -> bool:
    """`over_default`, or the drain's own handler left on after a call (`_DRAINING`)."""
    return over_default(signum, current) or current is _DRAINING._handler


#: How many sync facade calls the main thread is blocked in now (`blocking_main`).
_blocking = 0


@contextlib.contextmanager
def blocking_main() -> Iterator[None]:
    """Count the body as a sync facade call blocking the main thread (elsewhere: nothing)."""
    global _blocking
    main = threading.current_thread() is threading.main_thread()
    if main:
        _blocking += 1
    try:
        yield
    finally:
        if main:
            _blocking -= 1


def draining_on_sigterm() -> AbstractContextManager[None]:
    """While the body runs, SIGINT, SIGTERM or SIGHUP drains the embedded workers, then acts.

    SIGTERM and SIGHUP then end the process by that signal; SIGINT raises
    KeyboardInterrupt. Does nothing outside the main thread, nor for a
    signal that already has a handler other than the default (Python's
    signal API allows handlers only in the main thread; another handler is
    the application's decision).
    """
    return _DRAINING.installed()


# -- a script's exit ----------------------------------------------------------------------

#: Signals whose default would end the process mid-drain at exit, by name
#: (SIGHUP is missing on Windows)
EXIT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def patient_exit(
    draining: bool, noted: Callable[[signal.Signals], None] | None = None
) -> AbstractContextManager[None]:
    """While the exit hook drains the embedded workers, a first interrupt is noted, not obeyed.

    A script's main thread has returned, and its worker finishes the calls it
    runs (an approved transfer, say), perhaps for threads still in an agent
    call. A Ctrl+C, SIGTERM or SIGHUP then, with Python's default handling,
    cut the call off and the next worker ran it again. The first one now
    says what the process is finishing and is passed to `noted` (the hook
    stops waiting for those threads' runs to end, and ends the process by it
    once the calls are done); a second acts as the default does. Only in the
    main thread, and only over the default handlers (an application's own
    are left alone).
    """
    if not draining:
        return contextlib.nullcontext()

    def note(signum: signal.Signals) -> None:
        # recorded before the line says it: another signal while the line is written (its
        # handler runs nested) is noted after this one, not before it
        if noted is not None:
            noted(signum)
        note_line(signum, ", then exiting")

    return NoteFirst(EXIT_SIGNALS, note, over=over_default_or_draining).installed()
