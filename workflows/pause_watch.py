"""When a run waiting for people must stop: its history nears Temporal's limits.

A waiting run cannot continue as new, and each signal or accepted update sent
to it adds history (`policies.PAUSE_STOPS_SHORT`), each signal to a count
Temporal caps (`policies.PAUSE_COUNTS_SIGNALS`). `pause_overgrown` says so;
`PauseWatch` asks it once for all the calls waiting (from
`policies.PAUSE_WATCHED_ONCE`): asked in every call's wait, a turn of 320
calls waiting asked it 100,000 times, past the SDK's 2 s deadlock limit in
one workflow task, and the task failed with decisions in flight.

From `policies.PAUSE_COUNTS_TASKS` the watcher also counts what the run took
since it began to wait (signals and accepted updates, each at most a
workflow task): a fresh worker replays the whole history in one workflow
task, and a pause that took thousands of them outlasted the 5 s task timeout
on every attempt, so the pause stops at `policies.PAUSED_WAIT_TASKS`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.history_watch import history_now, taken, tasks_past
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


def wait_overgrown(since: int) -> str | None:
    """Why the pause must stop for the workflow tasks it took since `since`, or None."""
    took = tasks_past(since)
    if took is None:
        return None
    return (
        f"it took {took:,} signals and updates while it waited (it stops at "
        f"{policies.PAUSED_WAIT_TASKS:,}: each is a workflow task in its history, and a "
        f"worker that does not hold the run in memory replays the whole history in one "
        f"workflow task, which past a few thousand of them outlasts Temporal's workflow "
        f"task timeout, and the run could not go on)"
    )


def stopped_waiting(why: str, *, by_tasks: bool) -> str:
    """The error of a run whose pause stopped (`PauseOvergrown`), `why` being the reason."""
    limits = (
        ""  # the reason says why itself
        if by_tasks
        else " (every signal or update sent to a waiting run adds to its history, and "
        "Temporal terminates a run at 50 MB or 51,200 events)"
    )
    return (
        f"The run stopped while waiting for a person: {why}{limits}. The calls that ran "
        f"keep their results, the ones waiting did not run; resume continues the run, and "
        f"the model may ask for them again. Find what sent it so many signals or updates."
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
        #: what the execution had taken (`taken`) when the watch began
        self._since = 0
        #: whether `why` is the wait's tasks (`wait_overgrown`), not its history's size
        self.by_tasks = False

    def start(self, waiting: Callable[[], bool]) -> None:
        """Watch while `waiting()` holds, unless a watcher already does."""
        if self._task is None or self._task.done():
            self._since = taken()
            self._task = asyncio.ensure_future(self._watch(waiting))

    async def _watch(self, waiting: Callable[[], bool]) -> None:
        await workflow.wait_condition(lambda: not waiting() or self._grown())

    def _grown(self) -> bool:
        self.why = pause_overgrown()
        if self.why is None:
            self.why = wait_overgrown(self._since)
            self.by_tasks = self.why is not None
        return self.why is not None
