"""Helpers shared by the activities: heartbeating and error text."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from temporalio import activity

from agentor_temporal.workflows.policies import HEARTBEAT_INTERVAL

#: Longest error text passed back to the model or into an event.
MAX_ERROR_CHARS = 4_000


@contextlib.asynccontextmanager
async def heartbeating(interval: float = HEARTBEAT_INTERVAL.total_seconds()) -> AsyncIterator[None]:
    """Heartbeat from a background task while the body awaits one long call.

    A model request or a tool is one long await; without this, a worker that
    dies mid-call is noticed only when start-to-close expires (minutes), not
    after the short heartbeat timeout. Calls shorter than `interval` never
    heartbeat at all, which keeps the server's load flat at high concurrency.
    """
    from agentor_temporal.activities._joining import IN_SHARED_CALL

    # a shared call (see LiveCalls) is beaten for by the attempts awaiting it
    if not activity.in_activity() or IN_SHARED_CALL.get():
        yield
        return
    # The heartbeat timeout runs from when the server handed the task out;
    # a busy worker may start the body seconds later. Beating on the
    # server's clock (at once, if late) keeps such a call from being timed
    # out while it runs, and costs nothing when the worker is idle.
    started = activity.info().started_time
    lag = max(0.0, time.time() - started.timestamp()) if started else 0.0

    async def beat() -> None:
        await asyncio.sleep(max(0.0, interval - lag))
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def waited() -> float:
    """Seconds since the running activity was first scheduled (0 outside a worker).

    Retries of one call share this clock, so budgets measured on it (how long
    a provider may keep failing, how long a task waits for the right worker)
    do not restart with each attempt.
    """
    if not activity.in_activity():
        return 0.0
    first = activity.info().scheduled_time.timestamp()
    return max(0.0, time.time() - first) if first > 0 else 0.0


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` cut to `limit` characters, saying so when it was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [truncated {len(text) - limit} characters]"
