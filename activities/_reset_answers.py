"""`ResetAnswers`: a reset execution's calls take the results its base execution recorded.

A reset (`temporal workflow reset`) runs the workflow again from the point the
operator picked, in a new execution that terminates the one it started from
(its base): every model request and tool call after that point is scheduled
again, with the same activity id and, the run being deterministic from the
answers before the point, the same input. Those the base completed have their
results in its history; asking again would pay for a second model request, or
do a tool's work (a transfer) a second time, on whichever worker. So in an
execution a reset began (the workflow says so in the input; a call the base
scheduled before the point is dispatched again with the base's input, told by
its first attempt's schedule time), a call first
looks for the same activity (id, type, and what it is: tool, arguments and
idempotency key, or the whole request) completed in the base, and takes that
result. A reset of a reset finds it in its own base, which took it the same
way, or in that base's own base (the second reset made before a worker ran
the first). An execution continued as new from a reset one (the workflow marks its
calls too, `Carry.reset`) looks in the executions the base continued into: a
reset of an older execution of a long run does not pay again for the later
executions' work. A tool that raised there, a request that failed, and a call that had not
completed run again (a call still running in this worker is joined instead,
`LiveCalls`), so a reset to before a failure is still how a fixed tool is run
again. A local model request (`local_model_calls`) is found by its marker, its
result naming the request it sent (its input is not in history). The base's
line's completed calls are read once per reset and worker, kept `KEEP`
seconds after the last use.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.service import RPCError

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Seconds a reset execution's base calls stay read after their last use: a
#: reset execution schedules the base's calls again within its first turns.
KEEP = 300.0

#: The marker the SDK's core records a local activity's result in.
_LOCAL_ACTIVITY_MARKER = "core_local_activity"

_RESET = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW


@dataclass(frozen=True)
class _Done:
    """An activity the base execution completed."""

    activity_type: str
    #: None for a local activity (its marker keeps only the result)
    input: Payload | None
    result: Payload


def in_reset_execution(marked: bool) -> bool:
    """Whether this activity may be one a reset scheduled again (then its base is read).

    `marked`: the workflow said so in the input. A call its base had scheduled
    before the reset point (the reset to a task before its result) is in the
    reset execution's copied history as scheduled and not done: the server
    dispatches it again, with the base's input (unmarked), as a first attempt
    scheduled again now, while a first attempt is otherwise scheduled once.
    """
    if marked:
        return True
    info = activity.info()
    return (
        info.attempt == 1
        and not info.is_local
        and info.current_attempt_scheduled_time != info.scheduled_time
    )


class ResetAnswers:
    """The completed calls of the executions this worker's reset executions began from."""

    def __init__(self, keep: float = KEEP) -> None:
        self.keep = keep
        #: ("line", workflow id, execution) -> the reset its line began with;
        #: ("base", workflow id, base, point) -> what the base's line completed
        self._reads: dict[tuple[Any, ...], asyncio.Task[Any]] = {}
        self._expiry: dict[tuple[Any, ...], asyncio.TimerHandle] = {}
        #: calls answered from their base's history instead of running again
        self.taken = 0

    async def recorded(
        self,
        fields: Callable[[], Mapping[str, Any]],
        same: Callable[[Mapping[str, Any]], str],
        cls: type[T],
    ) -> T | None:
        """The result the reset's base recorded for this activity, if it completed the same call.

        Args:
            fields: this call's input as the workflow sent it (a dict of its fields).
            same: what a call is, from such a dict (tool, arguments and key; a request).
            cls: the activity's result type.
        """
        info = activity.info()
        try:
            client = activity.client()
        except RuntimeError:
            return None
        workflow_id, execution = info.workflow_id or "", info.workflow_run_id or ""
        try:
            found = await self._read(
                ("line", workflow_id, execution), lambda: _reset_of(client, workflow_id, execution)
            )
            if found is None:
                return None
            calls = await self._read(
                ("base", workflow_id, *found),
                lambda: _completed_in_line(client, workflow_id, *found),
            )
            done = calls.get(info.activity_id)
            if done is None or done.activity_type != info.activity_type:
                return None
            result: T = (await client.data_converter.decode([done.result], [cls]))[0]
            if done.input is None:
                # a local model request: its result carries the request it sent
                if not _sent_the_same(getattr(result, "request", None), fields()):
                    return None
            else:
                given = (await client.data_converter.decode([done.input]))[0]
                if not isinstance(given, Mapping) or same(given) != same(fields()):
                    return None
        except Exception as exc:  # an unreadable base (RPC, codec, shape): the call runs
            problem = exc.message if isinstance(exc, RPCError) else f"{type(exc).__name__}: {exc}"
            logger.warning(
                "could not read what the execution run %s was reset from recorded (%s); %s runs",
                info.workflow_id,
                problem.splitlines()[0] if problem else type(exc).__name__,
                info.activity_type,
            )
            return None
        if not isinstance(result, cls):
            return None
        if getattr(result, "error", None):
            return None  # a tool that raised there runs again: the reset may be its repair
        self.taken += 1
        logger.info(
            "%s %s of run %s takes the result the execution it was reset from recorded",
            info.activity_type,
            info.activity_id,
            info.workflow_id,
        )
        return result

    async def _read(self, key: tuple[Any, ...], read: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """`read()`'s answer, read once for `key` (again if it failed) and kept a while."""
        task = self._reads.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.get_running_loop().create_task(read())
            self._reads[key] = task
        self._touch(key)
        answer: T = await asyncio.shield(task)
        return answer

    def _touch(self, key: tuple[Any, ...]) -> None:
        old = self._expiry.pop(key, None)
        if old is not None:
            old.cancel()
        self._expiry[key] = asyncio.get_running_loop().call_later(self.keep, self._forget, key)

    def _forget(self, key: tuple[Any, ...]) -> None:
        self._reads.pop(key, None)
        self._expiry.pop(key, None)


#: Executions walked back through continue-as-new to find the reset a line began with.
MAX_LINE = 10_000

#: Resets of resets whose bases' lines are read.
MAX_RESETS = 100

_STARTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
_CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


async def _completed_in_line(
    client: Client, workflow_id: str, base: str, point: int, depth: int = 0
) -> dict[str, _Done]:
    """The activities completed, by id, in the execution `base` a reset ended (from event
    `point` on) and in the executions it continued as new into.

    The execution a reset began, and those continued as new from it, do again
    what the base and the executions it continued into did (turns keep their
    numbers, calls their ids across a continue-as-new). A base in a line a reset
    began itself (a reset of a reset) may not have done its own base's work yet
    (reset again before a worker ran it): that earlier line's calls count too,
    the base's own taking precedence.
    """
    earlier = await _reset_of(client, workflow_id, base) if depth < MAX_RESETS else None
    done = (
        {}
        if earlier is None
        else await _completed_in_line(client, workflow_id, *earlier, depth + 1)
    )
    run = base
    for _ in range(MAX_LINE):
        following = await _completed_in(client, workflow_id, run, point, done)
        if not following:
            break
        run, point = following, 0
    return done


async def _reset_of(client: Client, workflow_id: str, execution: str) -> tuple[str, int] | None:
    """(base, point) of the reset that began `execution`, or the nearest execution before it
    that `execution` was continued as new from; None if none did."""
    for _ in range(MAX_LINE):
        handle = client.get_workflow_handle(workflow_id, run_id=execution)
        previous = ""
        async for event in handle.fetch_history_events():
            if event.event_type == _STARTED:
                started = event.workflow_execution_started_event_attributes
                if started.original_execution_run_id in ("", execution):
                    # not begun by a reset: only its first event is read
                    previous = started.continued_execution_run_id
                    break
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failed = event.workflow_task_failed_event_attributes
                # a reset of a reset copies its base's own reset event first
                if failed.cause == _RESET and failed.new_run_id == execution:
                    return failed.base_run_id, event.event_id
        if not previous:
            return None
        execution = previous
    return None


async def _completed_in(
    client: Client, workflow_id: str, run: str, point: int, done: dict[str, _Done]
) -> str:
    """Add to `done` the activities `run` completed from event `point` on; the execution it
    continued as new into, if it did."""
    scheduled: dict[int, tuple[str, str, Payload]] = {}
    following = ""
    async for event in client.get_workflow_handle(workflow_id, run_id=run).fetch_history_events():
        if event.event_id < point and event.event_type != (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ):
            continue  # copied into the reset execution: recorded there, never asked again
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.input.payloads:
                scheduled[event.event_id] = (
                    attrs.activity_id,
                    attrs.activity_type.name,
                    attrs.input.payloads[0],
                )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            found = scheduled.get(completed.scheduled_event_id)
            if found is not None and completed.result.payloads:
                activity_id, activity_type, given = found
                done[activity_id] = _Done(activity_type, given, completed.result.payloads[0])
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            local = _local_activity(marker.marker_name, marker.details)
            if local is not None:
                done[local[0]] = _Done(local[1], None, local[2])
        elif event.event_type == _CONTINUED:
            following = (
                event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            )
    return following


def _local_activity(name: str, details: Any) -> tuple[str, str, Payload] | None:
    """A local activity's marker as (activity id, type, result), or None."""
    if name != _LOCAL_ACTIVITY_MARKER or "result" not in details or "data" not in details:
        return None
    data, result = details["data"].payloads, details["result"].payloads
    if not data or not result:
        return None
    try:
        info = json.loads(data[0].data)
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    activity_id, activity_type = info.get("activity_id"), info.get("activity_type")
    if not isinstance(activity_id, str) or not isinstance(activity_type, str):
        return None
    return activity_id, activity_type, result[0]


def _sent_the_same(request: Any, fields: Mapping[str, Any]) -> bool:
    """Whether a local request's recorded `request` is the one `fields` would send."""
    if not isinstance(request, Mapping):
        return False
    recorded = [request.get("messages"), request.get("conversation")]
    return recorded == [fields.get("messages"), fields.get("conversation")]
