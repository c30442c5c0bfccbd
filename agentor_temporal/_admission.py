"""Activity admission: a worker accepts a call only when it can start it promptly.

The server starts an activity's heartbeat clock when it hands the task to a
worker, but the worker's Python side takes tasks from the SDK core one at a
time through its event loop. With a fixed number of slots, a busy worker
accepted up to that many tasks ahead of Python; measured here with 100 runs
in flight on one worker (model latency 0), a model call waited a median 3.6 s
and up to 8 s between the server starting it and Python starting it, so its
heartbeat timeout fired while the worker was alive and the model was asked
again (18% of calls). `PromptStartSlots` bounds that backlog instead of the
number of calls: a slot is granted only while fewer than `backlog` granted
slots have not yet reached Python, so an accepted call waits a fraction of a
second, the rest stay on the server (where no clock runs) for this worker
to take later or another worker to take now, and the number of calls that
may be running at once (a model call is an await, not a thread) is `maximum`.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    CustomSlotSupplier,
    ExecuteActivityInput,
    FixedSizeSlotSupplier,
    Interceptor,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    WorkerTuner,
)

from agentor_temporal.workflows.policies import (
    ACTIVITY_BACKLOG,
    MAX_CONCURRENT_ACTIVITIES,
    MAX_CONCURRENT_LOCAL_ACTIVITIES,
    MAX_CONCURRENT_WORKFLOW_TASKS,
)

__all__ = ["PromptStartSlots", "admission"]


class PromptStartSlots(CustomSlotSupplier):
    """Activity slots granted only while the calls already granted are starting promptly.

    Granted slots are: reserved for a poll that has not returned a task yet,
    holding a task that Python has not started, running in Python, or done
    and about to be released. Everything but "running" is backlog; a slot is
    granted while the backlog is under `backlog` and the total under `maximum`.

    Args:
        maximum: calls running at once on this worker.
        backlog: granted slots that have not reached Python yet. It must
            exceed what an idle worker's core holds for its pollers (6 with
            the SDK's defaults), or no call is ever dispatched eagerly.
    """

    def __init__(self, maximum: int, backlog: int) -> None:
        if backlog < 1 or maximum < backlog:
            raise ValueError(f"need 1 <= backlog <= maximum (got {backlog}, {maximum})")
        self.maximum = maximum
        self.backlog = backlog
        # counters change on the event loop (reserve, start, finish) and on the
        # SDK core's threads (try_reserve for eager calls, release)
        self._lock = threading.Lock()
        self._granted = 0
        self._running = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._waiting = 0

    # -- what Python does with the calls ----------------------------------------

    def started(self) -> None:
        """A call's body started in Python (its slot is no longer backlog)."""
        with self._lock:
            self._running += 1
        self._notify()

    def finished(self) -> None:
        """A call's body returned (its slot is released right after)."""
        with self._lock:
            self._running -= 1

    @property
    def pending(self) -> int:
        """Granted slots whose call has not started in Python (or was never taken)."""
        with self._lock:
            return self._granted - self._running

    def _admit(self) -> bool:
        return self._granted < self.maximum and self._granted - self._running < self.backlog

    def _notify(self) -> None:
        loop, changed = self._loop, self._changed
        if self._waiting and loop is not None and changed is not None:
            try:
                loop.call_soon_threadsafe(changed.set)
            except RuntimeError:  # the loop is closed: the worker is gone
                pass

    # -- the SDK's slot supplier interface ----------------------------------------

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        """Wait until a call granted now would start promptly, then grant it."""
        if self._changed is None:
            self._loop = asyncio.get_running_loop()
            self._changed = asyncio.Event()
        changed = self._changed
        while True:
            # cleared before checking: a change notified after this check
            # sets it again, so the wait below cannot miss it
            changed.clear()
            with self._lock:
                if self._admit():
                    self._granted += 1
                    return SlotPermit()
                self._waiting += 1
            try:
                await changed.wait()
            finally:
                with self._lock:
                    self._waiting -= 1

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        """For an eager call (handed back with a workflow task): grant it only if it starts now."""
        with self._lock:
            if not self._admit():
                return None
            self._granted += 1
        return SlotPermit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        """Nothing to do: a used slot stays backlog until Python starts its call."""

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        """A slot came back (its call finished, or its poll ended empty)."""
        with self._lock:
            self._granted -= 1
        self._notify()


class _StartedInterceptor(Interceptor):
    """Tells `PromptStartSlots` when a call reaches Python and when it is done."""

    def __init__(self, slots: PromptStartSlots) -> None:
        self.slots = slots

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Started(next, self.slots)


class _Started(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, slots: PromptStartSlots) -> None:
        super().__init__(next)
        self.slots = slots

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().is_local:  # local activities have slots of their own
            return await self.next.execute_activity(input)
        self.slots.started()
        try:
            return await self.next.execute_activity(input)
        finally:
            self.slots.finished()


def admission() -> tuple[WorkerTuner, Interceptor, PromptStartSlots]:
    """A worker tuner with `PromptStartSlots` for activities, and the interceptor it needs.

    Returns:
        The tuner (for `Worker(tuner=...)`), the interceptor to add to the
        worker's interceptors, and the activity slot supplier (for metrics).
    """
    slots = PromptStartSlots(MAX_CONCURRENT_ACTIVITIES, ACTIVITY_BACKLOG)
    tuner = WorkerTuner.create_composite(
        workflow_supplier=FixedSizeSlotSupplier(MAX_CONCURRENT_WORKFLOW_TASKS),
        activity_supplier=slots,
        local_activity_supplier=FixedSizeSlotSupplier(MAX_CONCURRENT_LOCAL_ACTIVITIES),
        nexus_supplier=FixedSizeSlotSupplier(MAX_CONCURRENT_WORKFLOW_TASKS),
    )
    return tuner, _StartedInterceptor(slots), slots
