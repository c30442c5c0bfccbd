"""Workflow input and result, and the agent spec the workflow records.

These cross the wire (any Temporal client may start `AgentRun` with a JSON
object), so they import nothing heavy and parse defensively: a malformed input
must fail the workflow with a clear error, never the workflow task, which
Temporal would retry forever.

Annotations here are objects, not strings (no `from __future__ import
annotations`): Temporal's converter evaluates a dataclass's type hints each
time it decodes one, and strings cost 3-5x as much to evaluate
(`tests/unit/test_payload_types.py`).
"""

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agentor_temporal.store.events import Event, Usage
from agentor_temporal.workflows.call_shapes import check_answer_call
from agentor_temporal.workflows.call_uses import SeenIds
from agentor_temporal.workflows.policies import MAX_DECISION_BYTES, MAX_DECISION_TEXT

#: Input keys a plain client may send; anything else is refused by name.
_INPUT_KEYS = frozenset(
    {
        "agent",
        "input",
        "max_turns",
        "event_offset",
        "prior_usage",
        "previous_execution",
        "stream_text",
        "carry",
        "conversation",
        "fork",
        "fingerprint",
        "call_uses",
        "call_seen",
        "answer",
        "recovered",
        "outcomes",
    }
)


@dataclass
class ForkOrigin:
    """Where a fork's log begins: the first `at` events of its parent's log.

    A reference, not a copy: the parent's events never travel as workflow
    input (a long run's log would pass the 2 MB payload limit); whoever reads
    the fork (`TemporalStore`, the journal's mirror) reads them from the
    parent's history, or from a store when only a store has them.
    """

    #: the parent run's id
    run_id: str
    #: how many of the parent's events the fork starts with (its event_offset)
    at: int
    #: the parent's execution whose chain of segments holds those events;
    #: None when only a store has them (a log Agentor wrote, or expired history)
    execution: str | None = None
    #: events the fork records itself before its `fork` marker: results of a
    #: tool batch the parent completed in history but had not journaled yet
    events: list[dict[str, Any]] = field(default_factory=list)
    #: the fork is a snapshot of a finished parent: it records the marker and
    #: returns `final_output` with no model request
    snapshot: bool = False
    final_output: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, without defaults."""
        data: dict[str, Any] = {"run_id": self.run_id, "at": self.at}
        if self.execution is not None:
            data["execution"] = self.execution
        if self.events:
            data["events"] = self.events
        if self.snapshot:
            data["snapshot"] = True
            data["final_output"] = self.final_output
        return data


def parse_fork_origin(raw: Any) -> ForkOrigin:
    """Validate the `fork` field of a workflow input.

    Raises:
        ValueError: saying which part is wrong.
    """
    if isinstance(raw, ForkOrigin):
        return raw
    if not isinstance(raw, dict):
        raise ValueError('"fork" must be an object like {"run_id": "<parent>", "at": 7}')
    unknown = sorted(set(raw) - {"run_id", "at", "execution", "events", "snapshot", "final_output"})
    if unknown:
        raise ValueError(f'unknown "fork" field(s) {unknown}')
    parent, at = raw.get("run_id"), raw.get("at")
    if not isinstance(parent, str) or not parent:
        raise ValueError('"fork"."run_id" must be the parent run\'s id')
    if not isinstance(at, int) or isinstance(at, bool) or at < 0:
        raise ValueError(f'"fork"."at" must be a non-negative integer, got {at!r}')
    execution = raw.get("execution")
    if execution is not None and not isinstance(execution, str):
        raise ValueError('"fork"."execution" must be a string')
    events = raw.get("events") or []
    if not isinstance(events, list) or not all(
        isinstance(e, dict) and isinstance(e.get("type"), str) for e in events
    ):
        raise ValueError('"fork"."events" must be a list of events')
    for index, event in enumerate(events):
        try:
            Event.from_dict(event)
            _check_times(event)
        except (ValueError, TypeError) as exc:
            raise ValueError(f'"fork"."events"[{index}] is not an event: {exc}') from None
    output = raw.get("final_output")
    if output is not None and not isinstance(output, str):
        raise ValueError('"fork"."final_output" must be a string')
    return ForkOrigin(
        run_id=parent,
        at=at,
        execution=execution,
        events=[dict(e) for e in events],
        snapshot=bool(raw.get("snapshot", False)),
        final_output=output,
    )


@dataclass
class AgentRunInput:
    """What starts one segment of a run (`AgentRun` workflow input)."""

    #: registered agent name
    agent: str
    #: a prompt, or a list of chat messages (a resumed segment passes the
    #: replayed conversation here)
    input: str | list[dict[str, Any]]
    #: overrides the agent's max_turns for this segment
    max_turns: int | None = None
    #: events recorded before this segment (earlier segments, or a store)
    event_offset: int = 0
    #: usage spent before this segment, so the result reports the whole run
    prior_usage: dict[str, int] | None = None
    #: execution id of the segment this one continues, for history projection
    previous_execution: str | None = None
    #: publish text deltas while the model generates
    stream_text: bool = False
    #: set by continue-as-new: the state the segment carries on with (`Carry`
    #: as JSON); `input` is then unused and may be empty
    carry: dict[str, Any] | None = None
    #: the input messages by reference, for a resumed conversation too large
    #: to send: {"base": {"position", "count", "digest", "size"}, "tail": [...]}
    #: means the messages of the run's event at `position`, then `tail`;
    #: `input` is then unused and may be empty
    conversation: dict[str, Any] | None = None
    #: set on a fork's first segment: the parent events its log begins with
    fork: ForkOrigin | None = None
    #: the agent definition the starter expects (`AgentDefinition.fingerprint()`):
    #: a worker whose agent is built differently does not start the segment
    fingerprint: str | None = None
    #: with `conversation`: how many calls of the whole conversation used each
    #: call id (the workflow counts the calls of messages it is given itself),
    #: so later calls reusing an id get keys of their own (`call_uses`)
    call_uses: dict[str, int] | None = None
    #: with `call_uses`: the ids used once it leaves out (`call_uses.SeenIds`),
    #: when counting them one by one passed `policies.CARRIED_USES_BYTES`
    call_seen: str | None = None
    #: a resumed segment's first answer, when the segment before was stopped
    #: with it just recorded (`policies.GENERATION_KEPT`): {"text", "reasoning",
    #: "calls", "started_at", "ended_at"} of that `generation`, whose request is
    #: `input`. The segment records it again and goes on from it (runs its
    #: calls) instead of sending the request a second time. Also an answer
    #: history holds that the segment before never recorded (it was
    #: terminated or timed out first); that one has "usage" too, counted here.
    #: A fork of a run waiting for a person goes on from its recorded answer
    #: too; its "results" (one per call: a `tool_result` event, or None) are
    #: the answers of the calls that ran in the parent, which are not run again.
    answer: dict[str, Any] | None = None
    #: a resumed segment's first events: the results of the tool batch the
    #: segment before had run to completion in history, but was stopped
    #: (terminated, timed out) before it recorded them. The segment records
    #: them before its `run_start` and goes on from them (`input` answers the
    #: calls with them) instead of running the calls a second time.
    recovered: list[dict[str, Any]] | None = None
    #: a resumed segment's: request id -> what a decision sent under it came to in
    #: the executions before (`closed_outcomes`, in `Carry.outcomes`' shape), so that,
    #: sent again under its name, it is answered with that, never taken anew
    outcomes: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, without defaults (what `temporal workflow start` takes)."""
        data: dict[str, Any] = {"agent": self.agent, "input": self.input}
        defaults = AgentRunInput(agent="", input="")
        for key in _INPUT_KEYS - {"agent", "input", "fork"}:
            value = getattr(self, key)
            if value != getattr(defaults, key):
                data[key] = value
        if self.fork is not None:
            data["fork"] = self.fork.to_dict()
        return data


def parse_run_input(raw: Any) -> AgentRunInput:
    """Validate a workflow input that may come from any client.

    Raises:
        ValueError: saying what is wrong and what is expected.
    """
    expected = (
        'expected a JSON object like {"agent": "Weather Agent", '
        '"input": "What is the weather in London?"}'
    )
    if isinstance(raw, AgentRunInput):
        raw = raw.to_dict()
    if not isinstance(raw, dict):
        raise ValueError(f"input is {type(raw).__name__}, {expected}")
    unknown = sorted(set(raw) - _INPUT_KEYS)
    if unknown:
        raise ValueError(f"unknown input field(s) {unknown}; {expected}")
    agent = raw.get("agent")
    if not isinstance(agent, str) or not agent.strip():
        raise ValueError(f'"agent" must be a non-empty string; {expected}')
    carry = raw.get("carry")
    if carry is not None and not isinstance(carry, dict):
        raise ValueError('"carry" must be an object (it is set by continue-as-new)')
    conversation = raw.get("conversation")
    if conversation is not None and not isinstance(conversation, dict):
        raise ValueError('"conversation" must be an object {"base": {...}, "tail": [...]}')
    prompt = raw.get("input")
    if (carry is not None or conversation is not None) and prompt in (None, "", []):
        prompt = []
    elif isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError('"input" is an empty prompt')
    elif isinstance(prompt, list):
        if not prompt:
            raise ValueError('"input" is an empty message list')
        for i, message in enumerate(prompt):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ValueError(f'"input"[{i}] is not a chat message with a "role"')
    else:
        raise ValueError(f'"input" must be a string or a list of chat messages; {expected}')
    max_turns = raw.get("max_turns")
    if max_turns is not None and (
        not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1
    ):
        raise ValueError(f'"max_turns" must be a positive integer, got {max_turns!r}')
    offset = raw.get("event_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f'"event_offset" must be a non-negative integer, got {offset!r}')
    prior = raw.get("prior_usage")
    if prior is not None and not isinstance(prior, dict):
        raise ValueError('"prior_usage" must be an object of token counts')
    try:
        Usage.from_dict(prior)
    except (TypeError, ValueError, OverflowError) as exc:
        # read in the workflow's first task: raising there failed every task
        raise ValueError(f'"prior_usage" must be an object of token counts ({exc})') from None
    previous = raw.get("previous_execution")
    if previous is not None and not isinstance(previous, str):
        raise ValueError('"previous_execution" must be a string')
    fork = parse_fork_origin(raw["fork"]) if raw.get("fork") is not None else None
    if fork is not None and offset != fork.at:
        raise ValueError(
            f'"event_offset" ({offset}) must equal "fork"."at" ({fork.at}): '
            "a fork's log begins with that many of its parent's events"
        )
    fingerprint = raw.get("fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError('"fingerprint" must be a string')
    uses = raw.get("call_uses")
    if uses is not None and not (
        isinstance(uses, dict)
        and all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in uses.items()
        )
    ):
        raise ValueError('"call_uses" must be an object of call id -> number of calls')
    seen = raw.get("call_seen")
    if seen is not None:
        if not isinstance(seen, str):
            raise ValueError('"call_seen" must be a string')
        SeenIds(seen)  # raises naming what is wrong
    answer = raw.get("answer")
    if answer is not None and not (
        isinstance(answer, dict)
        and isinstance(answer.get("calls") or [], list)
        and all(isinstance(c, dict) for c in answer.get("calls") or [])
        and isinstance(answer.get("text"), (str, type(None)))
        and _usage_ok(answer.get("usage"))
    ):
        raise ValueError('"answer" must be an object {"text", "calls": [...]} (set by resume)')
    for index, call in enumerate((answer or {}).get("calls") or []):
        check_answer_call(index, call)
    if answer is not None and answer.get("results") is not None:
        _check_answered(answer["results"], len(answer.get("calls") or []))
    recovered = raw.get("recovered")
    if recovered is not None:
        if not isinstance(recovered, list) or not all(
            isinstance(e, dict) and e.get("type") == "tool_result" for e in recovered
        ):
            raise ValueError('"recovered" must be a list of tool_result events (set by resume)')
        for index, event in enumerate(recovered):
            try:
                Event.from_dict(event)
                _check_times(event)
            except (ValueError, TypeError) as exc:
                raise ValueError(f'"recovered"[{index}] is not an event: {exc}') from None
    outcomes = raw.get("outcomes")
    if outcomes is not None and not isinstance(outcomes, dict):
        raise ValueError('"outcomes" must be an object of request id -> outcome (set by resume)')
    return AgentRunInput(
        agent=agent,
        input=prompt,
        max_turns=max_turns,
        event_offset=offset,
        prior_usage=prior,
        previous_execution=previous,
        stream_text=bool(raw.get("stream_text", False)),
        carry=carry,
        conversation=conversation,
        fork=fork,
        fingerprint=fingerprint or None,
        call_uses=uses,
        call_seen=seen,
        answer=answer,
        recovered=recovered or None,
        outcomes=outcomes or None,
    )


def _check_answered(results: Any, calls: int) -> None:
    """Validate `AgentRunInput.answer["results"]`: one `tool_result` event or None per call.

    Raises:
        ValueError: saying what is wrong.
    """
    wrong = '"answer"."results" must be a list of tool_result events or nulls, one per call'
    if not isinstance(results, list) or len(results) != calls:
        raise ValueError(f"{wrong} (set by fork)")
    for index, event in enumerate(results):
        if event is None:
            continue
        if not isinstance(event, dict) or event.get("type") != "tool_result":
            raise ValueError(f"{wrong}; [{index}] is not one")
        try:
            Event.from_dict(event)
        except (ValueError, TypeError) as exc:
            raise ValueError(f'"answer"."results"[{index}] is not an event: {exc}') from None


def _usage_ok(usage: Any) -> bool:
    """Whether `usage` is absent or token counts a run can take (read in a workflow task)."""
    if usage is None:
        return True
    try:
        Usage.from_dict(usage)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return False
    return isinstance(usage, dict)


@dataclass
class RunOutcome:
    """How a run ended: the workflow result (the contract's JSON object), typed.

    `run_agent` returns one to a user's workflow; `to_dict()` is what the
    `AgentRun` workflow returns to any client.
    """

    run_id: str
    #: "completed", "max_turns" or "failed" ("awaiting_approval" only in a `RunResult`)
    status: str
    final_output: str | None
    #: tokens of the whole run, every segment included
    usage: Usage = field(default_factory=Usage)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "RunOutcome":
        """Read a workflow result (unknown keys ignored; a missing usage is zero)."""
        if not isinstance(data, dict):
            raise ValueError(f"an AgentRun result is a JSON object, got {type(data).__name__}")
        usage = data.get("usage")
        return cls(
            run_id=str(data.get("run_id") or ""),
            status=str(data.get("status") or "failed"),
            final_output=data.get("final_output"),
            usage=Usage.from_dict(usage if isinstance(usage, dict) else None),
            error=data.get("error"),
        )


@dataclass
class ToolSpec:
    """A tool as the model and the UI see it."""

    name: str
    description: str
    parameters: dict[str, Any]
    #: "never", "always" or "predicate" (decided per call by the worker)
    approval: str = "never"
    #: seconds a person has to decide, None for no limit
    approval_timeout: float | None = None
    #: "deny" or "fail": what an expired approval does
    on_approval_timeout: str = "deny"
    #: start-to-close for one call, seconds
    timeout: float | None = None

    def openai_schema(self) -> dict[str, Any]:
        """The chat-completions `tools` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass
class AgentSpec:
    """An agent's definition as recorded at the start of each segment.

    Recorded in history (the describe step's local activity, or the run's
    start header where its worker has the same spec; `workflows.segment`), so a
    replay sees what the run was started with even when the worker's code
    has changed since.
    """

    name: str
    model: str
    instructions: str | None
    tools: list[ToolSpec] = field(default_factory=list)
    model_settings: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 20
    max_tool_failures: int = 2
    #: whether this worker mirrors the agent's events into a store
    mirror: bool = False
    #: whether the namespace has the AgentName / AgentModel search attributes
    search_attributes: bool = False
    #: whether it has AgentStatus / AgentTokens too (registered apart: a
    #: namespace may have the first two and refuse new ones)
    status_attributes: bool = False
    #: whether it has ForkedFrom (registered apart too); None in specs recorded
    #: before this field, when `search_attributes` covered it
    fork_attribute: bool | None = None
    #: hash of instructions, model and tool schemas: what "built the same way" means
    fingerprint: str = ""
    #: history bytes after which an execution continues as new (0: the default)
    history_budget: int = 0
    #: conversation bytes sent whole with each request (0: the default)
    inline_bytes: int = 0
    #: the behaviour level of the build that recorded this spec
    #: (`policies.BEHAVIOUR`; 0 in specs recorded before levels existed)
    behaviour: int = 0
    #: ask the model in local activities, inside the workflow task (fewer
    #: server round trips); False in specs recorded before this field
    local_model_calls: bool = False

    def tool(self, name: str) -> ToolSpec | None:
        """The tool called `name`, if the agent has one."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None


@dataclass
class Decision:
    """A person's decision on one tool call (the `decide` update's input)."""

    call_id: str
    approved: bool
    reason: str | None = None
    #: who decided, when the caller says
    by: str | None = None
    #: the turn of the call the person saw (`PendingApproval.turn`, the
    #: `approval_request` event's turn): models reuse call ids, so a decision
    #: naming a turn decides only that turn's call, and is refused when the
    #: call with this id waiting is another turn's. None: the call with this
    #: id waiting now, whichever it is (plain clients, older senders)
    turn: int | None = None
    #: when the person decided (seconds since the epoch, the sender's clock;
    #: set by the facade and the CLI): the `approval_decision` event's
    #: `ended_at`, no earlier than the request. None: when the run took it
    at: float | None = None

    def turn_problem(self) -> str | None:
        """Why the decision's `turn` is not one a call can have (None when it can).

        Apart from `problem`: the `decide` validator checks it, the handler
        does not (a build that ignored `turn` may have taken such a decision).
        """
        turn = self.turn
        if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool) or turn < 1):
            return f"turn must be a positive integer, got {turn!r}"
        return None

    def problem(self) -> str | None:
        """Why the decision cannot be taken as given (None when it can)."""
        at = self.at
        if at is not None and (
            isinstance(at, bool) or not isinstance(at, (int, float)) or not finite(at)
        ):
            return f"at must be a time in seconds since the epoch, got {at!r}"
        for name in ("reason", "by"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                return f"{name} must be text, got {type(value).__name__}"
            if value is not None and len(value) > MAX_DECISION_TEXT:
                return (
                    f"{name} is {len(value):,} characters; a decision's {name} may have at "
                    f"most {MAX_DECISION_TEXT:,}"
                )
        return None

    def size_problem(self) -> str | None:
        """Why the decision's texts are too large to record (None when they are not).

        Apart from `problem`: counted as Temporal encodes them (an emoji is 12
        bytes), and asked by senders, the `decide` validator and, from
        `policies.BOUNDED_DECISION_BYTES` on, for a decision sent by signal
        (handlers replay older runs' decisions as they were taken). Each text is recorded
        about four times (the update, the `approval_decision` event, a
        denial's answer and the model's next request), so 300 denials with
        4,000 emoji of reason and name made 53 MB of history in one turn,
        and Temporal terminated the run at 50 MB.
        """
        for name in ("reason", "by"):
            value = getattr(self, name)
            if not isinstance(value, str):
                continue
            size = len(json.dumps(value)) - 2
            if size > MAX_DECISION_BYTES:
                return (
                    f"{name} takes {size:,} bytes as Temporal records it (a character outside "
                    f"ASCII takes 6 or 12); a decision's {name} may take at most "
                    f"{MAX_DECISION_BYTES:,}: shorten it"
                )
        return None


def _check_times(event: dict[str, Any]) -> None:
    """Refuse an event time no float holds (10**400, Infinity, NaN) in a plain client's input.

    The run records such an event as it starts: the times 10**400 raised
    OverflowError there, failing every workflow task of the run, for ever.

    Raises:
        ValueError: naming the field.
    """
    for key in ("started_at", "ended_at"):
        value = event.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not finite(value):
            raise ValueError(f"field '{key}' must be a time in seconds since the epoch")


def finite(number: float) -> bool:
    """Whether `number` is a finite float, or an int a float holds.

    A plain client's JSON may carry an integer of any length, which
    `math.isfinite` cannot take: a `decide_signal` whose `at` was 10**400
    raised OverflowError in its handler, failing every workflow task for ever.
    """
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


@dataclass
class PausedState:
    """What `wait_paused` reports: why the run stopped making progress."""

    #: "awaiting_approval", or the final status when the run ended instead
    status: str
    #: pending approvals: {"call_id", "tool", "args", "turn"}
    pending: list[dict[str, Any]] = field(default_factory=list)
    #: the answer left the calls' args out, or every call (`task_answers.TaskAnswers`):
    #: the caller reads the pause whole by the `paused` query
    partial: bool = False
