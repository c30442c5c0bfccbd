"""When a process with embedded workers exits: its hook's place, its time limits, its waits.

A script's main thread returns while its embedded worker may still run a
call (an approved transfer, say). The runtime's exit hook drains that
worker; the design decision is *when* the hook runs: first of all, as the
main thread ends (`at_interpreter_exit`), before thread pools refuse work
and before the interpreter joins the non-daemon threads still calling in,
which the hook waits for itself (`Callers`). What an interrupt does
meanwhile is `_sigterm`'s part.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import concurrent.futures.thread  # its exit hook must be registered before ours
import contextlib
import os
import queue
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentor_temporal._ending import say_line

T = TypeVar("T")

#: What a `ThreadPoolExecutor`'s worker threads run (their `Thread._target`).
_pool_worker = getattr(concurrent.futures.thread, "_worker", None)

#: How much longer than the workers' graceful shutdown the exit hook waits for
#: them: the SDK's cancellation after it, which hands the task back.
EXIT_MARGIN = 10.0
#: How long the exit hook leaves the SDK's core threads, once everything is
#: cancelled, to finish what they were running for Python. Each finished
#: future takes the GIL once more on a core thread; if that happens after
#: interpreter finalization began, the process aborts ("Fatal Python error:
#: PyGILState_Release", temporalio/sdk-python#300): about 1 in 300 short
#: scripts did, 0 in 1,200 since (`tests/integration/test_exit_scripts.py`
#: six times). A core thread needs well under a millisecond for it; the
#: margin is for a loaded machine.
EXIT_SETTLE = 0.25


def calls_grace() -> float:
    """Seconds an embedded worker's calls get to finish as it stops: its graceful shutdown.

    That is `AGENTOR_GRACEFUL_SHUTDOWN` where set (the README's setting for
    tools longer than 30 s), as for any worker. A fixed wait of its own cut
    the drain short of it: a 60 s tool of a script whose setting said 90 was
    abandoned at 40 s, and the next worker ran it again. A bad value is the
    worker's error to report (it refuses to start); here the default stands.
    """
    from agentor_temporal.plugin import ConfigError, graceful_shutdown
    from agentor_temporal.workflows.policies import GRACEFUL_SHUTDOWN

    try:
        return graceful_shutdown().total_seconds()
    except ConfigError:
        return GRACEFUL_SHUTDOWN.total_seconds()


def exit_drain() -> float:
    """How long the exit hook waits for the embedded workers to stop: `calls_grace`, a margin."""
    return calls_grace() + EXIT_MARGIN


def at_interpreter_exit(callback: Callable[[], Any]) -> None:
    """Call `callback` as the interpreter starts to exit, before thread pools shut down.

    `threading._register_atexit` callbacks run (latest first) when the main
    thread ends, before non-daemon threads are joined and before `atexit`
    handlers. `concurrent.futures.thread` registers there too, when it is
    first imported (lazily, by the first thread pool made): imported at the
    top of this module, its hook is registered before ours and so runs after
    it. So is the sync-tool threads' hook (`activities._threads`, imported
    with the activities), which refuses new tool calls: the embedded
    workers' in-flight calls are drained first. Falls back to `atexit` where
    the hook is missing.
    """
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(callback)
            return
        except RuntimeError:  # the interpreter is already shutting down
            pass
    atexit.register(callback)


class Callers:
    """The non-daemon threads that called in, which the exit hook lets finish first.

    The interpreter waits for non-daemon threads, but only after the exit
    hook: draining first cut their calls off (a web framework's worker
    thread in `agent.run()` got a CancelledError, its run left to another
    worker). A thread pool's worker (`ThreadPoolExecutor.submit(agent.run,
    ...)`) is waited for only while it is in a call or its pool has work
    queued: idle, it lives until the pool's own exit hook, which runs after
    this one, and the wait for its end never ended (the script hung at exit).
    """

    #: How often the wait looks whether it was told to stop (by a signal's handler).
    POLL = 0.05

    def __init__(self) -> None:
        self._threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        #: calls under way, by thread (a thread's calls may nest: async ones on its loop)
        self._calls: weakref.WeakKeyDictionary[threading.Thread, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Note the current thread (unless a daemon: the process never waits for it) and
        that it is in a call while the body runs."""
        current = threading.current_thread()
        if current.daemon:
            yield
            return
        with self._lock:
            self._threads.add(current)
            self._calls[current] = self._calls.get(current, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._calls[current] -= 1

    def _busy(self, thread: threading.Thread) -> bool:
        """Whether the exit hook waits for `thread` now: alive and, if a pool's, working."""
        if not thread.is_alive() or thread is threading.current_thread():
            return False
        if getattr(thread, "_target", None) is not _pool_worker:
            return True
        # _worker(executor_reference, work_queue, initializer, initargs)
        queued = any(
            isinstance(arg, queue.SimpleQueue) and not arg.empty()
            for arg in getattr(thread, "_args", ())
        )
        return queued or self._calls.get(thread, 0) > 0

    def waiting(self) -> bool:
        """Whether another thread noted is still busy (`join` would wait for it)."""
        with self._lock:
            return any(self._busy(t) for t in self._threads)

    def stop_waiting(self) -> None:
        """End a `join` under way (callable from a signal handler)."""
        self._stop.set()

    def join(self, raised: Interruptions | None = None) -> None:
        """Wait for the other threads noted, until `stop_waiting` or a Ctrl+C; never the drain.

        An exception a script's own signal handler raises meanwhile ends the wait as a signal
        does, and is passed to `raised` (without it, ignored).
        """
        with self._lock:
            others = list(self._threads)
        try:
            for thread in others:
                # in steps: a signal's handler ends the wait by `stop_waiting`
                while not self._stop.is_set():
                    with self._lock:
                        busy = self._busy(thread)
                    if not busy:
                        break
                    thread.join(self.POLL)
        except KeyboardInterrupt:
            pass
        except BaseException as exc:  # noqa: B036 - a handler's SystemExit, say: noted
            if raised is not None:
                raised.note(exc)


class Interruptions:
    """Exceptions a script's own signal handler raises into the exit hook's waits, noted.

    `signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))` is a common way to
    stop a script (a container's SIGTERM): that SystemExit, raised while the exit
    hook waited for the embedded worker to finish its calls, ended the hook with
    an "Exception ignored" traceback, and the interpreter then cut the calls off:
    the next worker ran the tool again. Now the first is noted in one line and the
    wait goes on; a second abandons the calls and ends the process at once, as a
    second signal does (with a SystemExit's status, if it is one).
    """

    def __init__(self, grace: Callable[[], float]) -> None:
        self._grace = grace
        self.seen: list[BaseException] = []

    def note(self, exc: BaseException) -> None:
        """Take `exc` (raised into a wait): the first is said, a second ends the process."""
        self.seen.append(exc)
        what = _raised(exc)
        if len(self.seen) > 1:
            _say(
                f"{what} again while this process's worker finished its calls at exit: "
                "abandoning them (the next worker runs them again)"
            )
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os._exit(self.status() if self.exiting() else 1)
        _say(
            f"{what} while this process exits (from a signal handler of its own): finishing "
            f"the calls its worker runs first (up to {self._grace():g} s), then exiting; "
            "send the signal again to abandon them (the next worker runs them again)"
        )

    @contextlib.contextmanager
    def guarding(self, draining: bool) -> Iterator[None]:
        """While the body runs, what a script's own signal handler raises is noted (`note`)
        wherever the main thread is, not only in the waits wrapped below: one raised between
        two of them (the hook writing its line to a full stderr pipe) ended the hook, and the
        interpreter cut the calls off. Handlers of this package's own, Python's Ctrl+C and a
        handler's KeyboardInterrupt keep their own handling. Main thread only."""
        wrapped: dict[int, Callable[[int, Any], Any]] = {}
        if draining and threading.current_thread() is threading.main_thread():
            for number in signal.valid_signals():
                with contextlib.suppress(ValueError, OSError, TypeError):
                    handler = signal.getsignal(number)
                    if callable(handler) and _scripts_own(handler):
                        wrapped[number] = self._guarded(handler)
                        signal.signal(number, wrapped[number])
        try:
            yield
        finally:
            for wrapped_number, guard in wrapped.items():
                with contextlib.suppress(ValueError, OSError, TypeError):
                    if signal.getsignal(wrapped_number) is guard:
                        signal.signal(wrapped_number, getattr(guard, "__wrapped__", signal.SIG_DFL))

    def _guarded(self, handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
        def guarded(signum: int, frame: Any) -> Any:
            try:
                return handler(signum, frame)
            except KeyboardInterrupt:
                raise  # Ctrl+C has its own handling (`_sigterm.patient_exit`)
            except BaseException as exc:  # noqa: B036 - a handler's SystemExit, say: noted
                self.note(exc)
                return None

        guarded.__wrapped__ = handler  # type: ignore[attr-defined]
        return guarded

    def exiting(self) -> bool:
        """Whether a SystemExit was noted (the handler asked the process to end so)."""
        return any(isinstance(exc, SystemExit) for exc in self.seen)

    def status(self) -> int:
        """The exit status the first SystemExit noted asks for (0 when none did)."""
        for exc in self.seen:
            if isinstance(exc, SystemExit):
                code = exc.code
                return code if isinstance(code, int) else (0 if code is None else 1)
        return 0

    def result(self, future: concurrent.futures.Future[T], timeout: float) -> T:
        """`future.result(timeout)`, noting what a signal handler raises meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(max(0.0, deadline - time.monotonic()))
            except KeyboardInterrupt:
                raise  # Ctrl+C has its own handling (`_sigterm.patient_exit`)
            except BaseException as exc:
                # the future's own outcome, or its time up: not an interruption
                if future.done() or time.monotonic() >= deadline:
                    raise
                self.note(exc)

    def join(self, thread: threading.Thread, timeout: float) -> None:
        """`thread.join(timeout)`, noting what a signal handler raises meanwhile."""
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread.join(max(0.0, deadline - time.monotonic()))
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: B036 - a handler's SystemExit, say: noted
                self.note(exc)


def _scripts_own(handler: object) -> bool:
    """Whether `handler` is a Python signal handler of the script's own (not this package's,
    not Python's Ctrl+C, not the default or ignoring)."""
    if not callable(handler) or handler is signal.default_int_handler:
        return False
    return not str(getattr(handler, "__module__", "") or "").startswith("agentor_temporal")


def _raised(exc: BaseException) -> str:
    """`exc` as the line names it: "SystemExit(0)", "RuntimeError('stop')"."""
    return f"{type(exc).__name__}({', '.join(repr(a) for a in exc.args)})"


def _say(line: str) -> None:
    say_line(f"agentor_temporal: {line}")
