"""Live progress of a run for the CLI: turn, tool in flight, tokens so far.

Progress is read from the run's Temporal history, polled while the caller
waits for the result: the workflow journals each step into history before it
takes the next one (a `tool_call` lands there as its tool starts), so history
is as current as a query would be, and reading it needs no worker and adds no
workflow tasks. Only executions that are new (or still running) when the
command starts are narrated, so `resume` of a failed run shows the new
segment, not the old one again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TextIO, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._inspect import preview
from agentor_temporal._results import shown_event
from agentor_temporal._terminal import terminal_text
from agentor_temporal.store import Event, Usage
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.formatting import call_summary

T = TypeVar("T")

#: How often history is read while a run is in flight: quick enough to show a
#: tool as it starts, slow enough to cost the server nothing noticeable.
POLL_INTERVAL = 0.25


class Progress:
    """Turns a run's events into progress lines, each event once.

    Args:
        out: where lines go (the CLI uses stderr, keeping stdout for results).
        skip_execution: an execution already finished when the command
            started; its events are history, not progress.
    """

    def __init__(self, out: TextIO, skip_execution: str | None = None) -> None:
        self.out = out
        self.skip = skip_execution
        self._execution: str | None = None
        self._printed = 0
        self._usage = Usage()
        #: the call ids of the turn still unanswered, one entry per call
        #: (a model may give two calls of a turn the same id)
        self._pending: list[str] = []
        self._model = "the model"

    @property
    def narrated(self) -> bool:
        """Whether any execution's events were printed."""
        return self._execution is not None

    def feed(self, segment: Segment) -> None:
        """Print what `segment` (the run's latest execution) recorded since last time."""
        if segment.execution_run_id == self.skip:
            return
        if segment.execution_run_id != self._execution:
            self._execution, self._printed = segment.execution_run_id, 0
            prior = segment.input.get("prior_usage") if isinstance(segment.input, dict) else None
            self._usage = Usage.from_dict(prior)
            self._pending = []
        budget = _budget(segment)
        for event in segment.events[self._printed :]:
            # as every reader shows it: keys this process knows masked, for a run a
            # worker that did not know them recorded (a fleet's, an older version)
            for line in self._lines(shown_event(event), budget):
                # a tool name the model made up, a provider's error: as they came
                print(f"  {terminal_text(line)}", file=self.out, flush=True)
        self._printed = len(segment.events)

    def _lines(self, event: Event, budget: int | None) -> list[str]:
        kind, turn = event.type, event.turn
        if kind == "run_start":
            self._model = event.model or self._model
            return [f"turn 1: asking {self._model}"]
        if kind == "generation":
            if event.usage:
                self._usage = self._usage + event.usage
            tokens = f"{event.usage.total_tokens if event.usage else 0} tokens"
            counts = f"[{tokens}, {self._usage.total_tokens} so far]"
            calls = event.calls or []
            self._pending = [str(c.get("id")) for c in calls]
            if calls:
                names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls)
                return [f"turn {turn}: {event.model} asked for {names} {counts}"]
            return [f"turn {turn}: {event.model} answered {counts}"]
        if kind == "tool_call":
            return [f"turn {turn}: calling {call_summary(str(event.name), event.args)}"]
        if kind == "tool_result":
            if str(event.call_id) in self._pending:
                self._pending.remove(str(event.call_id))
            if event.error is not None:
                line = f"turn {turn}: {event.name} failed: {preview(event.error, 60)}"
            else:
                line = f"turn {turn}: {event.name} -> {preview(event.result, 60)}"
            # the batch is answered: the workflow asks the model next, unless
            # that was the last turn of the budget
            if not self._pending and turn is not None and (budget is None or turn < budget):
                return [line, f"turn {turn + 1}: asking {self._model}"]
            return [line]
        if kind == "run_end":
            error = f": {event.error}" if event.error else ""
            return [f"{event.status}, {self._usage.total_tokens} tokens{error}"]
        return []


def _budget(segment: Segment) -> int | None:
    raw = segment.input if isinstance(segment.input, dict) else {}
    spec = segment.spec or {}
    value = raw.get("max_turns") or spec.get("max_turns")
    return value if isinstance(value, int) else None


async def follow(client: Client, run_id: str, work: Awaitable[T], progress: Progress) -> T:
    """Await `work` (the run's result), narrating `run_id`'s history meanwhile.

    A failed read of history (a server hiccup) skips one beat: progress is
    a courtesy, the result is what the command waits for.
    """
    store = TemporalStore(client)
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    seen: tuple[str, int] | None = None

    async def beat() -> None:
        nonlocal seen
        with contextlib.suppress(Exception):
            # describing is cheap; the whole history is read only when it grew
            described = await client.get_workflow_handle(run_id).describe()
            now = (described.run_id, described.history_length)
            if now == seen:
                return
            if described.run_id == progress.skip:
                # finished before the command began: nothing in it is narrated, so a
                # long run's history (megabytes) is not read for it
                seen = now
                return
            segment = await store.latest(run_id)
            if segment is not None:
                progress.feed(segment)
                seen = now

    try:
        while not task.done():
            await beat()
            await asyncio.wait({task}, timeout=POLL_INTERVAL)
        await beat()  # the last steps, recorded as the run finished
    finally:
        if not task.done():
            task.cancel()
    return task.result()


async def finished_execution(client: Client, run_id: str) -> str | None:
    """The execution a `resume` should not narrate again (a finished one), by describing
    the run: its history is not read."""
    try:
        described = await client.get_workflow_handle(run_id).describe()
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return None
        raise
    return None if described.status == WorkflowExecutionStatus.RUNNING else described.run_id
