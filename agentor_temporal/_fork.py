"""Forking a run: Agentor's `fork`, on Temporal, plus forking from any event position.

A fork is its own `AgentRun` workflow, id = the fork's id. Its log begins with
the parent's first N events, which its first segment *references*
(`ForkOrigin`: the parent's id, the execution holding them, N) instead of
carrying: a long parent's log would pass the 2 MB input limit, and the
projection (`TemporalStore.whole`) and the journal's mirror read them from the
parent's history, or from a store when only a store has the parent. What the
segment carries is what a resumed segment carries: the conversation replayed
from those events (a half-finished tool batch rewound), their usage, and N as
its event offset. The workflow records Agentor's `fork` marker and goes on
like any segment, or, for a finished parent forked without input, returns the
snapshot with no model request.

One state needs more than the journaled events: a tool batch whose activities
completed in the parent's history before its worker died, with the results
not yet journaled. Forking from the journal alone would rewind that batch and
run its tools again, so the fork records those results itself
(`ForkOrigin.events`), built from the completed activities the way the
workflow builds them. So does a fork with input of a parent whose last turn
had some calls finished (`answered_turn`): the new message follows that whole
turn rather than rewinding it and running the finished calls again. Kept
apart from the facade so a change in how segments carry their conversation
touches this module alone.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from agentor_temporal._continuing import by_reference, check_replayed, kept_answer, prior_usage
from agentor_temporal._fork_calls import check_waiting_calls
from agentor_temporal._gone import not_found, run_gone, shown_store
from agentor_temporal._history_answers import (
    answered_turn,
    completed_answer,
    completed_batch,
    unstarted_answer,
    waiting_answer,
)
from agentor_temporal._live import serve_until_done, waited_on
from agentor_temporal._outage import riding_outages
from agentor_temporal._results import await_result, check_input, check_turns
from agentor_temporal._start import start_once
from agentor_temporal.activities import AgentDefinition
from agentor_temporal.activities._redact import mask_input
from agentor_temporal.store import (
    Event,
    RunResult,
    Store,
    final_event,
    is_complete,
    new_run_id,
    replay_messages,
    validate_run_id,
)
from agentor_temporal.store.base import in_thread, read_events
from agentor_temporal.store.encoding import standard_value
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.formatting import preview_input
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.policies import (
    MAX_REQUEST_BYTES,
    WORKFLOW_TASK_TIMEOUT,
    WORKFLOW_TYPE,
)
from agentor_temporal.workflows.projection import known_messages, resolve_requests
from agentor_temporal.workflows.types import AgentRunInput, ForkOrigin

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from agentor_temporal.agent import Agentor

MessageInput = str | list[dict[str, Any]]


class ForkIdInUse(ValueError):
    """A fork's id names a run that exists (Agentor raises ValueError; this is one)."""


async def run_fork(
    agent: Agentor,
    run_id: str,
    input: MessageInput | None,
    fork_id: str | None,
    max_turns: int | None,
    at: int | None,
) -> RunResult:
    """`Agentor.fork`: check, read the parent, start the fork, wait for its result."""
    input = fork_message(input)
    client, fork_id, point, inp = await _prepare(agent, run_id, input, fork_id, max_turns, at)
    async with agent._serving(client):
        with waited_on(agent, client, fork_id):
            await start_fork(
                client, agent.definition, agent.task_queue, fork_id, inp, agent.store, input
            )
            try:
                result = await riding_outages(
                    lambda: await_result(
                        client,
                        fork_id,
                        pauses=agent._pauses,
                        # the parent's events were read above: only the fork's own are new
                        events_of=lambda segments: _forked_log(point, segments),
                    ),
                    client,
                    what=f"waiting for fork {fork_id!r}",
                    run_id=fork_id,
                )
                return with_note(result, fork_id)
            except Exception as exc:
                if not_found(exc):  # gone from the server meanwhile (it came back empty)
                    exc = await run_gone(client, fork_id, agent.store)
                    add_note(exc, fork_id)
                    raise exc from None
                add_note(exc, fork_id)
                raise


async def start_fork_run(
    agent: Agentor,
    run_id: str,
    input: MessageInput | None,
    fork_id: str | None,
    max_turns: int | None,
    at: int | None,
    *,
    attach: bool = False,
) -> str:
    """Make the fork and return its id at once (`POST /runs/{run_id}/fork`), as `astart` does.

    `attach`: `fork_id` names the fork of a request that may have been sent before (an
    idempotency key's): a run by that id is that fork, answered as made, not made again.

    Raises:
        KeyError, ValueError, TypeError: as `Agentor.fork` (`ForkIdInUse` for a taken id).
    """
    input = fork_message(input)
    client, fork_id, point, inp = await _prepare(agent, run_id, input, fork_id, max_turns, at)
    try:
        await start_fork(
            client, agent.definition, agent.task_queue, fork_id, inp, agent.store, input
        )
    except ForkIdInUse:
        if not attach:
            raise
    await serve_until_done(agent, client, fork_id)  # the embedded worker
    return fork_id


async def _prepare(
    agent: Agentor,
    run_id: str,
    input: MessageInput | None,
    fork_id: str | None,
    max_turns: int | None,
    at: int | None,
) -> tuple[Client, str, ForkPoint, AgentRunInput]:
    """Check the arguments, read the parent, and make the fork's id and input."""
    check_fork_input(input)
    check_turns(max_turns)
    fork_id = new_run_id() if fork_id is None else validate_run_id(fork_id)
    client = await agent._client()
    point = await riding_outages(
        lambda: fork_point(client, run_id, at, agent.store),
        client,
        what=f"reading run {run_id!r} to fork it",
    )
    kept = answered_turn(point.unrecorded) if input is not None else None
    if kept is not None:
        # the new message follows the parent's turn, its finished calls' results kept
        point.origin.events += [e.to_dict() for e in kept]
        point.events = point.events + kept
    inp = fork_input(agent.name, point, input, max_turns)
    if point.running and inp.answer is None:
        # the fork asks the model again: calls still open in the parent may run twice
        _warn_in_flight(point.parent, point.events)
    check_waiting_calls(agent.definition, point.parent, inp.answer, point.events)
    return client, fork_id, point, inp


def fork_message(input: MessageInput | None) -> MessageInput | None:
    """The fork's input, checked, with every key this process knows masked (`mask_input`).

    Raises:
        ValueError, TypeError: as `check_fork_input`, before masking walks the input
            (a list that contains itself has no end).
    """
    if input is None:
        return input
    check_fork_input(input)
    return mask_input(input)


async def _forked_log(point: ForkPoint, segments: list[Segment]) -> list[Event]:
    """The fork's whole log: the parent's events as read at the fork, then its own."""
    prefix = point.events[: point.origin.at]
    resolve_requests(segments, known_messages(prefix))
    return prefix + [e for s in segments for e in s.events]


@dataclass
class ForkPoint:
    """The state of a parent that a fork starts from."""

    parent: str
    #: the parent's first `at` events, as the fork's log holds them
    events: list[Event]
    #: how the fork's first segment refers to them
    origin: ForkOrigin
    #: position of the first parent event its own history holds (None: the
    #: parent is only in a store); a conversation based there goes by reference
    in_temporal_from: int | None = None
    #: a model answer the parent's history holds but its log lacks (it was
    #: stopped first, `completed_answer`), or the recorded answer of a parent
    #: waiting for a person (`waiting_answer`) or stopped before its turn's calls
    #: started (`unstarted_answer`), for a fork of its whole log
    unrecorded: dict[str, Any] | None = None
    #: the parent was still running when it was read
    running: bool = False


def check_fork_input(input: MessageInput | None) -> None:
    """Refuse input a fork cannot continue with (None is fine: no input).

    Raises:
        ValueError: for an empty list (Agentor's message), prompt or bad messages.
        TypeError: for anything but a prompt or a message list.
    """
    if input is None:
        return
    if isinstance(input, list) and not input:
        # an empty list is almost certainly a bug, and would re-execute the
        # conversation with no new message at all
        raise ValueError("input is an empty list; pass None to fork without input.")
    check_input(input)


async def fork_point(client: Client, run_id: str, at: int | None, store: Store | None) -> ForkPoint:
    """Read the parent `run_id` and pick its first `at` events (all when None).

    Temporal's record comes first; a parent that Temporal does not know
    (a log Agentor wrote, or history that retention removed) is read from
    `store`.

    Raises:
        KeyError: when neither Temporal nor the store knows the parent.
        ValueError: for an `at` outside the parent's log, or a parent whose
            first events are gone from both.
    """
    validate_run_id(run_id)
    if at is not None and (not isinstance(at, int) or isinstance(at, bool)):
        raise ValueError(f"at must be an event position (an integer), got {at!r}")
    temporal = TemporalStore(client)
    segments = await temporal.segments(run_id)
    execution: str | None = None
    in_temporal_from: int | None = None
    pending: list[Event] = []
    unrecorded: dict[str, Any] | None = None
    if segments:
        events, missing = await temporal.whole(run_id, segments, store)
        if missing:
            raise ValueError(
                f"Run {run_id!r}'s first {missing} events are neither in Temporal nor in "
                f"{shown_store(store)}; it cannot be forked"
            )
        execution = segments[-1].execution_run_id
        in_temporal_from = segments[0].event_offset
        pending = await completed_batch(temporal, segments[-1])
        if not pending and segments[-1].status != "running":
            # a running parent records it itself; the fork would ask again
            # or the recorded answer of a turn stopped before its calls started,
            # or of one stopped mid-turn or waiting for a person (the calls that ran kept)
            unrecorded = (
                await completed_answer(temporal, segments[-1])
                or unstarted_answer(segments[-1])
                or await waiting_answer(temporal, segments[-1])
            )
        elif not pending:
            # one waiting for a person: the fork goes on from its recorded answer
            unrecorded = await waiting_answer(temporal, segments[-1])
    else:
        events = await in_thread(read_events, store, run_id) if store is not None else []
    if not events:
        from agentor_temporal.connection import describe_target

        where = f" or in {shown_store(store)}" if store is not None else ""
        raise KeyError(
            f"No persisted run with id {run_id!r} in Temporal at {describe_target(client)}{where}."
        )
    total = len(events) + len(pending)
    if at is None:
        at = total
    if not 1 <= at <= total:
        raise ValueError(
            f"at={at} is not an event position of run {run_id!r}: its log has {total} "
            f"events, so at is 1 to {total} (the fork keeps that many)"
        )
    journaled = min(at, len(events))
    copied = pending[: at - journaled]
    whole = at == total
    origin = ForkOrigin(
        run_id=run_id,
        at=journaled,
        execution=execution,
        events=[e.to_dict() for e in copied],
    )
    return ForkPoint(
        run_id,
        events[:journaled] + copied,
        origin,
        in_temporal_from,
        unrecorded=unrecorded if whole else None,
        running=bool(segments) and segments[-1].status == "running",
    )


def _warn_in_flight(run_id: str, kept: list[Event]) -> None:
    """Say so when a running parent's calls the fork keeps have no results yet.

    The parent may still be running them (or, its worker lost, will run them
    again): the fork has no answer for them, so it asks the model again and
    may run them a second time, under its own idempotency keys.
    """
    generations = [i for i, e in enumerate(kept) if e.type == "generation"]
    batch = kept[generations[-1] :] if generations else []  # models reuse call ids across turns
    answered = {e.call_id for e in batch if e.type == "tool_result"}
    open_calls = [
        f"{e.name}({e.call_id})"
        for e in batch
        if e.type == "tool_call" and e.call_id not in answered
    ]
    if open_calls:
        logger.warning(
            "Run %s is still running, and the fork has no results for its call(s) %s: the "
            "parent may still be running them. The fork asks the model again and may run "
            "them a second time, under its own idempotency keys. To keep their results, "
            "fork once the parent has finished (or cancel it first).",
            run_id,
            ", ".join(open_calls),
        )


def fork_input(
    agent: str, point: ForkPoint, input: MessageInput | None, max_turns: int | None
) -> AgentRunInput:
    """The fork's first segment: Agentor's three cases.

    Without input, an unfinished parent is continued (its conversation as a
    resume replays it) and a finished one becomes a snapshot; with input,
    the conversation continues with it, finished parent or not.

    Raises:
        ValueError: when the parent's events hold no conversation.
    """
    events = point.events
    messages = replay_messages(events)
    # a parent stopped with its answer in hand kept it (`policies.GENERATION_KEPT`):
    # continued without input, the fork goes on from that answer, as resume does,
    # rather than paying for the same request again
    answer = kept_answer(events) if input is None else None
    if answer is not None and not answer["calls"] and messages[-1:]:
        # a final answer is replayed after its request: the fork records it again
        messages = messages[:-1]
    elif input is None and answer is None:
        # an answer the parent never recorded, or one whose calls wait for a person:
        # its request is what the log replays to
        answer = point.unrecorded
    if not messages:
        raise ValueError(f"Run {point.parent!r} has no recoverable messages; start a new run.")
    check_replayed(point.parent, messages)
    origin = point.origin
    if input is None and is_complete(events):
        end = final_event(events)
        origin = dataclasses.replace(
            origin, snapshot=True, final_output=end.text if end is not None else None
        )
    elif isinstance(input, str):
        messages.append({"role": "user", "content": input})
    elif input is not None:
        messages.extend(dict(m) for m in input)
    inp = AgentRunInput(
        agent=agent,
        input=messages,
        max_turns=max_turns,
        event_offset=origin.at,
        prior_usage=prior_usage(events),
        fork=origin,
        answer=answer,
    )
    if point.in_temporal_from is None:
        return inp
    # a large conversation goes as a resumed one does: its base is a parent
    # event in the parent's history (the fork's log has it at the same
    # position), and only the messages after it travel; a base among the
    # copied results would not be in history, so only the journaled ones count
    return by_reference(inp, events[: origin.at], point.in_temporal_from)


async def start_fork(
    client: Client,
    agent: AgentDefinition,
    task_queue: str,
    fork_id: str,
    inp: AgentRunInput,
    store: Store | None,
    prompt: MessageInput | None,
) -> None:
    """Start the fork's workflow; refuse an id in use, overwriting nothing.

    Raises:
        ValueError: when Temporal or the store already has a run `fork_id`
            (`ForkIdInUse`), or the fork's input is too large to start it.
    """
    # a retried fork lands here: choosing another id would pay for a second fork
    taken = ForkIdInUse(
        f"Run {fork_id!r} already exists; choose an unused id. If it is this fork, sent "
        f"before, it goes on: follow it with resume({fork_id!r}) "
        f"(`agentor-temporal resume {fork_id}`)."
    )
    # the fork runs as this agent is built: a worker built otherwise leaves it alone
    inp.fingerprint = agent.fingerprint()
    size = encoded_size(inp.to_dict())
    if size > MAX_REQUEST_BYTES:
        # refused here, naming the limit, not by Temporal's raw "Blob data size exceeds limit"
        raise ValueError(
            f"The fork's input would be {size / 1e6:.2f} MB as Temporal encodes it, over the "
            f"{MAX_REQUEST_BYTES / 1e6:.1f} MB limit of one request (Temporal accepts at most "
            "2 MB in one payload). Send less input, or fork from a run Temporal holds (its "
            "conversation then goes by reference)."
        )
    if store is not None:
        existing: list[Event] = await in_thread(read_events, store, fork_id, 1)
        if existing:
            raise taken
    origin = inp.fork
    assert origin is not None
    parent, at = origin.run_id, origin.at + len(origin.events)
    tools = ", ".join(t.name for t in agent.tools) or "none"
    summary = f"{agent.name}: fork of {parent}"
    if prompt is not None:
        summary += f": {preview_input(prompt)}"
    # one request id for every try: a start sent again after a server outage
    # (its answer lost) is the one Temporal took, not "id in use"
    request_id = uuid.uuid4().hex
    payload = standard_value(inp.to_dict())  # a parent's log may hold NaN: not into history
    try:
        await riding_outages(
            lambda: start_once(
                client,
                WORKFLOW_TYPE,
                payload,
                id=fork_id,
                task_queue=task_queue,
                request_id=request_id,
                # an id used before (finished or running) is refused, atomically:
                # two forks racing for one id cannot both start
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                task_timeout=WORKFLOW_TASK_TIMEOUT,
                static_summary=summary,
                static_details=(
                    f"**Forked from** {parent} (its first {at} events)  \n"
                    f"**Agent** {agent.name}  \n**Model** {agent.model}  \n**Tools** {tools}"
                ),
            ),
            client,
            what=f"starting fork {fork_id!r} of run {parent!r}",
        )
    except WorkflowAlreadyStartedError:
        raise taken from None


def persisted_note(fork_id: str) -> str:
    """What a failed fork says, so the persisted fork can be resumed (Agentor's words)."""
    return f"Forked run persisted as {fork_id!r}; resume it to retry."


def with_note(result: RunResult, fork_id: str) -> RunResult:
    """A failed fork's result, its error naming the fork to resume."""
    if result.status == "failed":
        note = persisted_note(fork_id)
        result.error = f"{result.error}\n{note}" if result.error else note
    return result


def add_note(exc: BaseException, fork_id: str) -> None:
    """Name the persisted fork on an exception raised after it started."""
    add = getattr(exc, "add_note", None)  # Python 3.11+
    if callable(add):
        add(persisted_note(fork_id))
