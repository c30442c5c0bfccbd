"""`TemporalStore`: a run's events read straight out of Temporal history.

Read-only, and needs no worker: the workflow journals every event through a
local activity whose recorded result *is* the new events, so projecting a run
is reading those markers in order. A `generation` event's request messages
are not journaled twice; they are taken back from the `generate` activity's
scheduled input, which history already holds; a request sent by reference
(see `conversation`) is its base, an earlier event's messages, followed by
the messages that input carries. A resumed or continued run spans several
executions of one workflow id; each segment names the one before it, so the
projection walks that chain rather than trusting eventually-consistent
visibility.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.codec import EncryptionKeyError
from agentor_temporal.store.base import validate_run_id
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.policies import DESCRIBE_AGENT, JOURNAL, WORKFLOW_TYPE

T = TypeVar("T")

_LOCAL_ACTIVITY_MARKER = "core_local_activity"


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

    @property
    def event_offset(self) -> int:
        """Whole-run position of this execution's first event."""
        value = self.input.get("event_offset") if isinstance(self.input, dict) else None
        return value if isinstance(value, int) and value >= 0 else 0


def resolve_requests(
    chain: list[Segment],
    known: dict[int, list[dict[str, Any]]] | None = None,
    digests: dict[int, str] | None = None,
) -> None:
    """Give each event sent by reference its whole messages (oldest segment first).

    `known` has the messages of events not in `chain` (or known already), by
    whole-run position. A base found nowhere (history gone, or only the
    latest execution read) leaves that event's messages None.
    """
    known = dict(known or {})
    for segment in chain:
        start = segment.event_offset
        for index, event in enumerate(segment.events):
            pending = segment.pending.pop(index, None)
            if pending is not None:
                conversation, tail = pending
                at = int(conversation.get("position", -1))
                base = known.get(at)
                expected = (digests or {}).get(at)
                if expected is not None and conversation.get("digest") != expected:
                    base = None  # `known` holds another conversation than this names
                if base is not None:
                    event.messages = base + tail
            if event.messages is not None and event.type in ("run_start", "generation"):
                known[start + index] = event.messages


def _run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())  # type: ignore[arg-type]
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="agentor-temporal-store")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class TemporalStore:
    """Project runs out of Temporal history (read-only).

    Args:
        client: a connected `temporalio.client.Client`.
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    def __repr__(self) -> str:
        return f"TemporalStore({self.client.service_client.config.target_host!r})"

    # -- the Store protocol ------------------------------------------------

    def append(self, run_id: str, event: Event) -> None:
        """Refused: Temporal's history is written by the workflow alone."""
        raise TypeError("TemporalStore is read-only: runs write their history themselves")

    def load(self, run_id: str) -> list[Event]:
        """Every event of the run across its segments ([] for an unknown run)."""
        return _run_sync(lambda: self.aload(run_id))

    def list_runs(self) -> list[str]:
        """Every run id with an `AgentRun` workflow, sorted."""
        return _run_sync(self.alist_runs)

    # -- async API ---------------------------------------------------------

    async def aload(self, run_id: str) -> list[Event]:
        """Async `load`."""
        events: list[Event] = []
        for segment in await self.segments(run_id):
            events.extend(segment.events)
        return events

    async def alist_runs(self) -> list[str]:
        """Async `list_runs`."""
        ids = set()
        async for execution in self.client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'"):
            ids.add(execution.id)
        return sorted(ids)

    async def segments(
        self,
        run_id: str,
        *,
        since: int | None = None,
        known: dict[int, list[dict[str, Any]]] | None = None,
        digests: dict[int, str] | None = None,
    ) -> list[Segment]:
        """The run's executions, oldest first ([] when Temporal has none).

        Walks back from the latest execution through each segment's
        predecessor; stops where retention has already removed history.

        Args:
            run_id: the run.
            since: stop at the execution holding this whole-run position (a
                worker rebuilding a conversation from one it already has).
            known: messages of events at those positions, for requests sent
                by reference whose base is not read.
            digests: the chain digests of `known`: a request naming another
                digest for that base is left unresolved.
        """
        validate_run_id(run_id)
        chain: list[Segment] = []
        execution: str | None = None
        seen: set[str] = set()
        while True:
            try:
                history = await self.client.get_workflow_handle(
                    run_id, run_id=execution
                ).fetch_history()
            except RPCError as exc:
                if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                    break
                raise
            segment = await self.parse(history)
            chain.append(segment)
            seen.add(segment.execution_run_id)
            if not segment.previous or segment.previous in seen:
                break
            if since is not None and segment.event_offset <= since:
                break
            execution = segment.previous
        chain.reverse()
        resolve_requests(chain, known, digests)
        return chain

    async def latest(self, run_id: str) -> Segment | None:
        """The run's latest execution, or None when Temporal has none."""
        validate_run_id(run_id)
        try:
            history = await self.client.get_workflow_handle(run_id).fetch_history()
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return None
            raise
        segment = await self.parse(history)
        resolve_requests([segment])
        return segment

    async def parse(self, history: WorkflowHistory) -> Segment:
        """Project one execution's history into a `Segment`."""
        segment = Segment(execution_run_id="")
        scheduled: dict[str, Payload] = {}
        journal: list[tuple[int, list[dict[str, Any]], dict[str, str]]] = []
        for event in history.events:
            kind = event.event_type
            segment.history_events += 1
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                task = event.workflow_task_started_event_attributes
                segment.history_bytes = max(segment.history_bytes, task.history_size_bytes)
                segment.continue_as_new_suggested = task.suggest_continue_as_new
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                attrs = event.workflow_execution_started_event_attributes
                segment.execution_run_id = attrs.original_execution_run_id or history.run_id
                segment.start_time = event.event_time.ToDatetime().timestamp()
                if attrs.input.payloads:
                    try:
                        segment.input = await self._decode(attrs.input.payloads[0])
                    except EncryptionKeyError:
                        raise  # a missing key is the reader's problem, not bad input
                    except Exception:
                        # any client may start a run with bytes that are not
                        # JSON; the workflow failed it, and reading it must not
                        segment.input = None
                previous = (
                    segment.input.get("previous_execution")
                    if isinstance(segment.input, dict)
                    else None
                )
                segment.previous = attrs.continued_execution_run_id or previous or None
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs_s = event.activity_task_scheduled_event_attributes
                if attrs_s.input.payloads:
                    scheduled[attrs_s.activity_id] = attrs_s.input.payloads[0]
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                marker = event.marker_recorded_event_attributes
                if marker.marker_name != _LOCAL_ACTIVITY_MARKER or "result" not in marker.details:
                    continue
                activity_type = self._marker_activity_type(marker.details)
                if activity_type not in (JOURNAL, DESCRIBE_AGENT):
                    continue
                result = await self._decode(marker.details["result"].payloads[0])
                if not isinstance(result, dict):
                    continue
                if activity_type == DESCRIBE_AGENT:
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
                await self._close(segment, event)
        for start, events, refs in journal:
            for index, data in enumerate(events):
                ref = refs.get(str(start + index))
                if ref is not None and "messages" not in data and ref in scheduled:
                    request = await self._decode(scheduled[ref])
                    if isinstance(request, dict) and isinstance(request.get("conversation"), dict):
                        tail = list(request.get("messages") or [])
                        segment.pending[len(segment.events)] = (request["conversation"], tail)
                    elif isinstance(request, dict):
                        data = {**data, "messages": request.get("messages")}
                if data.get("type") == "run_start" and "messages" not in data:
                    # a resumed conversation sent by reference: the input has it
                    sent = (
                        segment.input.get("conversation")
                        if isinstance(segment.input, dict)
                        else None
                    )
                    if isinstance(sent, dict) and isinstance(sent.get("base"), dict):
                        tail = list(sent.get("tail") or [])
                        segment.pending[len(segment.events)] = (sent["base"], tail)
                segment.events.append(Event.from_dict(data))
        return segment

    @staticmethod
    def _marker_activity_type(details: Any) -> str | None:
        data = details.get("data") if hasattr(details, "get") else None
        if data is None or not data.payloads:
            return None
        try:
            info = json.loads(data.payloads[0].data)
        except ValueError:
            return None
        return info.get("activity_type") if isinstance(info, dict) else None

    async def _decode(self, payload: Payload) -> Any:
        values = await self.client.data_converter.decode([payload])
        return values[0] if values else None

    async def _close(self, segment: Segment, event: Any) -> None:
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
                result = await self._decode(payloads[0])
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
