"""One execution of a run, read out of its history: a `Segment`.

The workflow journals every event through a local activity whose recorded
result *is* the new events, so reading an execution is reading those markers
in order. Events new since the last journal step may instead travel in the
input of a `generate` or `call_tool` activity (its `journal`), which history
holds the same way. A `generation` event's request messages are not
journaled twice; they are taken back from the `generate` activity's
scheduled input, which history already holds. A model request made as a
local activity (`local_model_calls`) has no scheduled input in history: its
marker's result carries the request. A request sent by reference stays
`pending` until `projection.resolve_requests` finds its base.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import WorkflowHistory

from agentor_temporal.codec import EncryptionKeyError
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.closed_outcomes import OutcomeReader
from agentor_temporal.workflows.policies import (
    CALL_TOOL,
    DESCRIBE_AGENT,
    GENERATE,
    JOURNAL,
    PATCH_SPEC_HEADER_REFUSED,
    RESULT_JOURNAL,
    SPEC_HEADER,
    WORKFLOW_TYPE,
)
from agentor_temporal.workflows.types import ForkOrigin, parse_fork_origin

#: Decodes one payload of the history (through the client's data converter).
Decode = Callable[[Payload], Awaitable[Any]]

_LOCAL_ACTIVITY_MARKER = "core_local_activity"


class NotAnAgentRun(ValueError):
    """The run id names a workflow of another type: the namespace's ids are shared."""

    def __init__(self, run_id: str, workflow_type: str) -> None:
        super().__init__(
            f"Run id {run_id!r} is a workflow of type {workflow_type!r} in Temporal, not an "
            f"agent run ({WORKFLOW_TYPE}): an agent run shares workflow ids with every other "
            "workflow of the namespace, so give it another run id"
        )
        self.run_id = run_id
        self.workflow_type = workflow_type


#: The memo field naming the resume key a segment was started under
#: (`agentor_temporal._start.resume_key`).
RESUME_KEY_MEMO = "agentor_resume_key"
_PATCH_MARKER = "core_patch"


@dataclass
class Segment:
    """One execution of a run's workflow, as recorded in its history."""

    execution_run_id: str
    #: the workflow input as sent (a dict for well-formed inputs)
    input: Any = None
    #: the recorded agent spec (a dict), if the segment got that far
    spec: dict[str, Any] | None = None
    events: list[Event] = field(default_factory=list)
    #: execution this segment continues (a resume, or continue-as-new)
    previous: str | None = None
    #: "running", "completed", "failed", "terminated", "timed_out",
    #: "canceled" or "continued_as_new"
    status: str = "running"
    #: the workflow result (a RunOutcome dict) when completed
    result: dict[str, Any] | None = None
    #: the failure message when the execution failed or timed out
    failure: str | None = None
    start_time: float | None = None
    close_time: float | None = None
    #: the execution's history: bytes (as the server counts them at its
    #: latest workflow task), events, and whether the server suggested
    #: continue-as-new at that task
    history_bytes: int = 0
    history_events: int = 0
    continue_as_new_suggested: bool = False
    #: index in `events` -> (conversation reference, tail) of a request sent
    #: by reference, until `resolve_requests` fills in its messages
    pending: dict[int, tuple[dict[str, Any], list[dict[str, Any]]]] = field(default_factory=dict)
    #: activity id -> (input, result) of each completed `call_tool` activity,
    #: still encoded: a tool batch may be done in history before the workflow
    #: has journaled its results (see `agentor_temporal._fork`)
    completed_tools: dict[str, tuple[Payload, Payload]] = field(default_factory=dict)
    #: activity id -> result of each completed `generate` activity (not a local
    #: one), still encoded: an answer the workflow may not have recorded yet
    completed_generations: dict[str, Payload] = field(default_factory=dict)
    #: activity ids of the `call_tool` activities this execution scheduled (a
    #: call whose activity was never scheduled never started)
    scheduled_tools: set[str] = field(default_factory=set)
    #: the resume key (`agentor_temporal._start.resume_key`) of the request
    #: that started this segment, from its memo; None when started without one
    resume_key: str | None = None
    #: request id -> what a decision sent under it came to, as far as this
    #: execution's history says (`closed_outcomes`): handed to its resume
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def fork(self) -> ForkOrigin | None:
        """Where the run's log begins, when this segment starts a fork."""
        raw = self.input.get("fork") if isinstance(self.input, dict) else None
        if raw is None:
            return None
        try:
            return parse_fork_origin(raw)
        except ValueError:
            return None  # the workflow refused it and recorded nothing

    @property
    def event_offset(self) -> int:
        """Whole-run position of this execution's first event."""
        value = self.input.get("event_offset") if isinstance(self.input, dict) else None
        return value if isinstance(value, int) and value >= 0 else 0


async def read_segment(history: WorkflowHistory, decode: Decode) -> Segment:
    """Project one execution's history into a `Segment`, decoding payloads with `decode`."""
    segment = Segment(execution_run_id="")
    scheduled: dict[str, Payload] = {}
    #: activity id -> decoded input, of generate and call_tool activities
    inputs: dict[str, Any] = {}
    #: scheduled event id -> activity id, of call_tool activities
    tools: dict[int, str] = {}
    journal: list[tuple[int, list[dict[str, Any]], dict[str, str]]] = []
    #: the spec the starter put in the start header, whether the run refused
    #: it, and whether a workflow task completed (the run decided)
    header_spec: Any = None
    refused = decided = False
    decisions = OutcomeReader()
    for event in history.events:
        kind = event.event_type
        await decisions.read(event, decode)
        segment.history_events += 1
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task = event.workflow_task_started_event_attributes
            segment.history_bytes = max(segment.history_bytes, task.history_size_bytes)
            segment.continue_as_new_suggested = task.suggest_continue_as_new
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attrs = event.workflow_execution_started_event_attributes
            if attrs.workflow_type.name != WORKFLOW_TYPE:
                # an app's own workflow under the id (its `order-1234`): read as a run,
                # it was one with no events, and a running one was waited on for ever
                raise NotAnAgentRun(history.workflow_id, attrs.workflow_type.name)
            segment.execution_run_id = attrs.original_execution_run_id or history.run_id
            segment.start_time = event.event_time.ToDatetime().timestamp()
            if attrs.input.payloads:
                try:
                    segment.input = await decode(attrs.input.payloads[0])
                except EncryptionKeyError:
                    raise  # a missing key is the reader's problem, not bad input
                except Exception:
                    # any client may start a run with bytes that are not
                    # JSON; the workflow failed it, and reading it must not
                    segment.input = None
            if RESUME_KEY_MEMO in attrs.memo.fields:
                try:
                    key = await decode(attrs.memo.fields[RESUME_KEY_MEMO])
                except Exception:
                    key = None  # not ours: a plain client's memo
                segment.resume_key = key if isinstance(key, str) else None
            if SPEC_HEADER in attrs.header.fields:
                try:
                    header_spec = json.loads(attrs.header.fields[SPEC_HEADER].data)
                except ValueError:
                    header_spec = None  # the workflow asked its worker instead
            previous = (
                segment.input.get("previous_execution") if isinstance(segment.input, dict) else None
            )
            segment.previous = attrs.continued_execution_run_id or previous or None
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs_s = event.activity_task_scheduled_event_attributes
            if attrs_s.input.payloads:
                scheduled[attrs_s.activity_id] = attrs_s.input.payloads[0]
            if attrs_s.activity_type.name in (CALL_TOOL, GENERATE):
                tools[event.event_id] = attrs_s.activity_id
            if attrs_s.activity_type.name == CALL_TOOL:
                segment.scheduled_tools.add(attrs_s.activity_id)
            if attrs_s.activity_type.name in (GENERATE, CALL_TOOL) and attrs_s.input.payloads:
                # it may carry the events new since the last journal step
                value = inputs[attrs_s.activity_id] = await decode(attrs_s.input.payloads[0])
                folded = _folded(value)
                if folded is not None:
                    journal.append(folded)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs_c = event.activity_task_completed_event_attributes
            activity_id = tools.get(attrs_c.scheduled_event_id)
            if activity_id is not None and activity_id.startswith("generate-"):
                if attrs_c.result.payloads:
                    segment.completed_generations[activity_id] = attrs_c.result.payloads[0]
            elif activity_id in scheduled and attrs_c.result.payloads:
                segment.completed_tools[activity_id] = (
                    scheduled[activity_id],
                    attrs_c.result.payloads[0],
                )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            decided = True
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed = event.workflow_task_failed_event_attributes
            if failed.cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW:
                # a reset execution's history begins with its base's, started
                # event and all, so original_execution_run_id names the base
                # (terminated by the reset); this event names the execution
                # itself (the last one, after a reset of a reset)
                segment.execution_run_id = failed.new_run_id or segment.execution_run_id
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == _PATCH_MARKER and _patch_id(marker.details) == (
                PATCH_SPEC_HEADER_REFUSED
            ):
                refused = True
            if marker.marker_name != _LOCAL_ACTIVITY_MARKER or "result" not in marker.details:
                continue
            info = _marker_info(marker.details)
            activity_type = info.get("activity_type")
            if activity_type not in (JOURNAL, DESCRIBE_AGENT, GENERATE):
                continue
            payload = marker.details["result"].payloads[0]
            result = await decode(payload)
            if not isinstance(result, dict):
                continue
            if activity_type == GENERATE:
                # a local model request: its result carries the request
                if isinstance(result.get("request"), dict):
                    activity_id = str(info.get("activity_id") or "")
                    scheduled[activity_id] = payload
                    inputs[activity_id] = result["request"]
            elif activity_type == DESCRIBE_AGENT:
                segment.spec = result
            else:
                journal.append(
                    (
                        int(result.get("start") or 0),
                        list(result.get("events") or []),
                        dict(result.get("refs") or {}),
                    )
                )
        else:
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                # a run closing with its last events in its result's payload
                # (policies.JOURNAL_IN_RESULT) had no journal step for them
                closing = _closing_record(event.workflow_execution_completed_event_attributes)
                if closing is not None:
                    journal.append(closing)
            await _close(segment, event, decode)
    segment.outcomes = decisions.read_all(segment.input)
    if segment.spec is None and decided and not refused and isinstance(header_spec, dict):
        segment.spec = header_spec  # taken from the start header: no describe step
    if segment.spec is None and decided:
        # a continued execution refused by its worker went on with its carried spec
        segment.spec = _carried_spec(segment.input)
    for start, events, refs in journal:
        for index, data in enumerate(events):
            ref = refs.get(str(start + index))
            if ref is not None and "messages" not in data and ref in scheduled:
                request = inputs[ref] if ref in inputs else await decode(scheduled[ref])
                if isinstance(request, dict) and isinstance(request.get("conversation"), dict):
                    tail = list(request.get("messages") or [])
                    segment.pending[len(segment.events)] = (request["conversation"], tail)
                elif isinstance(request, dict):
                    data = {**data, "messages": request.get("messages")}
            if data.get("type") == "run_start" and "messages" not in data:
                # a resumed conversation sent by reference: the input has it
                sent = (
                    segment.input.get("conversation") if isinstance(segment.input, dict) else None
                )
                if isinstance(sent, dict) and isinstance(sent.get("base"), dict):
                    tail = list(sent.get("tail") or [])
                    segment.pending[len(segment.events)] = (sent["base"], tail)
            segment.events.append(Event.from_dict(data))
    return segment


def _folded(request: Any) -> tuple[int, list[dict[str, Any]], dict[str, str]] | None:
    """The journal a `generate` or `call_tool` input carries, as (start, events, refs)."""
    folded = request.get("journal") if isinstance(request, dict) else None
    if not isinstance(folded, dict):
        return None
    refs = {str(k): str(v) for k, v in dict(folded.get("refs") or {}).items()}
    return int(folded.get("new_from") or 0), list(folded.get("events") or []), refs


def _closing_record(attrs: Any) -> tuple[int, list[dict[str, Any]], dict[str, str]] | None:
    """The events a run's result payload carries in its metadata, as (start, events, refs)."""
    payloads = attrs.result.payloads
    raw = payloads[0].metadata.get(RESULT_JOURNAL) if payloads else None
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        refs = {str(k): str(v) for k, v in dict(record.get("refs") or {}).items()}
        return int(record.get("start") or 0), list(record.get("events") or []), refs
    except (ValueError, TypeError, AttributeError):
        return None


def _patch_id(details: Any) -> str | None:
    """The id a patch marker records."""
    data = details.get("patch-data") if hasattr(details, "get") else None
    if data is None or not data.payloads:
        return None
    try:
        info = json.loads(data.payloads[0].data)
    except ValueError:
        return None
    return str(info.get("id")) if isinstance(info, dict) else None


def _marker_info(details: Any) -> dict[str, Any]:
    """A local activity marker's data: its activity_type, activity_id, attempt, ..."""
    data = details.get("data") if hasattr(details, "get") else None
    if data is None or not data.payloads:
        return {}
    try:
        info = json.loads(data.payloads[0].data)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


async def _close(segment: Segment, event: Any, decode: Decode) -> None:
    """Record how the execution closed, when `event` closes it."""
    kind = event.event_type
    closed = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed_out",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "canceled",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "continued_as_new",
    }.get(kind)
    if closed is None:
        return
    segment.status = closed
    segment.close_time = event.event_time.ToDatetime().timestamp()
    if closed == "completed":
        payloads = event.workflow_execution_completed_event_attributes.result.payloads
        if payloads:
            result = await decode(payloads[0])
            segment.result = result if isinstance(result, dict) else None
    elif closed == "failed":
        failure = event.workflow_execution_failed_event_attributes.failure
        segment.failure = failure.message or "workflow failed"
    elif closed == "terminated":
        reason = event.workflow_execution_terminated_event_attributes.reason
        segment.failure = f"terminated{': ' + reason if reason else ''}"
    elif closed == "timed_out":
        segment.failure = "the run's workflow timed out"
    elif closed == "canceled":
        segment.failure = "the run was cancelled"


def _carried_spec(data: Any) -> dict[str, Any] | None:
    """The spec a continued execution's input carries (`Carry.spec`), if any."""
    carry = data.get("carry") if isinstance(data, dict) else None
    spec = carry.get("spec") if isinstance(carry, dict) else None
    return spec if isinstance(spec, dict) else None
