"""A decision a client sends again is answered with what it came to, never taken anew.

A client whose request timed out sends it again (A2A names each message by its
`messageId` for that). A decision names a call by its id, and models reuse ids
(`call_0` in every turn): sent again once the run had moved on to a later turn's
call with that id, the same message was taken for that call, which nobody had
seen, and it ran. So a decision a client names goes under an id made from that
name (`decision_id`), as its `decide` update's id and its signal's request id:
before deciding, the server asks Temporal whether the run already took a
decision under that id (`decided_before`), and sent again to the execution that
took it, Temporal answers the update with its first outcome.

Temporal keeps an update's outcome with the execution that took it: a run that
continued as new since (between turns) is asked in its latest executions
(`RECENT_EXECUTIONS`), newest first; from behaviour level 29 the run also carries
the outcomes of its latest decisions, by update or by signal, into each next
execution (`workflows.carried_outcomes`), which answers the decision sent again
with its outcome, more executions later too.

It keeps nothing of a decision refused outright (by the server's checks or the
run's validator: the call was decided by someone else meanwhile, the run was
working on), so such a refusal is sent to the run under the decision's id
(`kept_refusal`, the `decision_refused` update, `workflows.refusals`), and the
decision sent again is refused again, never taken for a later call.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._outage import riding_outages
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import failure_message, fit
from agentor_temporal.workflows.refusals import REFUSAL_BYTES

T = TypeVar("T")

logger = logging.getLogger("agentor_temporal")

#: how long to wait for the outcome of a decision under that id still in flight (its
#: first sending, waiting for a worker): past it, the decision is sent again under
#: the same id, which Temporal joins to the first
IN_FLIGHT_WAIT = timedelta(seconds=5)

#: how many of a run's executions, newest first, are asked for a decision sent before: a
#: client sends a request again within moments, a turn or two (each may continue as new)
RECENT_EXECUTIONS = 10

#: how long a refusal waits for the run to keep it (a worker to take its update) before
#: the sender is answered: past it, Temporal still hands the update to the next worker
KEEP_WAIT = timedelta(seconds=10)

#: the namespace of the ids `decision_id` makes (any fixed UUID would do)
_DECISIONS = uuid.UUID("5f0c3c55-93b6-4a5e-9c1d-7a1f0d2b8e41")


def decision_id(run_id: str, name: str) -> str:
    """The id of the decision a client names `name` (its message id) on run `run_id`."""
    return uuid.uuid5(_DECISIONS, f"{run_id}\n{name}").hex


async def decided_before(client: Client, run_id: str, request_id: str) -> dict[str, Any] | None:
    """What the run's decision sent under `request_id` came to, or None when it took none.

    Asks the run's latest executions (`RECENT_EXECUTIONS`) for the outcome of
    their `decide` update with that id (Temporal keeps an update's outcome with
    its execution, closed too). A decision taken by signal (a run past
    Temporal's updates) is not found here: sent again under the same request
    id, the run answers it with what the first came to. Nor is one still in
    flight past `IN_FLIGHT_WAIT`.

    Raises:
        ValueError: when the run refused that decision (saying why, as it did).
    """
    asked: set[str] = set()
    for execution in [None, *await _executions(client, run_id)]:
        if execution in asked:
            continue
        asked.add(execution or "")
        taken = await _outcome(client, run_id, execution, request_id)
        if taken is not None:
            return taken
    return None


async def _executions(client: Client, run_id: str) -> list[str]:
    """The run's latest executions' ids, newest first (what visibility lists yet)."""
    if "'" in run_id or "\\" in run_id:
        return []
    listed = client.list_workflows(f"WorkflowId = '{run_id}'", limit=RECENT_EXECUTIONS)
    try:
        return await riding_outages(
            lambda: _ids(listed), client, what=f"listing the executions of run {run_id!r}"
        )
    except RPCError as exc:
        logger.debug("Could not list the executions of run %s: %s", run_id, exc)
        return []


async def _ids(listed: Any) -> list[str]:
    return [str(execution.run_id) async for execution in listed]


async def _outcome(
    client: Client, run_id: str, execution: str | None, request_id: str
) -> dict[str, Any] | None:
    """The outcome of the `decide` update `request_id` in one execution (None: the
    latest), or None when it knows no such update."""
    handle: WorkflowUpdateHandle[dict[str, Any]] = client.get_workflow_handle(
        run_id, run_id=execution
    ).get_update_handle(request_id, result_type=dict)
    try:
        return await riding_outages(
            lambda: handle.result(rpc_timeout=IN_FLIGHT_WAIT),
            client,
            what=f"asking run {run_id!r} about a decision sent before",
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
        if isinstance(exc.__cause__, asyncio.CancelledError):
            raise exc.__cause__ from None
        return None  # in flight: sent again under its id, Temporal joins the two
    except WorkflowUpdateFailedError as exc:
        raise ValueError(failure_message(exc)) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def refused_kept(
    client: Client,
    run_id: str,
    request_id: str | None,
    deciding: Callable[[], Awaitable[T]],
    refused: Callable[[Exception], str | None],
) -> T:
    """`deciding()`, a refusal of a decision sent under `request_id` (`refused`: its
    text, None for what is no refusal) kept by the run before it is raised again."""
    try:
        return await deciding()
    except Exception as exc:
        said = refused(exc)
        if request_id is not None and said is not None:
            await kept_refusal(client, run_id, request_id, said)
        raise


async def kept_refusal(client: Client, run_id: str, request_id: str, refusal: str) -> None:
    """Have the run keep `refusal` as the outcome of the decision sent under `request_id`.

    Best effort: a closed run keeps nothing (it waits for no call again but by
    resume, whose execution knows no update of the old one), and a run that
    took a decision under that id meanwhile keeps that decision.
    """
    handle = client.get_workflow_handle(run_id)
    try:
        await asyncio.wait_for(
            handle.execute_update(
                policies.REFUSED_DECISION_UPDATE, fit(refusal, REFUSAL_BYTES), id=request_id
            ),
            KEEP_WAIT.total_seconds(),
        )
    except WorkflowUpdateFailedError:
        return  # kept: the update fails with the refusal
    except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError, asyncio.TimeoutError) as exc:
        logger.debug("Run %s did not keep a refused decision: %s", run_id, exc)
