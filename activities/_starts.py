"""Starts of one tool call that never ended, counted on the server across processes.

A call whose worker is lost runs again on the next worker: the tool may have
done its work, but its answer never reached the server. A tool that itself
kills its process (`os._exit`, a crash in native code, memory the kernel
kills the process for) or holds the GIL past the heartbeat timeout looks
exactly like that, and would be started again on every worker of a fleet,
for ever. Temporal's attempt count cannot bound it: handbacks (a busy or
stopping worker, a worker built differently) are attempts too, and a rolling
deploy makes hundreds of them.

So every attempt after the first records in its heartbeat details, before it
starts the tool and acknowledged by the server, that it did; it records the
start as ended before it hands the task back or asks for a retry. The next
attempt reads those details: a recorded start not ended was lost with its
worker. Once `policies.LOST_TOOL_STARTS` starts were lost, the call is not
started again and the model is told why. The first attempt records nothing,
so a call that ends on its first attempt (nearly every call) costs no extra
request, and a tool is started at most `LOST_TOOL_STARTS + 1` times.

Every heartbeat of an attempt carries the details it holds (`beat_details`):
a heartbeat without details would erase them on the server.

A local activity (a model request with `local_model_calls=True`) has no
heartbeat details: it runs inside its workflow task, and a worker lost in it
leaves that task to time out. So the run's history is its record: each
workflow task timed out since the last event that was not a workflow task's
(the step that decided the request) is a send lost with its worker, the
first timeout of a chain of retried tasks being the only one history keeps
(the server counts the rest in the pending task's attempt). A local send
reads that tail before it starts (one request to the server; a second only
after a lost task), and past the bound is not sent again either. Unless its
workflow knows no send can have been lost (`GenerateInput.first_send`: the
run stayed on this worker, with no task timeout's time since its last step),
as for nearly every request: then nothing is read.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload, Payloads, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryReverseRequest,
    RecordActivityTaskHeartbeatRequest,
)

logger = logging.getLogger(__name__)

#: Key of the count in the heartbeat details (a dict, so other keys can join it).
_LOST = "agentor_lost_starts"
_RUNNING = "agentor_running"
#: Seconds an acknowledged heartbeat may take before the attempt goes on without it.
_RECORD_TIMEOUT = 5.0
#: Events of a workflow task: the tail of them since the last other event is
#: the workflow tasks that ran (or were lost) since the run decided the request.
_TASK_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
}
#: Events read per page of the history's tail (a request's tail is a few
#: events, plus three per workflow task heartbeat of a long request).
_TAIL_PAGE = 50
#: Seconds a local send waits for the history's tail: it runs inside its
#: workflow task, whose timeout is 5 s.
_READ_TIMEOUT = 2.0
#: Set once a local send could not read its lost sends in this process.
_UNREAD: list[bool] = []


@dataclass
class _Held:
    """The details one attempt beats with: what it received, or what it recorded since."""

    value: dict[str, Any]
    payloads: list[Payload] = field(default_factory=list)


#: By task token: the details each attempt's heartbeats carry.
_HELD: dict[bytes, _Held] = {}


@dataclass
class Starts:
    """What one attempt knows of the call's earlier starts."""

    lost: int = 0
    #: this attempt recorded its own start (so must record its end)
    recorded: bool = False


def received() -> dict[str, Any] | None:
    """The details the running attempt was started with, if they are ours."""
    if not activity.in_activity():
        return None
    details = activity.info().heartbeat_details
    if details and isinstance(details[0], dict) and _LOST in details[0]:
        return details[0]
    return None


async def hold_received() -> bool:
    """Keep the details this attempt received in its heartbeats; whether it has any.

    An attempt that beats before it reaches the tool (a late attempt beats at
    once), or never reaches it (handed back), must not erase the count.
    """
    value = received()
    if value is None:
        return False
    await _hold(value)
    return True


def beat_payloads(token: bytes) -> list[Payload]:
    """The details the heartbeats of the attempt with task `token` carry (from any thread)."""
    held = _HELD.get(token)
    return held.payloads if held is not None else []


def beat_values() -> list[Any]:
    """The running attempt's details, for `activity.heartbeat(*values)`."""
    held = _HELD.get(activity.info().task_token)
    return [held.value] if held is not None else []


def release() -> None:
    """The running attempt stops beating: forget what it held."""
    _HELD.pop(activity.info().task_token, None)


async def begin(limit: int, *, first_send: bool = False) -> Starts:
    """Before the tool starts: how many starts were lost, and record this one (attempt 2 on).

    With `limit` or more lost, nothing is recorded: the caller does not start the tool.
    """
    if not activity.in_activity():
        return Starts()
    if activity.info().is_local:
        # the workflow knows no earlier send can have been lost: nothing to read
        return Starts(lost=0 if first_send else await _lost_local_sends())
    if activity.info().attempt < 2:
        return Starts()
    value = received() or {}
    lost = int(value.get(_LOST, 0)) + (1 if value.get(_RUNNING) else 0)
    if lost >= limit:
        return Starts(lost=lost)
    recorded = await _record({_LOST: lost, _RUNNING: True})
    return Starts(lost=lost, recorded=recorded)


async def end(starts: Starts) -> None:
    """The start this attempt recorded ended: the tool is not what the next attempt retries."""
    if starts.recorded:
        starts.recorded = not await _record({_LOST: starts.lost, _RUNNING: False})


async def _hold(value: dict[str, Any]) -> None:
    held = _Held(value)
    try:
        held.payloads = await activity.client().data_converter.encode([value])
    except RuntimeError:  # no client (a test environment)
        held.payloads = activity.payload_converter().to_payloads([value])
    _HELD[activity.info().task_token] = held


async def _record(value: dict[str, Any]) -> bool:
    """Hold `value` and have the server record it now; whether it acknowledged."""
    await _hold(value)
    info = activity.info()
    try:
        client = activity.client()
    except RuntimeError:
        return False  # no client (a test environment): nothing to record on
    request = RecordActivityTaskHeartbeatRequest(
        task_token=info.task_token,
        details=Payloads(payloads=_HELD[info.task_token].payloads),
        identity=client.identity,
        namespace=client.namespace,
    )
    try:
        await asyncio.wait_for(
            client.workflow_service.record_activity_task_heartbeat(request),
            _RECORD_TIMEOUT,
        )
    except Exception as exc:  # the count is a bound, not the call's outcome
        logger.warning(
            "Could not record the start of %s attempt %d of run %s: %s",
            info.activity_type,
            info.attempt,
            info.workflow_id,
            exc,
        )
        return False
    return True


async def _lost_local_sends() -> int:
    """Sends of the running local activity's request lost with their worker, by the history.

    Each worker lost in a workflow task leaves that task timed out. History
    keeps the first timeout of a chain of retried tasks only; the pending
    task's attempt counts the chain.
    """
    info = activity.info()
    try:
        client = activity.client()
    except RuntimeError:
        return 0  # no client (a test environment): nothing to read
    execution = WorkflowExecution(
        workflow_id=info.workflow_id or "", run_id=info.workflow_run_id or ""
    )
    try:
        timeouts, retried = await asyncio.wait_for(_task_timeouts(client, execution), _READ_TIMEOUT)
        if not retried:
            return max(0, timeouts - 1)
        described = await asyncio.wait_for(
            client.workflow_service.describe_workflow_execution(
                DescribeWorkflowExecutionRequest(namespace=client.namespace, execution=execution)
            ),
            _READ_TIMEOUT,
        )
    except Exception as exc:  # the count is a bound, not the request's outcome
        # once a process: a worker not allowed to read history would say it at every request
        log = logger.debug if _UNREAD else logger.warning
        _UNREAD[:] = [True]
        log(
            "Could not read the lost sends of %s of run %s from its history (sent unbounded): %s",
            info.activity_type,
            info.workflow_id,
            exc,
        )
        return 0
    # the chain's first timeout is in `timeouts`, its later ones only in the attempt;
    # and as for an activity, the first send is not counted (it records nothing)
    return max(0, timeouts - 1 + described.pending_workflow_task.attempt - 2)


async def _task_timeouts(client: Any, execution: WorkflowExecution) -> tuple[int, bool]:
    """Workflow tasks timed out since the last other event; whether the running one retries one."""
    timeouts, newest, retried = 0, True, False
    token = b""
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=execution,
                maximum_page_size=_TAIL_PAGE,
                next_page_token=token,
            )
        )
        for event in page.history.events:
            if event.event_type not in _TASK_EVENTS:
                return timeouts, retried
            timed_out = event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            timeouts += timed_out
            # history ends in a timeout: the running task retries it, and is not in history
            retried, newest = retried or (newest and timed_out), False
        token = page.next_page_token
        if not token:
            return timeouts, retried
