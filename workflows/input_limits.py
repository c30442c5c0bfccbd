"""What a segment's input may make a run record: refused at the start, saying why.

Any Temporal client can start `AgentRun`. The facade checks what it sends;
a plain client's input reaches the workflow unchecked, and Temporal accepting
it (under 2 MB) does not mean the run can record it: the `run_start` event
holds the messages after the agent's instructions, a fork's copied events go
into the same journal step, and names and counts go into search attributes
that have limits of their own. A payload or attribute Temporal refuses fails
the workflow task, and every retry after it: the run wedges. So the first
execution of a segment measures what its opening will record and send, as
the facade does before starting (`_results.check_size`, `_fork.start_fork`),
and the run fails at once, before recording anything, naming the problem.
The limit is what one payload can hold (`policies.MAX_PAYLOAD_BYTES`), not
the facade's stricter 1.5 MB for a new run's first request: a resumed run
whose conversation grew past that still starts, as it did.
"""

from __future__ import annotations

from agentor_temporal.store.base import validate_run_id
from agentor_temporal.store.encoding import nesting
from agentor_temporal.store.events import Usage
from agentor_temporal.store.replay import initial_messages
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.conversation import Conversation
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.types import AgentRunInput, AgentSpec


def opening_size(inp: AgentRunInput, spec: AgentSpec) -> int:
    """Encoded bytes of what the segment's opening puts in one payload.

    The messages after the agent's instructions, which `run_start` records
    (a resumed conversation by reference: its tail, which the first
    `generate` input holds), with a fork's copied events (journaled in the
    same step), the tool schemas (sent with the first request) and the
    call-id counts (carried over every continue-as-new).
    """
    if inp.conversation is not None:
        messages = Conversation.from_dict(inp.conversation).tail
    else:
        messages = initial_messages(spec.instructions, inp.input)
    size = encoded_size(messages) + encoded_size([t.openai_schema() for t in spec.tools])
    if inp.fork is not None:
        size += encoded_size(inp.fork.events)
    size += encoded_size(inp.call_seen) if inp.call_seen else 0
    return size + (encoded_size(inp.call_uses) if inp.call_uses else 0)


def depth_problem(inp: AgentRunInput) -> str | None:
    """Why the segment's opening input nests too deeply to run (None when it does not).

    Measured without recursing, before anything copies or encodes the input:
    its messages (a resumed conversation's tail) and a fork's copied events.
    """
    tail = (inp.conversation or {}).get("tail") if isinstance(inp.conversation, dict) else None
    parts = [("input", inp.input), ("conversation tail", tail)]
    if inp.fork is not None:
        parts.append(('"fork"."events"', inp.fork.events))
    for what, value in parts:
        depth = nesting(value)
        if depth > policies.MAX_INPUT_DEPTH:
            return (
                f"The {what} nests {depth} levels deep, over the {policies.MAX_INPUT_DEPTH} "
                "a run takes (a list of chat messages is 2 levels deep): flatten it, or pass "
                "the structure as a JSON string."
            )
    return None


def _json_kind(value: object) -> str:
    """What JSON calls a value's type (a plain client sent JSON, not Python)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an object" if isinstance(value, dict) else "an array"


def calls_problem(inp: AgentRunInput) -> str | None:
    """Why the segment's opening messages hold calls of no shape a run reads (None if not).

    The run counts the call ids of the conversation it opens with (its
    assistant messages' `tool_calls`), as a resumed run's; a plain client's
    `tool_calls` of 5 or true raised there in every workflow task. What no
    provider takes either is refused at the start, naming the message.
    """
    tail = (inp.conversation or {}).get("tail") if isinstance(inp.conversation, dict) else None
    for what, messages in (("input", inp.input), ("conversation tail", tail)):
        if not isinstance(messages, list):
            continue
        for i, message in enumerate(messages):
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if calls is None:
                continue
            if not isinstance(calls, list):
                held = f"is {_json_kind(calls)}"
            else:
                odd = [c for c in calls if not isinstance(c, dict)]
                if not odd:
                    continue
                held = f"holds {_json_kind(odd[0])}"
            return (
                f'The {what}\'s message {i}: its "tool_calls" {held}, not a list of calls '
                "(objects with an id and a function). Send the calls as the model's reply "
                "had them, or leave them out."
            )
    return None


def input_problem(inp: AgentRunInput, spec: AgentSpec, *, opening: bool) -> str | None:
    """Why this input cannot run (None when it can).

    Args:
        opening: the segment's first execution (a continued one's input is
            the carry its previous execution made, measured when it was made).
    """
    if inp.fork is not None:
        try:
            validate_run_id(inp.fork.run_id)
        except ValueError as exc:
            return f'"fork"."run_id" is not a run id: {exc}'
    carried = (inp.carry or {}).get("usage")
    # a stopped segment's answer (set by resume) is counted as the run takes it
    given = (inp.answer or {}).get("usage")
    for name, usage in (
        ("prior_usage", inp.prior_usage),
        ("carry.usage", carried),
        ("answer.usage", given),
    ):
        counts = Usage.from_dict(usage if isinstance(usage, dict) else None)
        for field, count in vars(counts).items():
            if not 0 <= count <= policies.MAX_TOKEN_COUNT:
                return (
                    f'"{name}".{field} is {count}; token counts are 0 to '
                    f"{policies.MAX_TOKEN_COUNT} (AgentTokens is a 64-bit search attribute)"
                )
    if not opening:
        return None
    size = opening_size(inp, spec)
    if size <= policies.MAX_PAYLOAD_BYTES:
        return None
    return (
        f"The input is too large: the run's first model request would be {size / 1e6:.2f} MB "
        "as Temporal encodes it (with the agent's instructions and tool schemas, and what "
        f"the run records with it), over the {policies.MAX_PAYLOAD_BYTES / 1e6:.1f} MB a run "
        "records in one payload (Temporal accepts at most 2 MB). Send less, or pass a "
        "reference (a file name, a URL) and let a tool read it."
    )
