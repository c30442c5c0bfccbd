"""Reading and steering runs by id: shared by the facade, the CLI and the HTTP server.

A run's whole log is Temporal's record of its segments, after the prefix it
was seeded with: a store's (a run continued from a JSONL log that Temporal
never had: Agentor's own, or one whose history retention removed), or a
fork's parent events. Pending approvals are read from history, so listing
them needs no worker; a decision goes to the run through its `decide`
update, so delivering one does. A decision names the turn of the call the
person saw (read from the run's pending approvals when the sender does not
say), so a decision delivered after the run moved on to another call with
the same id is refused instead of deciding that call.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._decided import check_waiting, closed_unanswered
from agentor_temporal._inspect import list_query
from agentor_temporal._outage import patiently, riding_outages
from agentor_temporal.activities._redact import clean, mask_input
from agentor_temporal.codec import EncryptionKeyError
from agentor_temporal.store import (
    Event,
    PendingApproval,
    Store,
    pending_approvals,
    validate_run_id,
)
from agentor_temporal.store.base import in_thread, read_events
from agentor_temporal.store.encoding import encodable
from agentor_temporal.workflows import Decision, Segment, TemporalStore, policies
from agentor_temporal.workflows.formatting import failure_message, printable
from agentor_temporal.workflows.status import AWAITING_APPROVAL

logger = logging.getLogger("agentor_temporal")


def seeded_prefix(segments: list[Segment]) -> int:
    """How many of the run's first events came from a store, not from Temporal."""
    if not segments or segments[0].previous:
        return 0
    first = segments[0].input
    return int(first.get("event_offset") or 0) if isinstance(first, dict) else 0


async def run_events(
    run_id: str,
    segments: list[Segment],
    store: Store | None = None,
    *,
    client: Client | None = None,
) -> tuple[list[Event], int]:
    """(the run's whole log, how many leading events are missing from it).

    The events before the first segment (a store-seeded run's, a fork's
    parent events) are read from the parent's history when `client` is
    given (see `TemporalStore.whole`), else from `store` when it has them;
    otherwise the log starts at the first event Temporal has and the second
    value says how many came before.
    """
    if client is not None:
        return await TemporalStore(client).whole(run_id, segments, store)
    events = [e for s in segments for e in s.events]
    prefix = seeded_prefix(segments)
    if not prefix:
        return events, 0
    stored = await in_thread(read_events, store, run_id, prefix) if store is not None else []
    if len(stored) < prefix:
        return events, prefix
    return stored + events, 0


@dataclass
class Waiting:
    """One tool call waiting for a person, in a run that is still running."""

    run_id: str
    agent: str
    call_id: str
    tool: str | None
    args: dict[str, Any] | None
    #: when the run asked (epoch seconds)
    since: float | None
    #: the turn that asked (what a decision names: models reuse call ids)
    turn: int | None = None
    #: the run's Temporal execution that asked (a resumed run is a new one,
    #: whose turns count from 1 again): what `approve --execution` names
    execution_run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`agentor-temporal pending --json`)."""
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "call_id": self.call_id,
            "tool": self.tool,
            "args": self.args,
            "waiting_since": self.since,
            "turn": self.turn,
            "execution_run_id": self.execution_run_id,
        }


async def paused_runs(
    client: Client, *, agent: str | None = None, limit: int | None = None
) -> list[str]:
    """Ids of running runs that may wait for a person, found by their AgentStatus.

    Runs say `AgentStatus='awaiting_approval'` while a call waits; runs that
    never set it (started before it existed, on a namespace without it, or
    on a worker that could not reach the server to check for it) are
    candidates too, whatever their agent, since such a run may lack
    `AgentName` as well (the caller checks each candidate's agent in its
    history), so nothing that waits is missed. Without the attribute in the
    namespace, every running run is a candidate.
    """
    queries = [
        f"{list_query(agent, 'running')} AND AgentStatus = '{AWAITING_APPROVAL}'",
        f"{list_query(None, 'running')} AND AgentStatus IS NULL",
    ]
    running = list_query(None, "running")
    ids: list[str] = []
    try:
        for query in queries:
            async for execution in client.list_workflows(query, limit=limit):
                if execution.id not in ids:
                    ids.append(execution.id)
    except RPCError as exc:
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        ids = []
        async for execution in client.list_workflows(running, limit=limit):
            if execution.id not in ids:
                ids.append(execution.id)
    return ids[:limit] if limit is not None else ids


async def waiting_calls(
    client: Client, *, agent: str | None = None, limit: int | None = None
) -> list[Waiting]:
    """Every tool call waiting for approval, across running runs (no worker needed)."""
    store = TemporalStore(client)
    rows: list[Waiting] = []
    for run_id in await paused_runs(client, agent=agent, limit=limit):
        try:
            latest = await store.latest(run_id)
        except (EncryptionKeyError, ValueError) as exc:
            # a run this reader cannot decrypt, or one another client started
            # under an id no run may have (refused at its start, and waiting
            # for a worker until then), must not hide the others
            logger.warning("Skipping run %s: %s", ascii(run_id), exc)
            continue
        if latest is None or latest.status != "running":
            continue
        name = str((latest.spec or {}).get("name", ""))
        if agent is not None and name != agent:
            continue  # a candidate without AgentName (see `paused_runs`)
        for request in pending_approvals(latest.events):
            rows.append(
                Waiting(
                    run_id,
                    name,
                    str(request.call_id),
                    request.name,
                    # masked of the keys this reader knows: recorded as they were by a
                    # worker that did not know them (or an older version)
                    mask_input(request.args),
                    request.started_at,
                    request.turn,
                    latest.execution_run_id,
                )
            )
    return rows


async def waiting_call(client: Client, run_id: str, call_id: str) -> PendingApproval | None:
    """The run's call `call_id` waiting for approval now, as its history says.

    None when history shows no such call waiting (or cannot be read): the
    run's own validator then says what it waits for.
    """
    try:
        latest = await riding_outages(
            lambda: TemporalStore(client).latest(run_id),
            client,
            what=f"reading the pending approvals of run {run_id!r}",
        )
    except (EncryptionKeyError, RPCError) as exc:
        logger.warning("Could not read the pending approvals of run %s: %s", run_id, exc)
        return None
    if latest is None or latest.status != "running":
        return None
    waiting = [e for e in pending_approvals(latest.events) if e.call_id == call_id]
    if not waiting:
        return None
    e = waiting[-1]
    return PendingApproval(call_id, str(e.name), e.args, e.turn, latest.execution_run_id)


def make_decision(
    call: str | PendingApproval,
    approved: bool,
    reason: str | None = None,
    by: str | None = None,
    turn: int | None = None,
) -> tuple[Decision, str | None]:
    """A person's decision on `call`, and the execution to send it to.

    `call` is a call id, or a pending approval: then the decision names its
    turn and goes to the execution that asked.
    """
    if isinstance(call, PendingApproval):
        decision = Decision(call.call_id, approved, reason, by, call.turn if turn is None else turn)
        return decision, call.execution_run_id
    return Decision(call, approved, reason, by, turn), None


async def send_decision(
    client: Client,
    run_id: str,
    decision: Decision,
    execution_run_id: str | None = None,
    *,
    patience: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Deliver a person's decision to a run, through its `decide` update.

    Returns the decided request. A worker must be serving the run's task
    queue: the workflow itself validates and records the decision. A
    decision that names no turn is sent naming the turn of the call with
    its id that waits now, to the execution waiting (both read from
    history): if no worker takes it until the run has moved on to another
    call with that id, it is refused.

    Args:
        execution_run_id: the execution the person saw the call waiting in
            (`PendingApproval.execution_run_id`): a resumed run is a new
            execution, whose turns count from 1 again, so the decision goes
            to that execution only.
        patience: how long a worker may take to take the decision once it is
            sent (`approve --wait`), server outages not counted; None: no bound
            but the signal's `DECISION_PATIENCE`. Not the reads of history
            before it is sent: a long history's took a short --wait whole, and
            the person was told Temporal held a decision never sent.
        request_id: the decision's id, its update's and signal's: a client's
            name for it (A2A's messageId), so that sent again it is answered
            with what it came to, never taken for the call waiting now.

    Raises:
        KeyError: when Temporal does not know the run.
        TimeoutError: when no worker took the decision within `patience`.
        ValueError: when the run refuses the decision (unknown or decided
            call, another turn's call, finished run, or the execution that
            asked has ended); nothing changes.
    """
    validate_run_id(run_id)
    if not isinstance(decision.call_id, str) or not decision.call_id:
        raise ValueError("call_id must be a non-empty string")
    # a person's reason is recorded and shown to the model: a key this process
    # knows, pasted into it, is masked as in a prompt, and a lone surrogate is
    # U+FFFD as in a prompt (history then holds what the JSONL mirror does)
    decision = replace(
        decision,
        reason=encodable(mask_input(decision.reason)),
        by=encodable(mask_input(decision.by)),
    )
    problem = decision.problem() or decision.size_problem() or decision.turn_problem()
    if problem is not None:
        raise ValueError(problem)
    await riding_outages(
        lambda: check_waiting(client, run_id, execution_run_id, decision.call_id),
        client,
        what=f"checking that run {run_id!r} waits for a decision",
    )
    if decision.turn is None:
        waiting = await riding_outages(
            lambda: waiting_call(client, run_id, decision.call_id),
            client,
            what=f"reading which turn of run {run_id!r} waits for {printable(decision.call_id)}",
        )
        if waiting is not None:
            decision = replace(decision, turn=waiting.turn)
            execution_run_id = execution_run_id or waiting.execution_run_id
    if decision.at is None:
        decision = replace(decision, at=time.time())
    delivered = _deliver(client, run_id, decision, execution_run_id, request_id)
    if patience is None:
        return await delivered
    return await patiently(delivered, patience, client)


async def _deliver(
    client: Client,
    run_id: str,
    decision: Decision,
    execution_run_id: str | None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Send the decision `send_decision` made ready, by update or else by signal.

    Under `request_id` when given (a client's own name for its decision: sent
    again, the run answers with what the first sending came to), else a new id.
    """
    handle = client.get_workflow_handle(run_id, run_id=execution_run_id)
    try:
        update_id = request_id or uuid.uuid4().hex
        # sent again under its id while the server is unreachable: taken once
        result: dict[str, Any] = await riding_outages(
            lambda: _update_decision(handle, decision, update_id),
            client,
            what=f"deciding {printable(decision.call_id)} of run {run_id!r}",
        )
    except WorkflowUpdateFailedError as exc:
        raise ValueError(failure_message(exc)) from None
    except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
        # the caller stopped waiting (or the call timed out): Temporal keeps the
        # decision for the run's next workflow task, so it may still be taken
        if isinstance(exc.__cause__, asyncio.CancelledError):
            # cancelled, it stays cancelled: a TimeoutError nobody awaits any
            # more would only be logged as "never retrieved"
            raise exc.__cause__ from None
        raise TimeoutError(undelivered(run_id, decision.call_id)) from None
    except RPCError as exc:
        if not updates_refused(exc):
            # closed meanwhile (another person's decision may have finished it)
            await check_waiting(client, run_id, execution_run_id, decision.call_id)
            raise ValueError(f"Run {run_id!r} did not take the decision: {exc}") from None
        logger.info("Run %s takes no more updates (%s): deciding by signal", run_id, exc)
        # under the update's id: a refused update may have been taken all the same
        # (Temporal lost it after admitting it, and refused its second sending for
        # the cap), and the run then answers the signal with what that update took
        return await decide_by_signal(
            client, run_id, decision, execution_run_id, request_id=update_id
        )
    return result


async def _update_decision(
    handle: WorkflowHandle[Any, Any], decision: Decision, update_id: str | None = None
) -> dict[str, Any]:
    """The `decide` update, sent again under its id while Temporal aborts it.

    Temporal aborts updates it has admitted but not yet handed to a worker
    when the execution's state is reloaded (UNAVAILABLE "workflow update was
    aborted", seen with a few hundred decisions sent at once); the same
    update id makes a second send of an update already taken return its
    outcome, so it is never taken twice. (A caller that sends it again after
    a server outage passes the id it sent first, for the same reason.)
    """
    update_id = update_id or uuid.uuid4().hex
    deadline = time.monotonic() + policies.DECISION_PATIENCE.total_seconds()
    delay = 0.1
    while True:
        try:
            result: dict[str, Any] = await handle.execute_update(
                "decide", decision, id=update_id, result_type=dict
            )
            return result
        except RPCError as exc:
            aborted = exc.status == RPCStatusCode.UNAVAILABLE and "aborted" in str(exc.message)
            if not aborted or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


def updates_refused(exc: RPCError) -> bool:
    """Whether Temporal refused an update for its caps on an execution's updates.

    2,000 in all (FAILED_PRECONDITION) and 10 in flight (RESOURCE_EXHAUSTED,
    after the client's own retries) by default; stream followers' polls count.
    """
    text = str(exc.message).lower()
    return (
        exc.status in (RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.RESOURCE_EXHAUSTED)
        and "limit" in text
        and "update" in text
    )


def signals_refused(exc: RPCError) -> bool:
    """Whether Temporal refused a signal for its cap on an execution's signals (10,000)."""
    text = str(exc.message).lower()
    return "limit" in text and "signal" in text


async def decide_by_signal(
    client: Client,
    run_id: str,
    decision: Decision,
    execution_run_id: str | None = None,
    *,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Deliver a decision by the `decide_signal` signal, then ask what it came to.

    For a run Temporal takes no more updates from (`updates_refused`): the
    workflow checks and takes it as the update would, and keeps the outcome
    under a request id for the `signalled_decision` query. Sent to one
    execution (the one waiting now, unless given), which keeps that outcome.

    Args:
        request_id: the id of the `decide` update Temporal refused, when one
            was sent: a run that took that update answers with what it took.

    Raises:
        ValueError: when the run refuses the decision, or has ended.
        TimeoutError: when no worker took it within `DECISION_PATIENCE`.
    """
    if execution_run_id is None:
        execution_run_id = (
            await riding_outages(
                lambda: client.get_workflow_handle(run_id).describe(),
                client,
                what=f"reading run {run_id!r} to decide {printable(decision.call_id)}",
            )
        ).run_id
    handle = client.get_workflow_handle(run_id, run_id=execution_run_id)
    request_id = request_id or uuid.uuid4().hex
    try:
        # sent again after an outage, the run takes it once (by its request id)
        await riding_outages(
            lambda: handle.signal(
                "decide_signal", {"request_id": request_id, "decision": asdict(decision)}
            ),
            client,
            what=f"deciding {printable(decision.call_id)} of run {run_id!r}",
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise ValueError(
                f"Run {run_id!r} is not waiting for approval (the execution that was has "
                "ended); nothing changed."
            ) from None
        if signals_refused(exc):
            raise ValueError(
                f"Run {run_id!r} can take no decision: its execution has taken as many "
                "updates and signals as Temporal allows (2,000 and 10,000 by default; a run "
                "recorded before behaviour level 18 does not stop short of them), so nothing "
                "sent to it arrives; nothing changed. Cancel the run (temporal workflow cancel "
                f"--workflow-id {run_id}, or the UI), then resume({run_id!r}): it goes on in a "
                "new execution, which asks again for the calls that waited."
            ) from None
        raise ValueError(f"Run {run_id!r} did not take the decision: {exc}") from None
    patience = policies.DECISION_PATIENCE.total_seconds()
    #: the last failure the run's worker answered the query with
    failed: list[str] = []

    async def asked() -> dict[str, Any]:
        poll = policies.SIGNALLED_DECISION_POLL.total_seconds()
        while True:
            try:
                outcome: dict[str, Any] | None = await riding_outages(
                    lambda: handle.query("signalled_decision", request_id, result_type=dict),
                    client,
                    what=f"asking run {run_id!r} for the outcome of a decision",
                )
            except WorkflowQueryFailedError as exc:
                logger.debug("Run %s: asking for the decision's outcome failed: %s", run_id, exc)
                failed[:] = [str(exc)]
                said = await closed_unanswered(
                    client, run_id, execution_run_id, decision.call_id, str(exc)
                )
                if said is not None:
                    raise ValueError(said) from None
                outcome = None
            except (RPCError, WorkflowQueryRejectedError) as exc:
                logger.debug("Run %s: asking for the decision's outcome failed: %s", run_id, exc)
                outcome = None
            if outcome is not None:
                return outcome
            await asyncio.sleep(poll)
            # each ask is a task for the run's worker: hundreds of senders asking
            # ten times a second kept it from taking their signals
            poll = min(poll * 1.5, 1.0)

    try:
        # the bound is on the worker: time the server is unreachable does not count
        outcome = await patiently(asked(), patience, client)
    except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11
        told = undelivered(run_id, decision.call_id, patience)
        if failed:
            # the worker answered, with a failure: that is what is wrong
            told += (
                f" (asked what the decision came to, its worker failed: {clean(failed[0])[:300]})"
            )
        raise TimeoutError(told) from None
    if "refused" in outcome:
        raise ValueError(str(outcome["refused"]))
    decided: dict[str, Any] = outcome["decided"]
    return decided


def undelivered(run_id: str, call_id: str, waited: float | None = None) -> str:
    """What to tell a person whose decision no worker took in time."""
    within = f" within {waited:g} s" if waited is not None else ""
    return (
        f"No worker took the decision on {printable(call_id)} of run {run_id}{within}: is a worker "
        "serving the run's agent running? Temporal holds the decision for the run, and a "
        "worker that picks the run up before the server restarts applies it; look at the "
        "run's events before deciding again"
    )
