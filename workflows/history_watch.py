"""`HistoryWatch`: stops a run's long waits mid-turn once its history nears Temporal's limits.

Mid-turn a run cannot continue as new, and every signal or update sent to it
while a tool runs or its model request is in flight adds to its history; at
50 MB or 51,200 events the server terminates it, its turn lost. So from
`policies.HISTORY_STOPS_SHORT` the turn's waits (its tool calls', its model
request's) are watched: when the history passes what a run may grow to, the
task that waits is cancelled there, as a cancel of the run would, and the run
settles the turn and fails, resumable. The watch is a condition, read in each
workflow task, that issues no command, and it is set only around those
waits: a run that never nears the limits records the history it always did
(wrapping the whole loop in a task beside a watcher moved the first search-
attribute upsert into a command of its own).

From `policies.PAUSE_COUNTS_TASKS` the tools' wait also stops once the run
took `policies.PAUSED_WAIT_TASKS` signals and updates since it began
(`tasks_past`): each is a workflow task, and a worker without the run in its
cache replays them all in one, past its 5 s timeout after a few thousand.

Once a run stops, what it still waits for (calls running, a model answer) is
waited for only short of a last line (`within_last_line`, from
`policies.HISTORY_LAST_LINE`): signals may go on arriving meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.steady import reading
from agentor_temporal.workflows.versions import level


class HistoryWatch:
    """Cancels the waiting task when `grown()` holds, after calling `stop()`.

    `grown` is read in every workflow task while a watched wait is under way;
    `stop` notes why the run stops (its `run_end` error, what the calls'
    answers say) before the cancel reaches the wait.
    """

    def __init__(self, grown: Callable[[], bool], stop: Callable[[], None]) -> None:
        self._grown = grown
        self._stop = stop
        #: what the execution had taken (`taken`) when the current watched wait began
        self.began = 0

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Within: the current task is cancelled should the history grow past the limit."""
        waiting = asyncio.current_task()
        assert waiting is not None  # workflow code runs in tasks
        self.began = taken()
        watch = asyncio.ensure_future(self._cancel_when_grown(waiting))
        try:
            yield
        finally:
            if not watch.done():
                watch.cancel()

    async def _cancel_when_grown(self, waiting: asyncio.Task[object]) -> None:
        await workflow.wait_condition(self._grown)
        self._stop()
        waiting.cancel()


def watching(watch: HistoryWatch | None) -> AbstractAsyncContextManager[None]:
    """`watch.watching()`, or nothing to enter for a run recorded before the watch."""
    return nullcontext() if watch is None else watch.watching()


def taken() -> int:
    """Signals and accepted updates the execution took (`AgentRunWorkflow`'s counts).

    Each is at most one workflow task, and a worker without the run in its
    cache replays them all in one (`policies.PAUSE_COUNTS_TASKS`).
    """
    run = workflow.instance()
    return int(getattr(run, "signals", 0)) + int(getattr(run, "updates", 0))


def tasks_past(since: int) -> int | None:
    """What the execution took since `since` (`taken`), once that reaches
    `policies.PAUSED_WAIT_TASKS` (from `PAUSE_COUNTS_TASKS`); else None."""
    if level() < policies.PAUSE_COUNTS_TASKS:
        return None
    took = taken() - since
    return took if took >= policies.PAUSED_WAIT_TASKS else None


def tasks_error(took: int) -> str:
    """The `run_end` error of a run stopped mid-turn by what its tools' wait took (`tasks_past`)."""
    return (
        f"The run stopped mid-turn: it took {took:,} signals and updates while its tools ran "
        f"(it stops at {policies.PAUSED_WAIT_TASKS:,}: each is a workflow task in its history, "
        "and a worker that does not hold the run in memory replays the whole history in one "
        "workflow task, which past a few thousand of them outlasts Temporal's workflow task "
        "timeout, and the run could not go on; a run continues as new only between turns). "
        "Find what sent it so many. The calls that ran are recorded, and resume(run_id) "
        "continues it."
    )


def history_now() -> tuple[int, int]:
    """The execution's history as of the current workflow task: its bytes and its events.

    Its signals counted (`policies.SIGNALS_SIZED`), and read alike live and in
    a replay right after a local activity (`steady.reading`, from
    `policies.STEADY_READINGS`). Deterministic, and no command.
    """
    now = reading()
    return now.size, now.events


def past_last_line() -> bool:
    """Whether a stopping run's history passed the line past which it waits for nothing more.

    Read from the workflow task's info: deterministic, and no command.
    """
    if level() < policies.HISTORY_LAST_LINE:
        return False
    size, events = history_now()
    return size > policies.LAST_HISTORY_BYTES or events > policies.LAST_HISTORY_EVENTS


async def within_last_line(tasks: list[asyncio.Task[Any]]) -> bool:
    """Wait for `tasks` to end, or for the history to pass the last line; whether they all ended.

    A run recorded before `policies.HISTORY_LAST_LINE` waits for them all, as it did.
    """
    if level() < policies.HISTORY_LAST_LINE:
        await workflow.wait(tasks)
        return True
    await workflow.wait_condition(lambda: all(t.done() for t in tasks) or past_last_line())
    return all(t.done() for t in tasks)
