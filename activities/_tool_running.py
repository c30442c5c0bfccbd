"""Running a tool's body (or an approval predicate) within its limits.

A sync body runs in one of the worker's `ToolThreads`, an async one on the
loop; both within the call's timeout. A thread cannot be stopped: a call
that times out, or whose caller is cancelled, is abandoned (it runs on, its
result discarded) without taking a place from later calls. The exceptions
here say which of those endings the model is told about (`ToolTimedOut`)
and which are no outcome of the tool's (`PoolUnavailable`, `NoThreadFree`).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from agentor_temporal.activities._contained import exited_in
from agentor_temporal.activities._errors import run_cancelled
from agentor_temporal.activities._threads import ToolThreads
from agentor_temporal.workflows.policies import (
    BLOCKING_STEP,
    CANCEL_GRACE,
    SYNC_TOOL_THREAD_WAIT,
    SYNC_TOOL_THREADS,
)


class ToolTimedOut(Exception):
    """The tool ran past its timeout (its own outcome: the model is told)."""


class PoolUnavailable(Exception):
    """The thread pool refused the call (its worker is shutting down): not the tool's outcome."""


class NoThreadFree(Exception):
    """No sync-tool thread came free in time; the call never started: not the tool's outcome."""


def raise_exited(exc: Exception) -> None:
    """Raise the exit a tool's task carried out (`_contained`): here, in the caller's task,
    it is an answer; return when `exc` carries none."""
    original = exited_in(exc)
    if original is not None:
        raise original from None


_default: ToolThreads | None = None
_default_lock = threading.Lock()

#: When (epoch seconds) a call whose run stopped at its time limit must answer
#: (`CallToolInput.settle_by`): set around a call of a run with a limit.
settle_by: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "agentor_settle_by", default=None
)


def _grace_end(loop: asyncio.AbstractEventLoop) -> tuple[float, bool]:
    """When a run's cancel stops waiting for a sync call; whether its time limit set that."""
    grace = loop.time() + CANCEL_GRACE.total_seconds()
    limit = settle_by.get()
    if limit is None:
        return grace, False
    by_limit = loop.time() + max(0.0, limit - time.time())
    return min(grace, by_limit), by_limit < grace


def default_threads() -> ToolThreads:
    """The process's sync-tool threads for calls made without a registry's."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ToolThreads(SYNC_TOOL_THREADS)
        return _default


async def in_thread(threads: ToolThreads, fn: Callable[[], Any], timeout: float | None) -> Any:
    """Run a sync tool in one of `threads`; its timeout runs from when a thread starts it.

    Waiting for a thread is bounded apart (SYNC_TOOL_THREAD_WAIT): a call
    that never started is handed back (`NoThreadFree`), never answered
    "timed out". A call that times out, or whose caller is cancelled, is
    abandoned: its thread runs on but no longer counts against the pool;
    except that when the cancel is its run's (`run_cancelled`), the call's
    outcome is still waited for, once, to its timeout or CANCEL_GRACE, whichever
    comes first: the run records it (past the grace, that it was still running).
    """
    try:
        call = threads.submit(fn)
    except RuntimeError as exc:
        # "cannot schedule new futures after shutdown": the tool never
        # started, and this is no answer of the tool's
        raise PoolUnavailable(str(exc)) from exc
    started = asyncio.wrap_future(call.started)
    wait = SYNC_TOOL_THREAD_WAIT.total_seconds()
    outlived = False  # a cancel of the run's that the call outlives (at most one)
    try:
        done, _ = await asyncio.wait({started}, timeout=wait)
        if not done and threads.cancel(call):
            raise NoThreadFree(
                f"no thread came free for it within {wait:g} s ({threads.limit} sync tool "
                "calls were running); it did not start"
            )
        await started  # done, or a thread took it just now
    except RuntimeError as exc:  # the pool shut down before a thread took it
        raise PoolUnavailable(str(exc)) from exc
    except BaseException as exc:
        started.cancel()
        if threads.cancel(call):
            raise  # withdrawn: it never runs
        if not (isinstance(exc, asyncio.CancelledError) and run_cancelled()):
            threads.abandon(call)  # cancelled as it started: nobody waits for it
            raise
        # it started just as its run was cancelled: its outcome is waited for
        outlived = True
    outcome = asyncio.wrap_future(call.outcome)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    grace = CANCEL_GRACE.total_seconds()
    #: when a run's cancel stops waiting for the call (None: not cancelled), and
    #: whether the run's time limit leaves less than the grace
    given_up, by_limit = _grace_end(loop) if outlived else (None, False)
    while True:
        ends = [t for t in (deadline, given_up) if t is not None]
        left = max(0.0, min(ends) - loop.time()) if ends else None
        try:
            done, _ = await asyncio.wait({outcome}, timeout=left)
            break
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and not outlived and run_cancelled():
                # the run was cancelled, and a thread cannot be stopped: the
                # call's outcome is waited for (to its timeout, CANCEL_GRACE at
                # most), so the run records it instead of running the tool
                # again on resume
                outlived = True
                given_up, by_limit = _grace_end(loop)
                continue
            outcome.cancel()
            threads.abandon(call)  # cancelled: nobody waits for it any more
            raise
    if not done and threads.abandon(call):
        outcome.cancel()  # what it returns or raises later is dropped unseen
        if given_up is not None and by_limit and (deadline is None or given_up < deadline):
            raise ToolTimedOut(
                "was still running when its run stopped at its time limit; its thread was "
                "abandoned (it may still have effects; its result will be discarded)"
            )
        if given_up is not None and (deadline is None or given_up < deadline):
            raise ToolTimedOut(
                f"was still running {grace:g} s after its run was cancelled; its thread "
                "was abandoned (it may still have effects; its result will be discarded)"
            )
        raise ToolTimedOut(
            f"timed out after {timeout:g} s; its thread is still running and was "
            "abandoned (it may still have effects; its result will be discarded)"
        )
    return await outcome  # done, or it ended just as it timed out


@types.coroutine
def timed_steps(
    coro: Coroutine[Any, Any, Any], blocked: Callable[[float], None]
) -> Generator[Any, Any, Any]:
    """Await `coro`, calling `blocked` once if one of its steps held the loop `BLOCKING_STEP`.

    A step is what runs between two awaits that suspend; asyncio's debug
    mode times callbacks the same way (`slow_callback_duration`), but is off
    in production.
    """
    limit = BLOCKING_STEP.total_seconds()
    told = False
    sent: Any = None
    thrown: BaseException | None = None
    try:
        while True:
            started = time.monotonic()
            try:
                yielded = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as stop:
                return stop.value
            finally:
                took = time.monotonic() - started
                if took >= limit and not told:
                    told = True
                    blocked(took)
            try:
                sent, thrown = (yield yielded), None
            except GeneratorExit:
                raise
            except BaseException as exc:  # cancellation and the like: the coroutine's to handle
                sent, thrown = None, exc
    finally:
        coro.close()


async def bounded(awaitable: Any, timeout: float | None) -> Any:
    """Await `awaitable`, giving up after `timeout` seconds (None: no limit)."""
    future = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({future}, timeout=timeout)
    except BaseException:
        future.cancel()
        raise
    if not done:
        future.cancel()
        raise ToolTimedOut(f"timed out after {timeout:g} s")
    return future.result()
