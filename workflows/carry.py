"""Continue-as-new: when a run starts a fresh execution, and what it carries over.

A long run would outgrow Temporal's history limits (50 MB or 51,200 events,
then the server terminates it). So between two turns, at a point where no
tool is in flight, no approval is waiting and every event is in history, the
run continues as new when the server suggests it
(`is_continue_as_new_suggested`, from 4 MB or 4,096 events by default) or
when its history passes the agent's budget (`AgentSpec.history_budget`,
default 8 MB). A turn adds at most about 1 MB of tool results plus the
model's answer, so no execution's history passes 10 MB.

The new execution takes over everything that defines the run: the
conversation (by reference, see `conversation`), the turn it is at and the
segment's turn budget, the usage so far, the failure budget and withdrawn
tools, the decisions people took and how often each call id was used (see
`call_uses`), and the stream's offset. The whole-run
event position is the input's `event_offset`; spend before the segment is
`prior_usage`. Nothing is recorded for the continuation itself: the JSONL
log reads as one segment, as Agentor writes it.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStreamState

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.call_uses import SeenIds, count_key, parse_key, use_key
from agentor_temporal.workflows.carried_outcomes import outcomes_in
from agentor_temporal.workflows.conversation import Conversation
from agentor_temporal.workflows.formatting import QUOTED_CHARS, fit
from agentor_temporal.workflows.steady import reading
from agentor_temporal.workflows.types import Decision
from agentor_temporal.workflows.versions import level


@dataclass
class Carry:
    """What one execution of a segment hands to the next (`AgentRunInput.carry`)."""

    #: turns done in the segment so far (turn numbers keep counting)
    turn: int
    #: the segment's turn budget (max_turns)
    budget: int
    #: when the segment started (its `run_end` reports it)
    started: float
    #: the conversation: a base in history and the messages after it
    conversation: dict[str, Any]
    #: tokens spent in the segment so far
    usage: dict[str, int] = field(default_factory=dict)
    #: failures per tool, and the tools withdrawn (in order)
    failures: dict[str, int] = field(default_factory=dict)
    disabled: list[str] = field(default_factory=list)
    #: use key (`call_uses.use_key`; the call id for an id's first use) ->
    #: the decision a person took (a repeated decision stays refused)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: call id -> calls of the run that used it (absent from carries of
    #: builds before `PATCH_CALL_USES`)
    uses: dict[str, int] = field(default_factory=dict)
    #: the run's stream, emptied (offsets and publisher dedup state only)
    stream: dict[str, Any] | None = None
    #: how many executions the segment has had before this one
    executions: int = 1
    #: ids used once that `uses` no longer counts (`call_uses.SeenIds`, from
    #: `policies.BOUNDED_CARRY` on, past `policies.CARRIED_USES_BYTES`)
    seen: str | None = None
    #: when the chain's `execution_timeout` times it out (epoch seconds; from
    #: `policies.DEADLINE_SETTLES`, for a run started with one: see `deadline`)
    deadline: float | None = None
    #: whether an execution before this one in the line began with a reset
    #: (`run_ids.reset_execution`): its calls take the answers the executions
    #: its base continued into recorded
    reset: bool = False
    #: the segment's recorded spec (an `AgentSpec` as a dict; from
    #: `PATCH_CARRIED_SPEC`): what a continued execution goes on with when its
    #: worker is built differently (`segment.describe_continued`)
    spec: dict[str, Any] | None = None
    #: update or request id -> what a decision by update or signal came to (from
    #: `policies.OUTCOMES_CARRIED`: `carried_outcomes`), so that, sent again
    #: under its name, it is answered with that, never taken anew
    outcomes: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; `seen`, `deadline`, `reset`, `spec` and `signalled` only when set
        (older carries stay as they were)."""
        data = asdict(self)
        for name in ("seen", "deadline", "reset", "spec", "outcomes"):
            if data[name] in (None, False):
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Carry:
        """Read the JSON form.

        Raises:
            ValueError: naming what is malformed.
        """
        if not isinstance(data, dict):
            raise ValueError(f'"carry" must be an object, got {type(data).__name__}')
        try:
            carry = cls(
                turn=int(data["turn"]),
                budget=int(data["budget"]),
                started=float(data["started"]),
                conversation=dict(data["conversation"]),
                usage={str(k): int(v) for k, v in (data.get("usage") or {}).items()},
                failures={str(k): int(v) for k, v in (data.get("failures") or {}).items()},
                disabled=[str(n) for n in data.get("disabled") or []],
                decisions={str(k): dict(v) for k, v in (data.get("decisions") or {}).items()},
                uses={str(k): int(v) for k, v in (data.get("uses") or {}).items()},
                stream=data.get("stream"),
                executions=int(data.get("executions") or 1),
                seen=data.get("seen"),
                deadline=float(data["deadline"]) if data.get("deadline") is not None else None,
                reset=data.get("reset") is True,
                spec=data["spec"] if isinstance(data.get("spec"), dict) else None,
                outcomes=outcomes_in({"carry": data}) or None,
            )
            if carry.seen is not None:
                SeenIds(carry.seen)  # raises naming what is wrong
            for name in ("started", "deadline"):
                _check_time(name, getattr(carry, name))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ValueError(f'"carry" is malformed: {exc}') from None
        Conversation.from_dict(carry.conversation)
        return carry

    def decision_objects(self) -> dict[str, Decision]:
        """The carried decisions as `Decision`s (fields this build does not know are left)."""
        known = {f.name for f in fields(Decision)}
        return {
            k: Decision(**{n: x for n, x in v.items() if n in known})
            for k, v in self.decisions.items()
        }


def _check_time(name: str, value: float | None) -> None:
    """Refuse a carried time no datetime holds (a plain client's input may carry any).

    A `deadline` of Infinity, NaN or 1e300 raised as the run read it (with an
    execution timeout), failing every workflow task of the run, for ever.

    Raises:
        ValueError: naming the field.
    """
    if value is None:
        return
    try:
        datetime.fromtimestamp(value, timezone.utc)
    except (OverflowError, ValueError, OSError):
        raise ValueError(
            f"{name} must be a time in seconds since the epoch, got {value!r}"
        ) from None


def carried_decisions(
    decisions: dict[str, Decision], bounded: bool = False
) -> dict[str, dict[str, Any]]:
    """The decisions as the next execution needs them (`Carry.decisions`).

    `bounded` (`policies.BOUNDED_CARRY`): only the latest CARRIED_DECISIONS,
    a whole turn's, each name cut to CARRIED_NAME_BYTES as encoded. A decision
    sent again is one whose answer was lost as the run continued, so of the
    turn just decided; one for a call of an older turn is refused all the
    same ("no tool call waiting"). Kept all, with names of 100 emoji, three
    turns of 500 decisions passed what a run can carry, and the run ended.

    Between turns no call waits, so a carried decision only refuses a late
    second decision on its call ("already approved by ..."): its reason
    (recorded in the `approval_decision` event, up to MAX_DECISION_TEXT) is
    never read again, and a long call id is kept by digest (`count_key`).
    Carried whole, a run's decisions grew its continue-as-new input without
    bound. Nor are `turn` and `at` carried: a worker of a build before they
    existed may pick the next execution up (it builds each `Decision` from
    every carried field).
    """
    carried: dict[str, dict[str, Any]] = {}
    kept = list(decisions.items())
    if bounded:
        kept = kept[len(kept) - min(len(kept), policies.CARRIED_DECISIONS) :]
    for key, decision in kept:
        call_id, use = parse_key(key)
        if len(call_id) > policies.LONG_CALL_ID_CHARS:
            key = use_key(count_key(call_id), use)
        by = decision.by
        if by is not None and bounded:
            by = fit(by, policies.CARRIED_NAME_BYTES)
        elif by is not None and len(by) > QUOTED_CHARS:
            by = by[:QUOTED_CHARS] + "..."
        taken = Decision(count_key(decision.call_id), decision.approved, None, by)
        carried[key] = {n: x for n, x in asdict(taken).items() if n not in ("turn", "at")}
    return carried


def decisions_in(raw: Any) -> dict[str, Decision]:
    """The decisions carried in a decoded workflow input, if any (never raises).

    Read in the workflow's `__init__`: a decision a client sends again as the
    run continues as new (its first attempt took effect, its answer was lost)
    may be delivered with the next execution's first workflow task, whose
    update validators run before the workflow's `run` does. Restored only
    there, the decision was refused as "no call waiting" although it stood.
    """
    if not isinstance(raw, dict) or raw.get("carry") is None:
        return {}
    try:
        return Carry.from_dict(raw["carry"]).decision_objects()
    except Exception:
        return {}  # a malformed carry fails the run in `validated_input`


def stream_state(raw: Any) -> WorkflowStreamState | None:
    """The stream state carried in a decoded workflow input, if any (never raises).

    Read in the workflow's `__init__`, before the input is validated: a bad
    input must still get a stream, and fail later with its own error. So the
    items are decoded here as `WorkflowStream` decodes them: one that is not
    a payload (a plain client's input) would otherwise raise in `__init__`,
    failing every workflow task of the run instead of the run.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("carry"), dict):
        return None
    state = raw["carry"].get("stream")
    if not isinstance(state, dict):
        return None
    try:
        converter = workflow.payload_converter()
        result: WorkflowStreamState = converter.from_payload(
            converter.to_payload(state), WorkflowStreamState
        )
        for item in result.log:
            Payload().ParseFromString(base64.b64decode(item.data))
    except Exception:
        return None
    return result


def emptied(state: WorkflowStreamState) -> dict[str, Any]:
    """A stream state without its items: the next execution starts past them.

    The items are in history already (as journaled events); carrying them
    would copy the whole execution's stream into the next one's input. A
    follower still behind reads the missing events from history.
    """
    return {
        "log": [],
        "base_offset": state.base_offset + len(state.log),
        "publishers": {
            pid: {"sequence": p.sequence, "last_seen": p.last_seen.isoformat()}
            for pid, p in state.publishers.items()
        },
    }


@dataclass
class HistoryGauge:
    """How big the execution's history is, as of the current workflow task."""

    bytes: int
    events: int
    suggested: bool

    @classmethod
    def now(cls) -> HistoryGauge:
        """Read from the workflow info and the signals taken (`steady.reading`): deterministic."""
        now = reading()
        return cls(bytes=now.size, events=now.events, suggested=now.suggested)

    def due(self, budget: int) -> bool:
        """Whether the execution should continue as new at the next safe point."""
        events = policies.HISTORY_EVENTS_BUDGET
        if level() >= policies.EVENTS_BUDGET_REPLAYABLE:
            events = min(events, policies.REPLAYABLE_EVENTS_BUDGET)
        return self.suggested or self.bytes > budget or self.events > events

    def describe(self) -> str:
        """For the run's current details."""
        hint = " · continue-as-new suggested" if self.suggested else ""
        size = f"{self.bytes / 1e6:.1f} MB" if self.bytes >= 1e6 else f"{self.bytes / 1e3:.0f} kB"
        return f"history {size}, {self.events:,} events{hint}"
