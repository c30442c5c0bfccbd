"""The threads sync tools run in: daemon threads, and a timeout abandons one.

Python cannot stop a thread, so a sync tool that runs past its timeout goes
on running after the model has been answered. A `ThreadPoolExecutor` made
that a process-wide problem: its threads are joined at interpreter exit (a
script whose tool hung never exited), and a hung call kept its thread, so
after `limit` of them every later call waited behind them and "timed out"
without ever having started. Here a call that times out is abandoned: its
thread no longer counts against `limit` (a new one is started for the next
call), it rejoins the pool if it ever returns, and, being a daemon thread,
it never holds up the process's exit. The number of calls running at once
that count is still bounded by `limit`, as the pool's size bounded it.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

#: Set as the interpreter starts to exit: new calls are refused from then on
#: (`concurrent.futures` refuses new work at the same point).
_exiting = False


class ToolCall:
    """One call handed to `ToolThreads`: when it started, and its outcome."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        #: resolves (to None) when a thread starts the call; fails with a
        #: RuntimeError if the pool shut down before any thread did.
        #: Cancelling it before then withdraws the call: it never runs.
        self.started: concurrent.futures.Future[None] = concurrent.futures.Future()
        #: what the call returned or raised; never cancelled (a call running
        #: in a thread cannot be), so it is marked running from the start
        self.outcome: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.outcome.set_running_or_notify_cancel()
        # the fields below change under the pool's lock
        self.state = "queued"  # then "running", then "done"
        self.abandoned = False

    def _run(self) -> None:
        if not self.started.set_running_or_notify_cancel():
            return
        self.started.set_result(None)
        try:
            value = self.fn()
        except StopIteration as exc:
            # asyncio cannot take a StopIteration into its Future (a TypeError
            # in the loop's callback): the caller was never woken, and the run
            # waited out the tool's timeout (30 minutes by default)
            detail = f": {exc}" if str(exc) else ""
            stopped = RuntimeError(f"the tool raised StopIteration{detail}")
            stopped.__cause__ = exc
            self.outcome.set_exception(stopped)
        except BaseException as exc:  # noqa: B036 - the caller decides what it means
            self.outcome.set_exception(exc)
        else:
            self.outcome.set_result(value)


class ToolThreads:
    """Daemon threads for sync tools; a call abandoned by its timeout frees its place.

    Args:
        limit: calls running at once, not counting abandoned ones. A call
            submitted while `limit` are running waits for one to end (or
            to be abandoned).
        name: prefix of the threads' names.
    """

    def __init__(self, limit: int, name: str = "agentor-tool") -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self.name = name
        self._lock = threading.Lock()
        self._backlog: collections.deque[ToolCall] = collections.deque()
        #: threads that count against the limit: idle, or running a call
        #: that was not abandoned
        self._counted = 0
        #: a hand-off queue per idle thread (None tells the thread to end)
        self._idle: list[queue.SimpleQueue[ToolCall | None]] = []
        self._abandoned = 0
        self._made = 0
        self._shutdown = False

    @property
    def running(self) -> int:
        """Calls running now that count against the limit."""
        with self._lock:
            return self._counted - len(self._idle)

    @property
    def abandoned(self) -> int:
        """Calls abandoned by a timeout whose threads are still running."""
        with self._lock:
            return self._abandoned

    def submit(self, fn: Callable[[], Any]) -> ToolCall:
        """Run `fn` in a thread: an idle one, a new one, or the next one free.

        Raises:
            RuntimeError: the pool (or the interpreter) is shutting down; the
                call never runs.
        """
        call = ToolCall(fn)
        with self._lock:
            if self._shutdown or _exiting:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                call.state = "running"
                self._idle.pop().put(call)
            elif self._counted < self.limit:
                self._start(call)  # RuntimeError: not started, handed back
                call.state = "running"
            else:
                self._backlog.append(call)
        return call

    def cancel(self, call: ToolCall) -> bool:
        """Withdraw a call no thread has started; False if one already has."""
        with self._lock:
            if call.state != "queued":
                return False
            self._backlog.remove(call)
            call.state = "done"
        call.started.cancel()
        call.outcome.set_exception(RuntimeError("withdrawn before it started"))
        return True

    def abandon(self, call: ToolCall) -> bool:
        """Stop counting a running call against the limit (its caller gave up on it).

        Returns:
            True if its thread is still running it, False if it already ended
            (its outcome is then in `call.outcome`) or never started.
        """
        with self._lock:
            if call.state != "running" or call.abandoned or call.outcome.done():
                return False
            call.abandoned = True
            self._counted -= 1
            self._abandoned += 1
            if self._backlog:
                nxt = self._backlog.popleft()
                nxt.state = "running"
                try:
                    self._start(nxt)
                except RuntimeError:  # it waits on for a thread that ends
                    nxt.state = "queued"
                    self._backlog.appendleft(nxt)
        return True

    def shutdown(self) -> None:
        """Refuse new calls; queued ones fail unstarted, running ones run on."""
        with self._lock:
            self._shutdown = True
            idle, self._idle = self._idle, []
            self._counted -= len(idle)
            backlog = list(self._backlog)
            self._backlog.clear()
            for call in backlog:
                call.state = "done"
        for hand_off in idle:
            hand_off.put(None)
        for call in backlog:
            if call.started.set_running_or_notify_cancel():
                call.started.set_exception(
                    RuntimeError("cannot schedule new futures after shutdown")
                )
            call.outcome.set_exception(RuntimeError("not started before shutdown"))

    # -- the threads ------------------------------------------------------------

    def _start(self, call: ToolCall) -> None:
        # under the lock; raises RuntimeError (the call's state is the caller's to undo)
        self._counted += 1
        self._made += 1
        thread = threading.Thread(
            target=self._work,
            args=(call,),
            name=f"{self.name}_{self._made}",
            # a thread a hung tool holds must never keep the process alive;
            # in-flight calls are drained before exit by the worker's
            # graceful shutdown (see agentor_temporal._runtime), not by this
            daemon=True,
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (limits, or the interpreter exiting)
            self._counted -= 1
            raise

    def _work(self, call: ToolCall | None) -> None:
        while call is not None:
            call._run()
            call = self._next(call)

    def _next(self, finished: ToolCall) -> ToolCall | None:
        with self._lock:
            finished.state = "done"
            if finished.abandoned:
                self._abandoned -= 1
                if self._shutdown or self._counted >= self.limit:
                    return None  # its place was given to another thread
                self._counted += 1
            if self._backlog:
                nxt = self._backlog.popleft()
                nxt.state = "running"
                return nxt
            if self._shutdown:
                self._counted -= 1
                return None
            hand_off: queue.SimpleQueue[ToolCall | None] = queue.SimpleQueue()
            self._idle.append(hand_off)
        return hand_off.get()


def _at_exit() -> None:
    global _exiting
    _exiting = True


# Registered when this module is first imported, which is before the facade's
# runtime registers its own exit hook (it imports the activities at its top):
# these hooks run latest first, so the runtime drains its embedded workers'
# in-flight calls, sync tools included, before new calls are refused here.
_register = getattr(threading, "_register_atexit", None)
try:
    if _register is None:
        raise RuntimeError
    _register(_at_exit)
except RuntimeError:  # no such hook, or the interpreter is already exiting
    atexit.register(_at_exit)
