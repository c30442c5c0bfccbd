"""Whether a run still waits for a decision, and how a call it no longer waits for was decided.

A refused decision says who took the call's decision when one was taken:
the rule is that the first decision wins and the rest are told who decided.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.activities._redact import clean
from agentor_temporal.connection import describe_target
from agentor_temporal.store import Event
from agentor_temporal.workflows import TemporalStore, policies
from agentor_temporal.workflows.formatting import printable
from agentor_temporal.workflows.history_reader import NotAnAgentRun

logger = logging.getLogger("agentor_temporal")

#: how long a refused decision waits to read how the closed run ended (`_run_ended`)
RESULT_PATIENCE = timedelta(seconds=10)

#: a Temporal execution's run id: a UUID (the server makes version 7 ones)
EXECUTION_RUN_ID_PATTERN = r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$"
_EXECUTION_RUN_ID = re.compile(EXECUTION_RUN_ID_PATTERN)

__all__ = [
    "EXECUTION_RUN_ID_PATTERN",
    "check_execution_run_id",
    "check_waiting",
    "closed_unanswered",
    "how_decided",
]


async def check_waiting(
    client: Client, run_id: str, execution_run_id: str | None = None, call_id: str | None = None
) -> None:
    """Raise unless the run (that execution of it, when given) is running.

    Args:
        execution_run_id: the execution that asked (checked as such by the caller).
        call_id: the call to be decided: a closed run's refusal says how it was
            decided, if it was (another person's decision may have finished the run).

    Raises:
        KeyError: when Temporal does not know the run.
        ValueError: when it has closed.
    """
    if execution_run_id is not None:
        check_execution_run_id(execution_run_id)
    try:
        handle = client.get_workflow_handle(run_id, run_id=execution_run_id)
        description = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            if execution_run_id is not None:
                raise KeyError(
                    f"Run {run_id!r} has no execution {execution_run_id!r} in Temporal"
                ) from None
            raise KeyError(
                f"No run with id {run_id!r} in Temporal at {describe_target(client)}"
            ) from None
        raise
    if description.workflow_type != policies.WORKFLOW_TYPE:
        raise NotAnAgentRun(run_id, description.workflow_type)
    if description.status is None or description.status.name != "RUNNING":
        status = description.status.name.lower() if description.status else "unknown"
        if status == "completed":
            status = await _run_ended(handle)
        # decided in the execution that asked: another person's decision there may
        # have finished it (or the run), just before this one came
        decided = (
            await how_decided(client, run_id, call_id, execution_run_id)
            if call_id is not None
            else ""
        )
        if execution_run_id is not None and not await _is_latest(client, run_id, execution_run_id):
            raise ValueError(
                f"The call was asked in an execution of run {run_id!r} that has ended "
                f"({status}{decided}): whatever the run waits for now is another call; "
                "read its pending approvals again. Nothing changed."
            )
        raise ValueError(
            f"Run {run_id!r} is not waiting for approval (it is {status}{decided}); "
            "nothing changed."
        )


async def _run_ended(handle: WorkflowHandle[Any, Any]) -> str:
    """How a run whose execution completed ended, as its result says.

    A run that failed resumable (stopped while it waited for a person, an
    approval expired with "fail", a call failed) returns its failure, so its
    execution completes: a decision sent then was told the run "is completed",
    and its sender had no word that `resume` goes on (and asks again).
    """
    try:
        result = await handle.result(follow_runs=False, rpc_timeout=RESULT_PATIENCE)
    except Exception as exc:  # the refusal stands without it
        logger.debug("Could not read how run %s ended: %s", handle.id, exc)
        return "completed"
    ended = result.get("status") if isinstance(result, dict) else None
    if not isinstance(ended, str) or ended == "completed":
        return "completed"
    return f"{printable(ended)[:40]}; resume(run_id) continues it"


async def _is_latest(client: Client, run_id: str, execution_run_id: str) -> bool:
    """Whether `execution_run_id` is the run's latest execution (True when unknown:
    the run's end is then said as the execution's)."""
    try:
        return bool(
            (await client.get_workflow_handle(run_id).describe()).run_id == execution_run_id
        )
    except RPCError as exc:
        logger.debug("Could not read run %s's latest execution: %s", run_id, exc)
        return True


async def how_decided(
    client: Client, run_id: str, call_id: str, execution_run_id: str | None = None
) -> str:
    """How the run's latest call `call_id` was decided (", and call ... was already approved
    by alice"), or "" when it was not or history cannot be read.

    Args:
        execution_run_id: read that execution only (the one that asked for the
            decision), not the whole run.
    """
    verdict = await _verdict(client, run_id, call_id, execution_run_id)
    return f", and call {call_id!r} was already {verdict}" if verdict else ""


async def _verdict(client: Client, run_id: str, call_id: str, execution_run_id: str | None) -> str:
    """The latest decision on `call_id` as history records it ("approved by alice"), or ""."""
    try:
        events: list[Event]
        if execution_run_id is None:
            events = await TemporalStore(client).aload(run_id)
        else:
            store = TemporalStore(client)
            history = await client.get_workflow_handle(
                run_id, run_id=execution_run_id
            ).fetch_history()
            events = (await store.parse(history)).events
    except Exception as exc:  # an explanation only: the refusal stands without it
        logger.debug("Could not read how run %s decided %s: %s", run_id, call_id, exc)
        return ""
    for event in reversed(events):
        if event.type == "approval_decision" and event.call_id == call_id:
            who = (
                f" by {printable(event.result)}"
                if event.result and event.status != "expired"
                else ""
            )
            return f"{event.status}{who}"
    return ""


async def closed_unanswered(
    client: Client, run_id: str, execution_run_id: str, call_id: str, failure: str
) -> str | None:
    """What to tell a decision's sender whose run could not say what the decision came to
    (its `signalled_decision` query failed with `failure`) once the execution it went to
    has closed; None while it runs.

    A closed execution is answered by replaying its history, the same each
    time: a query of it that failed fails again, and waiting on it only ended
    in "no worker took the decision" after `DECISION_PATIENCE`, though the run
    had taken the signal. Its history says how the call was decided.
    """
    try:
        description = await client.get_workflow_handle(run_id, run_id=execution_run_id).describe()
    except RPCError as exc:
        logger.debug("Could not read run %s's execution: %s", run_id, exc)
        return None
    if description.status is None or description.status.name == "RUNNING":
        return None
    status = description.status.name.lower()
    verdict = await _verdict(client, run_id, call_id, execution_run_id)
    said = clean(failure)
    said = said if len(said) <= 300 else said[:297] + "..."
    return (
        f"Run {run_id!r} took the decision's signal, but the execution it went to has "
        f"closed ({status}), and its worker could not say what the decision on "
        f"{printable(call_id)} came to: {said}. "
        + (
            f"Its history says call {call_id!r} was already {verdict}."
            if verdict
            else "Its history records no decision on that call."
        )
        + " Look at the run's events before deciding again."
    )


def check_execution_run_id(value: object) -> str:
    """Return `value` if it reads as a Temporal execution's run id (a UUID).

    Raises:
        ValueError: saying what an execution run id looks like and where to read it.
    """
    if not isinstance(value, str) or not _EXECUTION_RUN_ID.fullmatch(value):
        # masked, then cut: cut first, a key across the cut was left in part
        said = clean(repr(value))
        shown = said if len(said) <= 80 else said[:77] + "..."
        raise ValueError(
            f"{shown} is not an execution run id: that is a UUID, as a pending approval's "
            "execution_run_id shows it"
        )
    return value
