"""When a run waiting for people must stop: its history nears Temporal's limits.

A waiting run cannot continue as new, and each signal or accepted update sent
to it adds history (`policies.PAUSE_STOPS_SHORT`), each signal to a count
Temporal caps (`policies.PAUSE_COUNTS_SIGNALS`). `pause_overgrown` says so;
`PauseWatch` asks it once for all the calls waiting (from
`policies.PAUSE_WATCHED_ONCE`): asked in every call's wait, a turn of 320
calls waiting asked it 100,000 times, past the SDK's 2 s deadlock limit in
one workflow task, and the task failed with decisions in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.history_watch import history_now
from agentor_temporal.workflows.versions import level


def pause_overgrown() -> str | None:
    """Why the run must stop waiting for a person, or None.

    Read from the workflow task's info and the signals taken: deterministic,
    and no command.
    """
    if level() < policies.PAUSE_STOPS_SHORT:
        return None
    # counted by the workflow's signal handlers (`AgentRunWorkflow._signalled`)
    signals = int(getattr(workflow.instance(), "signals", 0))
    if level() >= policies.PAUSE_COUNTS_SIGNALS and signals >= policies.PAUSED_SIGNALS:
        return (
            f"it took {signals:,} signals (it stops at {policies.PAUSED_SIGNALS:,}: "
            f"Temporal refuses an execution's signals past 10,000, and a decision sent "
            f"by signal could no longer reach it)"
        )
    size, events = history_now()
    if size <= policies.PAUSED_HISTORY_BYTES and events <= policies.PAUSED_HISTORY_EVENTS:
        return None
    return (
        f"its history reached {size / 1e6:.1f} MB and {events:,} events while it waited "
        f"(it stops at {policies.PAUSED_HISTORY_BYTES / 1e6:g} MB or "
        f"{policies.PAUSED_HISTORY_EVENTS:,} events)"
    )


class PauseWatch:
    """One watcher for every call waiting: `why` is set once the pause must stop.

    The calls' waits read `why` (an attribute) instead of each asking
    `pause_overgrown`. The watcher is a condition that issues no command, and
    it ends once no call waits (`waiting()` false).
    """

    def __init__(self) -> None:
        #: why the pause must stop (`pause_overgrown`), once it must
        self.why: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, waiting: Callable[[], bool]) -> None:
        """Watch while `waiting()` holds, unless a watcher already does."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._watch(waiting))

    async def _watch(self, waiting: Callable[[], bool]) -> None:
        await workflow.wait_condition(lambda: not waiting() or self._grown())

    def _grown(self) -> bool:
        self.why = pause_overgrown()
        return self.why is not None
