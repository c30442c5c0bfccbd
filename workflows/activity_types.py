"""Activity inputs and results: one dataclass each, fields with defaults.

Imported by the workflow (through the sandbox's pass-through), the activities
and `TemporalStore`, so it imports nothing heavy. New fields get defaults so
histories recorded before them still decode.

Annotations here are objects, not strings (no `from __future__ import
annotations`): Temporal's converter evaluates a dataclass's type hints each
time it decodes one, and strings cost 3-5x as much to evaluate
(`tests/unit/test_payload_types.py`).
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DescribeAgentInput:
    """Ask the worker for the registered agent's spec."""

    agent: str
    #: the definition the run's starter expects ("": whatever the worker has)
    fingerprint: str = ""


@dataclass
class RunOutcomeInput:
    """Ask for the outcome of a run `run_agent` did not start (its id was used before)."""

    run_id: str
    #: the agent `run_agent` was asked to run: a run of another is refused (None: not checked)
    agent: str | None = None


@dataclass
class JournalResult:
    """The events as recorded in history, and how far the mirror got."""

    #: the new events; a `generation` listed in `refs` carries no messages
    events: list[dict[str, Any]] = field(default_factory=list)
    #: position in the run's whole log of `events[0]`
    start: int = 0
    refs: dict[str, str] = field(default_factory=dict)
    #: position the store's log has reached, None when not mirroring
    mirrored: int | None = None
    error: str | None = None


@dataclass
class JournalInput:
    """Record new events in history and mirror events into the store.

    Local-activity inputs never reach history, so `events` may repeat events
    the store has not confirmed yet at no cost; only the result is recorded.
    Carried in a `GenerateInput` it is in history itself: then `events` are
    exactly the new ones (`start == new_from`).
    """

    run_id: str
    agent: str
    #: whether the worker should mirror into the agent's store
    mirror: bool
    #: position in the run's whole log of `events[0]`
    start: int
    #: full events (dicts), from the first not yet mirrored or recorded
    events: list[dict[str, Any]]
    #: position of the first event that is new to history
    new_from: int
    #: position -> generate activity id, for `generation` events whose
    #: request messages are already in history as that activity's input
    refs: dict[str, str] = field(default_factory=dict)
    #: raise when the store fails, so the local activity's retries apply
    strict: bool = False
    #: position -> {"conversation": ref, "messages": tail} for `generation`
    #: events sent by reference: the mirror writes their full request
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)

    def recorded(self) -> JournalResult:
        """The new events as history records them (a `journal` step's result, a run's result)."""
        new = [dict(e) for e in self.events[self.new_from - self.start :]]
        refs = {k: v for k, v in self.refs.items() if int(k) >= self.new_from}
        for key in refs:
            # the request is already in history as the generate activity's input
            new[int(key) - self.new_from].pop("messages", None)
        return JournalResult(events=new, start=self.new_from, refs=refs)


@dataclass
class GenerateInput:
    """One model request."""

    run_id: str
    agent: str
    model: str
    #: the exact request messages (recorded on the `generation` event); with
    #: `conversation` set, only those after its base
    messages: list[dict[str, Any]]
    #: chat-completions tool schemas; None offers no tools
    tools: list[dict[str, Any]] | None = None
    model_settings: dict[str, Any] = field(default_factory=dict)
    turn: int = 1
    #: stream the response and publish text deltas to the run's stream
    stream_text: bool = False
    #: the conversation's base in the run's history (a `ConversationRef` as
    #: JSON): the request is those messages followed by `messages`
    conversation: dict[str, Any] | None = None
    #: whole-run position the `generation` event will take (the worker keeps
    #: it with the request, to rebuild a later one from there)
    position: int | None = None
    #: the run's recorded agent fingerprint: only a worker built the same way runs it
    fingerprint: str = ""
    #: the run's events new since the last journal step: history holds them
    #: here (no `journal` local activity before the request) and the worker
    #: mirrors them before asking the model (see `Journal.fold`)
    journal: JournalInput | None = None
    #: a local request: when its workflow task started (`workflow.now()`); a
    #: request that would begin past `policies.LOCAL_START_LIMIT` of it is
    #: refused before the model is asked, and the run asks in an activity
    task_started: float | None = None
    #: a local request no earlier send of which can have been lost with its
    #: worker (see `Generation._first_send`): the worker does not read the
    #: run's history for lost sends. False (as from a workflow before this
    #: field) reads it
    first_send: bool = False
    #: sent from an execution that a reset (`temporal workflow reset`) began:
    #: the worker answers with the result the same request got in the execution
    #: the reset ended, if it completed there (`activities._reset_answers`)
    reset_execution: bool = False
    #: a local request of a run with a time limit (`policies.LOCAL_REQUEST_BOUNDED`):
    #: the run's `Deadline.settle_by`, as a timestamp; the worker gives up on
    #: the model at it (`policies.LOCAL_OUT_OF_TIME`), as the limit's timer
    #: cannot stop a request holding its workflow task
    settle_by: float | None = None


@dataclass
class GenerateResult:
    """What the model answered, timed inside the activity."""

    text: str | None = None
    reasoning: str | None = None
    #: OpenAI `tool_calls` shape: {"id", "type": "function", "function": {...}}
    calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None
    #: the activity attempt that answered (set by the worker's telemetry
    #: interceptor; 1 from workers without it)
    attempt: int = 1
    #: with `GenerateInput.journal`: the position the store's log has reached
    mirrored: int | None = None
    #: from a local activity (whose input history does not keep): the
    #: request as sent, {"messages", "conversation"}, so history holds it
    #: once, where `TemporalStore` finds a generation's messages
    request: dict[str, Any] | None = None


@dataclass
class CallToolInput:
    """One tool call."""

    run_id: str
    agent: str
    call_id: str
    name: str
    args: dict[str, Any]
    turn: int = 1
    #: the run's recorded agent fingerprint: only a worker built the same way runs it
    fingerprint: str = ""
    #: as `GenerateInput.journal`: the events new since the last journal step
    journal: JournalInput | None = None
    #: which call with `call_id` in the run this is (1: the first; models
    #: reuse ids): names its idempotency key (`call_uses.use_key`)
    use: int = 1
    #: the call's share of its turn's result budget: the result is cut to this
    #: many bytes as encoded, as the workflow would cut it after (None: only to
    #: `policies.MAX_TOOL_RESULT_BYTES`), so the activity's own result, which
    #: history records too, is never larger than the run keeps of it
    max_result_bytes: int | None = None
    #: for a run with a time limit, when (epoch seconds) the call must have
    #: answered once its run stops (`Deadline.settle_by`): a sync tool's thread
    #: is waited for until then at most, not `policies.CANCEL_GRACE`
    settle_by: float | None = None
    #: as `GenerateInput.reset_execution`: a call the execution the reset ended
    #: completed (the tool answered without raising) is answered from there
    reset_execution: bool = False


@dataclass
class CallToolResult:
    """A tool's answer; `error` is set when the tool raised."""

    result: str | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    #: set when the result was cut to fit Temporal's payload limit
    truncated: bool = False
    #: the activity attempt that answered (see `GenerateResult.attempt`)
    attempt: int = 1
    #: with `CallToolInput.journal`: the position the store's log has reached
    mirrored: int | None = None


@dataclass
class ApprovalCheckInput:
    """Ask whether one call of a tool with a predicate needs approval."""

    agent: str
    name: str
    args: dict[str, Any]
    #: the run's recorded agent fingerprint: only a worker built the same way decides
    fingerprint: str = ""
