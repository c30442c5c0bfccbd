"""Starting and resuming a run for `Agentor`: `run()` and `resume()` on the runtime loop.

`start_run` starts workflow `AgentRun` (id = run id) and waits for it.
`resume_run` follows the resume table in DESIGN.md: a completed run is
returned as it is (its mirror caught up), a running one is waited for, and
any other continues as a new segment under the same id; a run Temporal no
longer holds is read from the store. Only a worker built as the agent that
resumes may continue it (the fingerprint travels with the segment).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy

from agentor_temporal._continuing import continuation_input, restart_input
from agentor_temporal._gone import shown_store
from agentor_temporal._history_answers import (
    completed_answer,
    completed_batch,
    mirrored_waiting_answer,
    unstarted_answer,
    waiting_answer,
)
from agentor_temporal._live import only_stored, waited_on
from agentor_temporal._outage import riding_outages
from agentor_temporal._results import (
    check_input,
    check_owner,
    check_size,
    check_turns,
    result_from,
)
from agentor_temporal._runs import seeded_prefix
from agentor_temporal._start import (
    refuse_other_workflow,
    resume_key,
    resume_memo,
    segment_request_id,
    start_riding_outages,
)
from agentor_temporal.activities._redact import mask_input
from agentor_temporal.activities.journal import catch_up
from agentor_temporal.store import RunResult, is_complete, new_run_id, validate_run_id
from agentor_temporal.store.base import in_thread
from agentor_temporal.store.encoding import encodable
from agentor_temporal.workflows import TemporalStore
from agentor_temporal.workflows.carried_outcomes import carried_outcomes
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.policies import MAX_REQUEST_BYTES
from agentor_temporal.workflows.types import AgentRunInput

if TYPE_CHECKING:
    from agentor_temporal.agent import Agentor

MessageInput = str | list[dict[str, Any]]


def new_input(
    agent: Agentor,
    input: MessageInput,
    run_id: str | None,
    max_turns: int | None,
    *,
    stream_text: bool = False,
) -> tuple[str, AgentRunInput]:
    """A new run's id and workflow input, checked before anything starts.

    Every way the facade starts a run (`run`, `astart`, `stream_chat`, and so
    the HTTP routes) goes through here, so each refuses the same inputs the
    same way, and each run carries the agent's fingerprint (only a worker
    built the same way runs it).

    Raises:
        ValueError: for bad input, a `max_turns` that is not a positive
            integer, an input too large for one model request, or a hostile
            run id.
    """
    check_input(input)
    # a lone surrogate (JSON "\udcff") as U+FFFD, as the model request sends
    # it: stored raw, it would break every reader of the run that encodes it
    input = encodable(input)
    # a key this process knows (the agent's own too), pasted into the prompt,
    # is never recorded
    input = mask_input(input)
    check_turns(max_turns)
    check_size(agent.definition, input)
    run_id = new_run_id() if run_id is None else validate_run_id(run_id)
    inp = AgentRunInput(
        agent=agent.name,
        input=input,
        max_turns=max_turns,
        stream_text=bool(stream_text),
        fingerprint=agent.definition.fingerprint(),
    )
    return run_id, inp


async def start_run(
    agent: Agentor, input: MessageInput, run_id: str | None, max_turns: int | None
) -> RunResult:
    """`Agentor.run`: check the input, start the run, wait for its result."""
    chosen = run_id is not None
    run_id, inp = new_input(agent, input, run_id, max_turns)
    client = await agent._client()
    if chosen and await only_stored(agent, client, run_id):
        # its history is gone, its mirror has it: that run is returned or
        # continued, not run (and paid for) a second time
        return await resume_run(agent, run_id, max_turns)
    async with agent._serving(client):
        with waited_on(agent, client, run_id):
            await start_riding_outages(
                client,
                agent.definition,
                agent.task_queue,
                run_id,
                inp,
                what=f"starting run {run_id!r}",
            )
            if chosen:
                await refuse_other_workflow(client, run_id, agent.name)
            return await agent._result(client, run_id)


async def resume_run(
    agent: Agentor, run_id: str, max_turns: int | None, *, key: str | None = None
) -> RunResult:
    """`Agentor.resume`: return, wait for, or continue the run (see the module docstring).

    `key`: the client's idempotency key (serve's `Idempotency-Key`). The segment
    this resume starts records it, and a resume under the same key once a
    segment so started exists starts none: it returns the run as it is now
    (waits for it while it runs), however that segment ended. A retry whose
    first try's answer was lost so pays for no more turns.
    """
    validate_run_id(run_id)
    check_turns(max_turns)
    client = await agent._client()
    reading = f"reading run {run_id!r}"
    segments = await riding_outages(
        lambda: TemporalStore(client).segments(run_id), client, what=reading
    )
    if not segments:
        events = await agent._store_events(run_id)
        if not events:
            from agentor_temporal.connection import describe_target

            where = f" or in {shown_store(agent.store)}" if agent.store is not None else ""
            raise KeyError(
                f"No run with id {run_id!r} in Temporal at {describe_target(client)}{where}"
            )
        check_owner(agent.definition, run_id, events, None)
        if is_complete(events):
            return result_from(run_id, events, None, None)
        # a run that waited for a person goes on from the answer the log holds:
        # the model is not asked (and paid) again for the calls it waits on
        inp = continuation_input(
            agent.name,
            run_id,
            events,
            previous=None,
            in_temporal_from=0,
            max_turns=max_turns,
            unrecorded=mirrored_waiting_answer(events),
        )
        return await _continue(agent, client, run_id, inp, len(events), key)

    latest = segments[-1]
    if key is not None and any(s.resume_key == resume_key(run_id, key) for s in segments):
        # a retry: its first try started a segment, which ran (or runs) as it will
        if latest.status == "running":
            async with agent._serving(client):
                return await agent._result(client, run_id)
        return await agent._result(client, run_id)
    events = await riding_outages(lambda: agent._events(run_id, segments), client, what=reading)
    if latest.status == "completed" and (latest.result or {}).get("status") == "completed":
        # another agent's finished run is no answer of this one's, nor its store's
        check_owner(agent.definition, run_id, events, latest.spec, build=False)
        if agent.store is not None:
            # a mirror that failed until the run's end is completed here
            await in_thread(catch_up, agent.store, run_id, events, agent.name)
        return result_from(run_id, events, latest.result, None)
    check_owner(agent.definition, run_id, events, latest.spec)
    if latest.status == "running":
        async with agent._serving(client):
            with waited_on(agent, client, run_id):
                return await agent._result(client, run_id)
    if segments[0].previous is None and not any(s.events for s in segments):
        # closed before it recorded anything (no worker knew the agent, or it
        # was stopped first): it begins again from the input it was started
        # with, a fork's new message and marker included
        inp = restart_input(
            agent.name,
            run_id,
            segments[0].input,
            previous=latest.execution_run_id,
            failure=latest.failure,
            max_turns=max_turns,
        )
    else:
        # stopped (terminated, timed out) after its last calls finished but
        # before it recorded them: their results are taken, not paid for again
        recovered = await completed_batch(TemporalStore(client), latest)
        # or its model's answer came, and was never recorded: not asked for again;
        # or it waited for a person: its answer is gone on from, the calls that ran kept
        temporal = TemporalStore(client)
        unrecorded = None
        if not recovered:
            unrecorded = (
                await completed_answer(temporal, latest)
                or await waiting_answer(temporal, latest)
                # or it stopped before its turn's calls started: their answer is gone on from
                or unstarted_answer(latest)
            )
        inp = continuation_input(
            agent.name,
            run_id,
            events,
            previous=latest.execution_run_id,
            in_temporal_from=seeded_prefix(segments),
            max_turns=max_turns,
            recovered=recovered,
            unrecorded=unrecorded,
        )
    # a decision sent again under its name (its answer lost) is answered with what it
    # came to in the closed execution, never taken for a later call reusing its id
    inp.outcomes = carried_outcomes(latest.outcomes) or None
    return await _continue(agent, client, run_id, inp, len(events), key)


async def _continue(
    agent: Agentor,
    client: Client,
    run_id: str,
    inp: AgentRunInput,
    recorded: int,
    key: str | None = None,
) -> RunResult:
    """Start the run's next segment, after its `recorded` events, and wait for its result.

    `key`: the resume's idempotency key, recorded in the segment's memo.
    """
    previous = inp.previous_execution
    # only a worker built as this agent may continue it
    inp.fingerprint = agent.definition.fingerprint()
    if inp.conversation is None:
        _check_whole(agent, run_id, inp.input, previous)
    async with agent._serving(client):
        with waited_on(agent, client, run_id):
            # ALLOW_DUPLICATE: the previous execution is closed; a concurrent
            # resumer that started first is attached to (USE_EXISTING), or, if
            # its segment already finished, deduplicated by the request id; once
            # that segment continued as new, not started at all (continuing)
            request_id = segment_request_id(run_id, previous, recorded)
            # repeated after an outage, the same request id starts it once
            await start_riding_outages(
                client,
                agent.definition,
                agent.task_queue,
                run_id,
                inp,
                WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                request_id,
                what=f"continuing run {run_id!r}",
                memo=resume_memo(run_id, key),
                continuing=True,
            )
            return await agent._result(client, run_id)


def _check_whole(agent: Agentor, run_id: str, messages: Any, previous: str | None) -> None:
    """Refuse a conversation too large to send whole, before anything starts.

    A long conversation is sent by reference to the run's history; a run that
    only the store holds (history gone) has none to refer to, and sent whole it
    would be Temporal's raw `Blob data size exceeds limit`.

    Raises:
        ValueError: naming the size and the limit.
    """
    try:
        check_size(agent.definition, messages)
    except ValueError:
        size = encoded_size(messages)
        where = (
            "Temporal no longer holds its history, so the conversation would have to be sent whole"
            if previous is None
            else "its history holds no base to send the conversation by reference"
        )
        raise ValueError(
            f"Run {run_id!r} cannot be continued: its conversation is {size / 1e6:.2f} MB "
            f"and {where}, over the {MAX_REQUEST_BYTES / 1e6:.1f} MB one model request may "
            "take (Temporal accepts at most 2 MB in one payload). Its events are all in the "
            "store; start a new run from a summary of them."
        ) from None
