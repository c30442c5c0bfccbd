"""`Journal`: a run's events as the workflow records them.

Every step becomes an `Event` here, in order, numbered by its position in the
run's whole log (earlier segments count). Recording publishes the event to
the run's stream at once (followers see it live). Before the run takes its
next step the new events go into history: `fold` hands them to that step's
activity (a `generate` or the turn's first `call_tool`), whose input history
holds and whose worker mirrors them; `flush` runs the `journal` local
activity instead where no such activity follows (the run's end, an approval,
continuing as new) or the store is behind, and mirrors into the worker's
store whatever the store has not confirmed yet, so a store that failed is
caught up later. A
generation's request is not journaled twice: `refs` names the `generate`
activity whose input already holds it; one sent by reference has no
messages here at all, and `requests` lets the mirror rebuild them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowTopicHandle
from temporalio.converter import AdvancedJSONEncoder
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from agentor_temporal.store.events import Event
from agentor_temporal.workflows import policies, steady
from agentor_temporal.workflows.activity_types import JournalInput, JournalResult
from agentor_temporal.workflows.conversation import ConversationRef, chain_digest
from agentor_temporal.workflows.formatting import failure_message
from agentor_temporal.workflows.payloads import encoded_size, plain
from agentor_temporal.workflows.stream_window import StreamWindow
from agentor_temporal.workflows.types import ForkOrigin, finite
from agentor_temporal.workflows.versions import adopted, level

#: what a generation sent by reference goes without in history
_REQUEST = frozenset(("messages",))


class Journal:
    """The events of one segment, what history has of them, and what the store has.

    Args:
        topic: the run's stream topic that followers read events from.
        window: the stream's retained part; items of journaled events may go.
    """

    def __init__(self, topic: WorkflowTopicHandle[Any], window: StreamWindow | None = None) -> None:
        self.events: list[Event] = []
        #: events recorded before this segment (earlier segments, or a store)
        self.offset = 0
        self._topic = topic
        #: local event index -> id of the generate activity holding its request
        self._refs: dict[int, str] = {}
        #: local event index -> a request sent by reference, until the store has it
        self._requests: dict[int, dict[str, Any]] = {}
        #: events[:_journaled] are in history
        self._journaled = 0
        #: whole-run position the store has confirmed
        self._mirrored: int | None = None
        # concurrent tool calls may journal at once (approval requests); one
        # journal at a time keeps every event in history exactly once
        self._lock = asyncio.Lock()
        #: called with each event as it is recorded (spans, search attributes, metrics)
        self.listeners: list[Callable[[Event], None]] = []
        self._window = window
        #: local event index -> the stream offset it was published at, until journaled
        self._offsets: dict[int, int] = {}
        #: whether an event's request was sent by reference (its messages are
        #: then not in the event: readers rebuild them from history)
        self.by_reference = False
        #: the latest time an event recorded so far reports, and the start of
        #: the workflow task that recorded the last event (see `now`)
        self._latest = 0.0
        self._last_task: float | None = None
        #: journal steps taken since the store fell behind (`_catch_up`)
        self._lagging = 0

    @property
    def position(self) -> int:
        """The whole-run position the next event will take."""
        return self.offset + len(self.events)

    @staticmethod
    def opened() -> float:
        """When this execution began: its start (from `policies.STABLE_EVENT_TIMES`; in history).

        Before that level, the start of its first workflow task.
        """
        if level() < policies.STABLE_EVENT_TIMES:
            return workflow.now().timestamp()
        return workflow.info().workflow_start_time.timestamp()

    def now(self) -> float:
        """The time to stamp an event with: the same in every attempt of a workflow task.

        From `policies.STABLE_EVENT_TIMES` on, an event that follows another
        in the same workflow task (a `run_end` after the final generation,
        an approval request after the generation asking for the call) takes
        the latest of the execution's start and the times the events so far
        report (a generation's or a tool call's end comes from its
        activity's result, in history). One that opens a later task (a
        cancel, a step that failed for good) has no time in history to take:
        it takes the task's start, `workflow.now()`, as every event did
        before that level.
        """
        task = workflow.now().timestamp()
        if level() < policies.STABLE_EVENT_TIMES:
            return task
        latest = max(self.opened(), self._latest)
        return latest if self._last_task == task else max(latest, task)

    def after(self, position: int, max_bytes: int | None = None) -> list[dict[str, Any]]:
        """This segment's events from whole-run `position` on, as dicts.

        Args:
            max_bytes: stop before the event that takes their JSON past it
                (the first is always given).
        """
        found: list[dict[str, Any]] = []
        size = 0
        for event in self.events[max(position - self.offset, 0) :]:
            item = event.to_dict()
            if max_bytes is not None:
                size += len(json.dumps(item, default=str).encode())
                if found and size > max_bytes:
                    break
            found.append(item)
        return found

    @property
    def settled(self) -> bool:
        """Whether every event recorded so far is in history."""
        return self._journaled == len(self.events)

    def last(self, count: int) -> list[Event]:
        """The `count` most recent events."""
        return self.events[len(self.events) - count :] if count else []

    def record(
        self, event: Event, *, ref: str | None = None, request: dict[str, Any] | None = None
    ) -> None:
        """Append an event and publish it to the run's followers.

        Args:
            event: the event.
            ref: id of the generate activity whose input holds its request.
            request: {"conversation", "messages"} of a request sent by reference.
        """
        if ref is not None:
            self._refs[len(self.events)] = ref
        if request is not None:
            self._requests[len(self.events)] = request
            self.by_reference = True
        if self._window is not None:
            self._offsets[len(self.events)] = self._window.end()
        for at in (event.started_at, event.ended_at):
            if isinstance(at, (int, float)) and finite(at) and at > self._latest:
                self._latest = float(at)
        self._last_task = workflow.now().timestamp()
        self._topic.publish(
            {
                "index": self.position,
                "event": event.to_dict(share_args=True),
                "published_at": workflow.now().timestamp(),
            }
        )
        self.events.append(event)
        for listener in self.listeners:
            listener(event)

    def record_fork(self, origin: ForkOrigin) -> None:
        """Record what a fork's log holds past its parent's events: copies, then the marker."""
        for data in origin.events:
            self.record(Event.from_dict(data))
        now = self.now()
        # Agentor's marker: a fork's own life starts here
        self.record(Event(type="fork", forked_from=origin.run_id, started_at=now, ended_at=now))
        workflow.set_current_details(
            f"Forked from {origin.run_id} at event {origin.at + len(origin.events)}"
        )

    def unmirrored(self, mirror: bool) -> int:
        """Events of this segment the store has not confirmed (0 when not mirroring)."""
        if not mirror:
            return 0
        confirmed = (self._mirrored if self._mirrored is not None else self.offset) - self.offset
        return len(self.events) - confirmed

    async def flush(self, agent: str, mirror: bool, *, strict: bool = False) -> None:
        """Put new events in history and mirror unconfirmed ones into the store.

        Args:
            agent: the agent's name (the worker finds its store by it).
            mirror: whether the worker mirrors this agent's events.
            strict: retry a failing store (the run's last step does).
        """
        async with self._lock:
            await self._flush(agent, mirror, strict)

    async def _flush(self, agent: str, mirror: bool, strict: bool) -> None:
        total = len(self.events)
        if total - self._journaled > 1 and self._steps_bounded(total):
            # one step per part, each closing its workflow task (a timer): the
            # markers of steps in one task all go in its one completion
            while total - self._journaled > 1:
                end = self._step_end(total)
                if end == total:
                    break
                await self._step(agent, mirror, strict, end)
                await workflow.sleep(policies.JOURNAL_STEP_PAUSE)
        await self._step(agent, mirror, strict, total)

    def _steps_bounded(self, total: int) -> bool:
        """Whether the new events go in history in parts: more than one step holds.

        Asked only then (`policies.PATCH_JOURNAL_STEPS`): other runs replay unchanged.
        """
        return self._step_end(total) < total and adopted(policies.PATCH_JOURNAL_STEPS)

    def _step_end(self, total: int) -> int:
        """The end of the longest run of new events one step records within its budget."""
        size = 0
        for index in range(self._journaled, total):
            size += encoded_size(self._as_recorded(index))
            if size > policies.MAX_JOURNAL_STEP_BYTES and index > self._journaled:
                return index
        return total

    async def _step(self, agent: str, mirror: bool, strict: bool, total: int) -> None:
        """Record events[:total] in history (one `journal` step), mirroring what the store lacks."""
        behind = self.unmirrored(mirror) > 0
        if self._journaled == total and not (strict and behind):
            return
        confirmed = len(self.events) - self.unmirrored(mirror)
        first = min(self._journaled, max(confirmed, 0)) if mirror else self._journaled
        mirroring, first = self._catch_up(mirror, strict, first)
        inp = JournalInput(
            run_id=workflow.info().workflow_id,
            agent=agent,
            mirror=mirroring,
            start=self.offset + first,
            events=[e.to_dict(share_args=True) for e in self.events[first:total]],
            new_from=self.offset + self._journaled,
            refs={
                str(self.offset + i): ref
                for i, ref in self._refs.items()
                if self._journaled <= i < total
            },
            strict=strict,
            requests={
                str(self.offset + i): r for i, r in self._requests.items() if first <= i < total
            }
            if mirroring
            else {},
        )
        try:
            res: JournalResult = await steady.local(
                workflow.start_local_activity(
                    policies.JOURNAL,
                    plain(inp),
                    result_type=JournalResult,
                    start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
                    retry_policy=(
                        policies.FINAL_MIRROR_RETRY_POLICY
                        if strict
                        else policies.LOCAL_RETRY_POLICY
                    ),
                    summary=f"journal {total - self._journaled} events",
                )
            )
        except (ActivityError, ApplicationError, TemporalTimeoutError) as exc:
            # a local activity's failure arrives unwrapped (the activity's own
            # ApplicationError, or a TimeoutError), not as ActivityError; letting
            # it through failed the whole run over a broken mirror. No open
            # history diverges: before, this path closed the workflow at once.
            workflow.logger.warning(
                "Journaling run %s failed: %s", workflow.info().workflow_id, failure_message(exc)
            )
            return
        self._recorded(total)
        self.confirm(res.mirrored if res.error is None else None, mirror)

    def _catch_up(self, mirror: bool, strict: bool, first: int) -> tuple[bool, int]:
        """Whether this step mirrors, and the first event it sends: a store behind is bounded.

        A store that fails (full, down) falls further behind each step, and
        each step sent it every event since the last it confirmed: the
        workflow encoded them all again in every task, its CPU growing with
        the square of the turns (240 turns of a store down: 42 s to replay,
        against 2 s) towards the SDK's 2 s deadlock limit. So once behind,
        the store is asked again at steps 1, 2, 4, 8, ... of the lag (and at
        the run's last step, `strict`), sent at most `MAX_CATCH_UP_EVENTS`
        of what it lacks: the worker reads the rest from the run's history
        (`activities.journal`), as it does for a gap. Local-activity inputs
        are not in history: every run replays as it did.
        """
        if not mirror or first >= self._journaled:
            self._lagging = 0
            return mirror, first
        self._lagging += 1
        if not strict and self._lagging & (self._lagging - 1):
            return False, self._journaled  # between tries: only the new events, to history
        return True, max(first, self._journaled - policies.MAX_CATCH_UP_EVENTS)

    def closing_record(self, agent: str) -> dict[str, Any]:
        """The new events as a `journal` step would record them, for the run's result.

        A run that closes with its events in its result (`policies.JOURNAL_IN_RESULT`)
        has no journal step: the result's payload carries them (`in_result`),
        and `history_reader` reads them there.
        """
        total = len(self.events)
        inp = JournalInput(
            run_id=workflow.info().workflow_id,
            agent=agent,
            mirror=False,
            start=self.offset + self._journaled,
            events=[e.to_dict(share_args=True) for e in self.events[self._journaled :]],
            new_from=self.offset + self._journaled,
            refs={
                str(self.offset + i): ref for i, ref in self._refs.items() if i >= self._journaled
            },
        )
        recorded = inp.recorded()
        self._recorded(total)
        return {"start": recorded.start, "events": recorded.events, "refs": recorded.refs}

    def pending_bytes(self) -> int:
        """Encoded size of the events not in history yet, as a journal step records them."""
        size = 0
        for index in range(self._journaled, len(self.events)):
            size += encoded_size(self._as_recorded(index))
        return size

    def _as_recorded(self, index: int) -> dict[str, Any]:
        """events[index] as history records it: a generation sent by reference
        goes without its request, which history has in the `generate` input."""
        if index in self._refs:
            return self.events[index].to_dict(share_args=True, without=_REQUEST)
        return self.events[index].to_dict(share_args=True)

    def fold(self, agent: str, mirror: bool, beside: int = 0) -> JournalInput | None:
        """The new events, to go into history as part of the next activity's input.

        That activity (`generate`, or a turn's first `call_tool`) mirrors them
        too, so no journal step is needed before it. None when there is
        nothing new, or when a journal step must run instead: one is under
        way (concurrent approvals), or the store is behind (its catch-up
        repeats events, which a local activity's input carries at no cost
        and history must not). Once folded, the events count as in history:
        the activity is scheduled in the same workflow task. Large events
        take a journal step too: the activity's input (`beside` bytes without
        them) must stay one payload Temporal accepts.

        A generation's request is not in history twice: the event goes
        without it (`refs` names the `generate` input that holds it), and the
        mirror is told where to find it, the event itself as a conversation
        base, which the worker that sent the request still holds.
        """
        total = len(self.events)
        fresh = total - self._journaled
        if not fresh or self._lock.locked() or self.unmirrored(mirror) > fresh:
            return None
        first = self._journaled
        events: list[dict[str, Any]] = []
        requests: dict[str, dict[str, Any]] = {}
        for index in range(first, total):
            position = self.offset + index
            if index in self._refs and mirror and index not in self._requests:
                # the mirror is told where the request is: its count and digest
                data = self.events[index].to_dict(share_args=True)
                sent = data.pop("messages", None)
                if sent is not None:
                    base = ConversationRef(
                        position=position, count=len(sent), digest=chain_digest("", sent)
                    )
                    requests[str(position)] = {"conversation": base.to_dict(), "messages": []}
            else:
                data = self._as_recorded(index)
            if mirror and index in self._requests:
                requests[str(position)] = self._requests[index]
            events.append(data)
        size = encoded_size(events) + encoded_size(requests)
        if size > min(policies.MAX_FOLD_BYTES, policies.MAX_REQUEST_BYTES - beside):
            return None
        inp = JournalInput(
            run_id=workflow.info().workflow_id,
            agent=agent,
            mirror=mirror,
            start=self.offset + first,
            events=events,
            new_from=self.offset + first,
            refs={str(self.offset + i): ref for i, ref in self._refs.items() if i >= first},
            requests=requests,
        )
        self._recorded(total)
        if not mirror:
            self.confirm(None, mirror)
        return inp

    def unfold(self, folded: JournalInput) -> None:
        """`folded`'s events did not reach history: its activity was cancelled before it
        was scheduled (in the workflow task that started it). The next step records them."""
        self._journaled = min(self._journaled, max(folded.start - self.offset, 0))

    def _recorded(self, total: int) -> None:
        """events[:total] are in history now."""
        self._journaled = total
        if self._window is not None:
            # stream items before the first event not in history may go
            recorded = self._offsets.get(total, self._window.end())
            self._offsets = {i: o for i, o in self._offsets.items() if i >= total}
            self._window.release(recorded)

    def confirm(self, mirrored: int | None, mirror: bool) -> None:
        """Note how far the store got (None: unknown, or it failed)."""
        if mirrored is not None:
            self._mirrored = mirrored
        # requests the store has now (or never needs) are not kept
        done = self._journaled if not mirror else (self._mirrored or self.offset) - self.offset
        for index in [i for i in self._requests if i < done]:
            del self._requests[index]


def in_result(
    outcome: dict[str, Any], record: dict[str, Any] | None, whole: bytes | None = None
) -> dict[str, Any] | RawValue:
    """The run's result, its payload carrying the events of `closing_record`
    (`policies.RESULT_JOURNAL`) and the run's whole log as `whole_log` encodes it
    (`policies.RESULT_EVENTS`).

    The result itself is the contract's JSON, exactly; the events ride in the
    payload's metadata, which clients that decode the result do not see. With
    neither, the result is `outcome` as it is.
    """
    if record is None and whole is None:
        return outcome
    payload = workflow.payload_converter().to_payload(outcome)
    if record is not None:
        # JSON whatever the payload converter: readers parse it as such
        payload.metadata[policies.RESULT_JOURNAL] = _json(record)
    if whole is not None:
        payload.metadata[policies.RESULT_EVENTS] = whole
    return RawValue(payload)


def whole_log(events: list[Event]) -> bytes | None:
    """`events` as a JSON array, or None once past `policies.MAX_RESULT_EVENTS_BYTES`.

    Encoded one event at a time, so a large run stops at the limit instead of
    encoding every event it has only to leave them out.
    """
    parts, size = [], 2
    for event in events:
        part = _json(event.to_dict(share_args=True))
        size += len(part) + 1
        if size > policies.MAX_RESULT_EVENTS_BYTES:
            return None
        parts.append(part)
    return b"[" + b",".join(parts) + b"]"


def _json(value: Any) -> bytes:
    return json.dumps(value, cls=AdvancedJSONEncoder, separators=(",", ":")).encode()
