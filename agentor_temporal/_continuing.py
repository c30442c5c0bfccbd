"""The input of a resumed run's next segment: the replayed conversation, whole or by reference.

A run resumed after a failure starts a new segment whose input is the
conversation replayed from its events. A long run's conversation can be
larger than Temporal takes in one payload (2 MB), so past a small size the
input names the event it replays from (a `generation` or `run_start` that
Temporal's history holds) and carries only the messages after it; the
worker rebuilds the rest from the run's history, as for every request of a
long run (see `agentor_temporal.workflows.conversation`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import asdict
from typing import Any

from agentor_temporal._results import check_input
from agentor_temporal.store import Event, replay_messages, total_usage
from agentor_temporal.store.encoding import nesting
from agentor_temporal.store.replay import replay_base, segment_events
from agentor_temporal.workflows.call_uses import CallUses
from agentor_temporal.workflows.conversation import ConversationRef, chain_digest
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.policies import (
    INLINE_CONVERSATION_BYTES,
    MAX_INPUT_DEPTH,
    MAX_REQUEST_BYTES,
    MAX_TOKEN_COUNT,
)
from agentor_temporal.workflows.types import AgentRunInput, parse_run_input

logger = logging.getLogger(__name__)


def continuation_input(
    agent: str,
    run_id: str,
    events: list[Event],
    *,
    previous: str | None,
    in_temporal_from: int,
    max_turns: int | None,
    recovered: list[Event] | None = None,
    unrecorded: dict[str, Any] | None = None,
) -> AgentRunInput:
    """The next segment's input for a run that did not complete.

    Args:
        agent: the agent's name.
        run_id: the run.
        events: the run's whole log.
        previous: the closed execution continued (None when only a store has the run).
        in_temporal_from: position of the first event Temporal's history has.
        max_turns: the new segment's turn budget (None: the agent's).
        recovered: results of the last tool batch that history holds but the
            log lacks (`_history_answers.completed_batch`): the segment records them and
            goes on from them, so their calls do not run again.
        unrecorded: a model answer history holds but the log lacks
            (`_history_answers.completed_answer`), to the request the log replays to.

    Raises:
        ValueError: when the events hold no conversation to continue, or one
            nested too deeply for a run to take.
    """
    recovered = recovered or []
    messages = replay_messages(events + recovered)
    answer = kept_answer(events)
    if unrecorded is not None and answer is None and not recovered:
        answer = unrecorded
    elif answer is not None and not answer["calls"] and messages[-1:]:
        # a final answer is replayed after its request: the segment records it again
        messages = messages[:-1]
    if not messages:
        raise ValueError(f"Run {run_id!r} has no recoverable messages; start a new run.")
    check_replayed(run_id, messages)
    inp = AgentRunInput(
        agent=agent,
        input=messages,
        max_turns=max_turns,
        event_offset=len(events),
        prior_usage=prior_usage(events),
        previous_execution=previous,
        answer=answer,
        recovered=[e.to_dict() for e in recovered] or None,
    )
    if previous is None:
        return inp
    # the recovered results are after the base `replay_base` finds in `events`
    inp = by_reference(inp, events + recovered, in_temporal_from)
    if recovered and encoded_size(inp.to_dict()) > MAX_REQUEST_BYTES:
        # they travel twice (as events and as tool messages): results too large
        # for that are dropped, and the batch rewound as it was before
        logger.warning(
            "Run %s: the results its last calls left in history are too large to carry "
            "into its resume; the model decides that turn again",
            run_id,
        )
        return continuation_input(
            agent,
            run_id,
            events,
            previous=previous,
            in_temporal_from=in_temporal_from,
            max_turns=max_turns,
        )
    return inp


def kept_answer(events: list[Event]) -> dict[str, Any] | None:
    """The answer a stopped segment recorded last and left unused, for the next to go on from.

    From `policies.GENERATION_KEPT` a run stopped while its model request was
    in flight records the answer when it comes, then its `run_end` at once: a
    `generation` the `run_end` directly follows, in the latest segment, is
    such an answer (any other ends with a `message`, or its `tool_call`s).
    Its request is what `replay_messages` rewinds to, so the next segment
    records it again and goes on from it rather than sending the request again.
    """
    segment = segment_events(events)
    if len(segment) < 2 or segment[-1].type != "run_end" or segment[-2].type != "generation":
        return None
    answer = segment[-2]
    return {
        "text": answer.text,
        "reasoning": answer.reasoning,
        "calls": copy.deepcopy(answer.calls or []),
        "started_at": answer.started_at,
        "ended_at": answer.ended_at,
    }


def restart_input(
    agent: str,
    run_id: str,
    first: Any,
    *,
    previous: str,
    failure: str | None,
    max_turns: int | None,
) -> AgentRunInput:
    """The next segment's input for a run that ended before it recorded anything.

    A run can close before its `run_start`: no worker knew its agent, or one
    built differently (it fails at once, saying so), or it was terminated,
    cancelled or timed out while no worker ran. It recorded nothing, but its
    history holds the input it was started with, so it begins again from that
    input (a fork's too: its parent's events, its new message, its marker).
    Before, `resume` found no messages and raised, and `run()` with the same
    id returned the old failure: the id could never run again; a fork was
    continued from its parent's messages without its new one.

    Args:
        agent: the resuming agent's name.
        run_id: the run.
        first: the input its first execution was started with, as recorded.
        previous: the closed execution continued.
        failure: how that execution ended, for the error.
        max_turns: the new segment's turn budget (None: the run's own).

    Raises:
        ValueError: when that input is not one a run takes (nothing to begin
            from), or names another agent.
    """
    why = f" (it ended: {failure})" if failure else ""
    try:
        recorded = parse_run_input(first)
        check_input(recorded.input)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"Run {run_id!r} has no recoverable messages: it recorded no events{why}, and the "
            f"input it was started with is not one a run takes ({exc}); start a new run."
        ) from None
    if recorded.carry is not None or recorded.conversation is not None:
        # a continuation's input means nothing without the events before it
        raise ValueError(f"Run {run_id!r} has no recoverable messages; start a new run.")
    if recorded.agent != agent:
        raise ValueError(
            f"Run {run_id!r} belongs to agent {recorded.agent!r}, not {agent!r}; "
            "resume it with that agent."
        )
    return AgentRunInput(
        agent=agent,
        input=recorded.input,
        max_turns=max_turns if max_turns is not None else recorded.max_turns,
        event_offset=recorded.event_offset,
        prior_usage=recorded.prior_usage,
        previous_execution=previous,
        stream_text=recorded.stream_text,
        fork=recorded.fork,
    )


def prior_usage(events: list[Event]) -> dict[str, int]:
    """The run's token counts so far, as its next segment carries them.

    Counts a worker recorded are already within what the AgentTokens search
    attribute holds; a log's (damaged, hand-edited, or written with another
    provider's counts) may be negative or past 2**53, which the run refuses
    as input: every resume of it failed at its start. Clamped, as the worker
    clamps a provider's counts.
    """
    counts = asdict(total_usage(events))
    return {name: min(max(count, 0), MAX_TOKEN_COUNT) for name, count in counts.items()}


def check_replayed(run_id: str, messages: list[dict[str, Any]]) -> None:
    """Refuse a replayed conversation no run can take, before anything starts.

    A log edited by hand or written elsewhere can replay to one: nested
    deeper than a run takes (started, the run would fail at once,
    `PATCH_INPUT_DEPTH`, or on a worker of an earlier build fail every
    workflow task on Python's recursion limit), or with an item that is not
    a chat message (every resume started a segment that failed at once).

    Raises:
        ValueError: naming the run and the problem.
    """
    depth = nesting(messages)
    if depth > MAX_INPUT_DEPTH:
        raise ValueError(
            f"Run {run_id!r} cannot be continued: its conversation nests {depth} levels "
            f"deep, over the {MAX_INPUT_DEPTH} a run takes. Its events are all kept; start "
            "a new run from a summary of them."
        )
    try:
        check_input(messages)
    except ValueError as exc:
        # each resume would start a segment that fails at once, saying the same
        raise ValueError(
            f"Run {run_id!r} cannot be continued: its log replays to messages no run "
            f"takes ({exc}; a damaged or hand-edited line). Its events are all kept; "
            "mend that line, or start a new run from a summary of them."
        ) from None


def by_reference(inp: AgentRunInput, events: list[Event], in_temporal_from: int) -> AgentRunInput:
    """`inp` with its messages sent by reference, when they are large and history has a base.

    `inp.input` is the conversation replayed from `events`; its base is the
    event `replay_base` names, which must be at or after `in_temporal_from`
    (the first of `events` that Temporal's history holds). A fork passes its
    parent's events: the fork's log holds them at the same positions.
    """
    messages = inp.input
    base = replay_base(events)
    if not isinstance(messages, list) or base is None or base < in_temporal_from:
        return inp
    head = events[base].messages or []
    if encoded_size(messages) <= INLINE_CONVERSATION_BYTES or len(head) > len(messages):
        return inp
    ref = ConversationRef(
        position=base, count=len(head), digest=chain_digest("", head), size=encoded_size(head)
    )
    inp.input = []
    inp.conversation = {"base": ref.to_dict(), "tail": messages[len(head) :]}
    # the workflow sees the tail only: it needs the whole conversation's count
    # of each call id, so a later call reusing one gets an idempotency key of its own
    uses = CallUses()
    uses.seed_messages(messages)
    counts, inp.call_seen = uses.compacted()
    inp.call_uses = counts or None
    return inp
