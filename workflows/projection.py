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
visibility. A fork's log begins with its parent's first events, which its
first segment references rather than copies: `whole` prepends them (read from
the parent's history, or from a store when only a store has them).
Events new since the last journal step may instead travel in the input of
a `generate` or `call_tool` activity (its `journal`), which history holds
the same way. A model request made as a local activity (`local_model_calls`)
has no scheduled input in history: its marker's result carries the request.
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
from agentor_temporal.store.base import Store, validate_run_id
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.policies import (
    CALL_TOOL,
    DESCRIBE_AGENT,
    GENERATE,
    JOURNAL,
    WORKFLOW_TYPE,
)
from agentor_temporal.workflows.types import ForkOrigin, parse_fork_origin

T = TypeVar("T")

_LOCAL_ACTIVITY_MARKER = "core_local_activity"

#: Forks of forks of ... deeper than this are not followed (a guard against
#: a hand-written input whose parents loop).
MAX_FORK_DEPTH = 100


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
            pending = segment.pending.get(index)
            if pending is not None:
                conversation, tail = pending
                at = int(conversation.get("position", -1))
                base = known.get(at)
                expected = (digests or {}).get(at)
                if expected is not None and conversation.get("digest") != expected:
                    base = None  # `known` holds another conversation than this names
                if base is not None:
                    event.messages = base + tail
                    # unresolved ones stay: a fork's base is in its parent's
                    # events, which `whole` reads after the segments
                    del segment.pending[index]
            if event.messages is not None and event.type in ("run_start", "generation"):
                known[start + index] = event.messages


def known_messages(events: list[Event], start: int = 0) -> dict[int, list[dict[str, Any]]]:
    """The messages of the events a request may name as its base, by whole-run position."""
    return {
        start + i: e.messages
        for i, e in enumerate(events)
        if e.messages is not None and e.type in ("run_start", "generation")
    }


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
        events, _ = await self.whole(run_id)
        return events

    async def whole(
        self,
        run_id: str,
        segments: list[Segment] | None = None,
        store: Store | None = None,
        *,
        _depth: int = 0,
    ) -> tuple[list[Event], int]:
        """(the run's whole log, how many of its first events could not be read).

        The log is the segments' events after whatever preceded the first of
        them: a fork's parent events (from the parent's history, else from
        `store`), or the events of a run continued from a store. `store` also
        stands in for history that retention removed.

        Args:
            run_id: the run.
            segments: its segments, when the caller has read them already.
            store: where events Temporal does not hold may be (optional).
        """
        if segments is None:
            segments = await self.segments(run_id)
        events = [e for s in segments for e in s.events]
        if not segments:
            return events, 0
        first = segments[0]
        offset = first.fork.at if first.fork is not None else first.event_offset
        if not offset:
            return events, 0
        prefix = None
        if first.fork is not None and not first.previous:
            prefix = await self._fork_prefix(first.fork, store, _depth)
        if prefix is None and store is not None:
            # the run's own copy: a store-seeded run, a fork's mirror, or
            # segments whose history is gone
            stored = await asyncio.to_thread(store.load, run_id)
            prefix = stored[:offset] if len(stored) >= offset else None
        if prefix is None:
            return events, offset
        if any(s.pending for s in segments):
            # a fork's conversation sent by reference to one of its parent's events
            resolve_requests(segments, known_messages(prefix))
        return prefix + events, 0

    async def _fork_prefix(
        self, origin: ForkOrigin, store: Store | None, depth: int
    ) -> list[Event] | None:
        """The parent's first `origin.at` events, or None when nothing holds them all."""
        if depth >= MAX_FORK_DEPTH:
            return None
        if origin.execution is not None:
            parent = await self.segments(origin.run_id, execution=origin.execution)
            if parent:
                events, missing = await self.whole(origin.run_id, parent, store, _depth=depth + 1)
                if not missing and len(events) >= origin.at:
                    return events[: origin.at]
        if store is not None:
            stored = await asyncio.to_thread(store.load, origin.run_id)
            if len(stored) >= origin.at:
                return stored[: origin.at]
        return None

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
        execution: str | None = None,
        since: int | None = None,
        known: dict[int, list[dict[str, Any]]] | None = None,
        digests: dict[int, str] | None = None,
    ) -> list[Segment]:
        """The run's executions, oldest first ([] when Temporal has none).

        Walks back from the latest execution (or from `execution`) through
        each segment's predecessor; stops where retention has already
        removed history.

        Args:
            run_id: the run.
            execution: the execution to walk back from (default: the latest).
            since: stop at the execution holding this whole-run position (a
                worker rebuilding a conversation from one it already has).
            known: messages of events at those positions, for requests sent
                by reference whose base is not read.
            digests: the chain digests of `known`: a request naming another
                digest for that base is left unresolved.
        """
        validate_run_id(run_id)
        chain: list[Segment] = []
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
        #: activity id -> decoded input, of generate and call_tool activities
        inputs: dict[str, Any] = {}
        #: scheduled event id -> activity id, of call_tool activities
        tools: dict[int, str] = {}
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
                if attrs_s.activity_type.name == CALL_TOOL:
                    tools[event.event_id] = attrs_s.activity_id
                if attrs_s.activity_type.name in (GENERATE, CALL_TOOL) and attrs_s.input.payloads:
                    # it may carry the events new since the last journal step
                    value = inputs[attrs_s.activity_id] = await self._decode(
                        attrs_s.input.payloads[0]
                    )
                    folded = self._folded(value)
                    if folded is not None:
                        journal.append(folded)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs_c = event.activity_task_completed_event_attributes
                activity_id = tools.get(attrs_c.scheduled_event_id)
                if activity_id in scheduled and attrs_c.result.payloads:
                    segment.completed_tools[activity_id] = (
                        scheduled[activity_id],
                        attrs_c.result.payloads[0],
                    )
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                marker = event.marker_recorded_event_attributes
                if marker.marker_name != _LOCAL_ACTIVITY_MARKER or "result" not in marker.details:
                    continue
                info = self._marker_info(marker.details)
                activity_type = info.get("activity_type")
                if activity_type not in (JOURNAL, DESCRIBE_AGENT, GENERATE):
                    continue
                payload = marker.details["result"].payloads[0]
                result = await self._decode(payload)
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
                await self._close(segment, event)
        for start, events, refs in journal:
            for index, data in enumerate(events):
                ref = refs.get(str(start + index))
                if ref is not None and "messages" not in data and ref in scheduled:
                    request = inputs[ref] if ref in inputs else await self._decode(scheduled[ref])
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
    def _folded(request: Any) -> tuple[int, list[dict[str, Any]], dict[str, str]] | None:
        """The journal a `generate` or `call_tool` input carries, as (start, events, refs)."""
        folded = request.get("journal") if isinstance(request, dict) else None
        if not isinstance(folded, dict):
            return None
        refs = {str(k): str(v) for k, v in dict(folded.get("refs") or {}).items()}
        return int(folded.get("new_from") or 0), list(folded.get("events") or []), refs

    @staticmethod
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

    async def decode(self, payload: Payload) -> Any:
        """A payload of the run's history, through the client's data converter."""
        return await self._decode(payload)

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
