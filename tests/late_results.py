"""Histories in which a local activity's result reached the workflow a task late.

A local activity's marker goes in the completion of the workflow task it ran
in, but the workflow may be handed its result only in the next task: seen
when queries came as the task completed (its completion held the marker
alone, a new task began at once, and the code after the local activity ran
in that one). A replay hands the result over in the task that recorded it.
Code after a local activity thus runs a task earlier in a replay than it
did: what it reads of the task (a patch's marker, which a replay learns one
task at a time; the history's length; the time) must not change what it
does. `later` makes such a history from any other: it ends the task after a
local activity's marker and begins the next, as the server did.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowRunner

from agentor_temporal import AgentorPlugin

_MARKER = "EVENT_TYPE_MARKER_RECORDED"
_SCHEDULED = "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
_STARTED = "EVENT_TYPE_WORKFLOW_TASK_STARTED"
_COMPLETED = "EVENT_TYPE_WORKFLOW_TASK_COMPLETED"
#: events `later` adds: the next task's scheduled, started and completed
_ADDED = 3


def _local(event: dict[str, Any]) -> bool:
    return (
        event["eventType"] == _MARKER
        and event["markerRecordedEventAttributes"]["markerName"] == "core_local_activity"
    )


def _shift(node: Any, after: int) -> None:
    """Move every event id past `after` that `node` refers to on by `_ADDED`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("EventId") and isinstance(value, str) and value.isdigit():
                if int(value) > after:
                    node[key] = str(int(value) + _ADDED)
            else:
                _shift(value, after)
    elif isinstance(node, list):
        for value in node:
            _shift(value, after)


def later_points(events: list[dict[str, Any]]) -> list[int]:
    """Indexes of local activity markers that the same task's other commands follow.

    (A marker followed by the next task, or by another local activity's marker
    from the same batch, has nothing after it in its task to move.)
    """
    return [
        index
        for index, event in enumerate(events[:-1])
        if _local(event)
        and events[index + 1]["eventType"] != _SCHEDULED
        and not _local(events[index + 1])
    ]


def later(history: dict[str, Any], index: int) -> dict[str, Any]:
    """`history` (as `WorkflowHistory.to_json` gives it) with the commands that follow
    the local activity marker at `index` moved into a task of their own."""
    events = copy.deepcopy(history["events"])
    marker = events[index]
    at = int(marker["eventId"])

    def last(kind: str) -> dict[str, Any]:
        return copy.deepcopy(next(e for e in reversed(events[:index]) if e["eventType"] == kind))

    scheduled, started, completed = last(_SCHEDULED), last(_STARTED), last(_COMPLETED)
    rest = events[index + 1 :]
    for event in rest:
        event["eventId"] = str(int(event["eventId"]) + _ADDED)
    _shift(rest, at)
    for offset, event in enumerate((scheduled, started, completed), start=1):
        event["eventId"], event["eventTime"] = str(at + offset), marker["eventTime"]
    started["workflowTaskStartedEventAttributes"]["scheduledEventId"] = str(at + 1)
    done = completed["workflowTaskCompletedEventAttributes"]
    done["scheduledEventId"], done["startedEventId"] = str(at + 1), str(at + 2)
    for event in rest:  # the moved commands: the new task's completion records them
        if event["eventType"] == _SCHEDULED:
            break
        for value in event.values():
            if isinstance(value, dict) and "workflowTaskCompletedEventId" in value:
                value["workflowTaskCompletedEventId"] = str(at + _ADDED)
    return {**history, "events": [*events[: index + 1], scheduled, started, completed, *rest]}


def late_histories(history: WorkflowHistory) -> Iterator[tuple[str, WorkflowHistory]]:
    """`history` once for each local activity whose result can come a task late:
    the marker's event id, and the history with it so."""
    data = json.loads(history.to_json())
    for index in later_points(data["events"]):
        moved = later(data, index)
        yield (
            data["events"][index]["eventId"],
            WorkflowHistory.from_json(history.workflow_id, json.dumps(moved)),
        )


async def executions(client: Client, run_id: str) -> list[WorkflowHistory]:
    """The histories of the run's latest execution and of those it continued, first first."""
    histories: list[WorkflowHistory] = []
    execution: str | None = None
    while True:
        history = await client.get_workflow_handle(run_id, run_id=execution).fetch_history()
        histories.insert(0, history)
        started = history.events[0].workflow_execution_started_event_attributes
        execution = started.continued_execution_run_id
        if not execution:
            return histories


def replayer(runner: WorkflowRunner | None = None, **options: Any) -> Replayer:
    """A `Replayer` with the production plugin, as deployed (or with `runner`);
    `options` go to it (a codec's `data_converter`).

    debug_mode: no deadlock timer; in a replay it measures only how busy the machine is.
    """
    return Replayer(
        workflows=[],
        plugins=[AgentorPlugin()],
        unsandboxed_workflow_runner=runner or UnsandboxedWorkflowRunner(),
        debug_mode=True,
        **options,
    )


async def replay_late(history: WorkflowHistory, **options: Any) -> None:
    """`history` replays with each local activity's result handed over a task late,
    as deployed (the sandbox changes nothing of this); `options` go to the `Replayer`."""
    for marker, late in late_histories(history):
        result = await replayer(**options).replay_workflow(late, raise_on_replay_failure=False)
        assert result.replay_failure is None, (
            f"with the result of marker {marker} a task late: {result.replay_failure}"
        )
