"""Calls of a run's ended executions, stopped before its next execution's first call starts.

A run terminated (or cancelled) mid-call and resumed at once: the resume's
tool call must not run beside the ended execution's, which this worker stops
only once it hears the server no longer knows it (its next heartbeat), or
never, when the call was paused (`temporal activity pause`).
Once it hears, the call goes on `ENDED_GRACE` for a resume's same call to
join (`linger`), unless the resume runs that call on another worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

logger = logging.getLogger(__name__)

#: Seconds a call of a run's next execution (a resume after a terminate or a
#: cancel) waits for the calls of the run's ended execution still live here to
#: stop before it starts: the same tool must not run twice at once.
STOP_WAIT = 10.0

#: Seconds a call whose run was terminated while it ran goes on once its worker
#: hears of the end (at the call's next heartbeat), for the same call of a
#: resume to join (or take its result, kept `KEEP` once finished), before it is
#: stopped: stopped at once, a resume a few seconds after the terminate sent
#: the same model request again, or ran the tool again, on a worker still alive.
ENDED_GRACE = 30.0


async def stop_ended_executions(
    calls: Mapping[tuple[str, str, str], asyncio.Task[Any]],
    adopted: Mapping[asyncio.Task[Any], str],
    info: activity.Info,
) -> None:
    """Stop the calls of this run's earlier executions still live here, and wait for them.

    An execution of the run is running, so those executions have ended
    (terminated or cancelled, then resumed): nothing will join their calls
    (a paused one included), and the resume's own call must not run beside
    them. Calls of an execution a reset ended are left to its grace.
    """
    workflow_id, execution = info.workflow_id or "", info.workflow_run_id or ""
    earlier = [
        (key[1], task)
        for key, task in calls.items()
        if key[0] == workflow_id
        and key[1] != execution
        and not task.done()
        and adopted.get(task) != execution  # joined by this execution: its own
    ]
    if not earlier:
        return
    try:
        client = activity.client()
    except RuntimeError:
        return
    leave: dict[str, bool] = {}
    for run_id in {run_id for run_id, _ in earlier}:
        try:
            described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError:
            leave[run_id] = False
            continue
        ended_by_reset = described.raw_description.workflow_extended_info.reset_run_id
        leave[run_id] = described.status == WorkflowExecutionStatus.RUNNING or bool(ended_by_reset)
    stopping = [task for run_id, task in earlier if not leave[run_id] and not task.done()]
    if not stopping:
        return
    logger.info(
        "%s of run %s waits for %d call(s) of its ended execution to stop",
        info.activity_type,
        workflow_id,
        len(stopping),
    )
    for task in stopping:
        task.cancel()
    await asyncio.wait(stopping, timeout=STOP_WAIT)


#: Seconds between checks, while an ended run's call lingers (`ENDED_GRACE`),
#: whether the run's resume started the same call on another worker.
ENDED_CHECK = 1.0


async def linger(client: Client, info: activity.Info, task: asyncio.Task[Any]) -> None:
    """Wait `ENDED_GRACE` (or until `task` is done) for a resume of the run to join it.

    Ends early when the run's next execution has the same call (same activity)
    running on another worker: this one is then stopped at once, rather than
    run beside it the whole grace (the same tool twice at once).
    """
    logger.info(
        "%s of run %s kept for a resume to join for up to %.0f s: its run ended",
        info.activity_type,
        info.workflow_id,
        ENDED_GRACE,
    )
    deadline = time.monotonic() + ENDED_GRACE
    me = client.identity
    while not task.done() and time.monotonic() < deadline:
        await asyncio.wait([task], timeout=min(ENDED_CHECK, deadline - time.monotonic()))
        if task.done():
            return
        try:
            latest = await client.get_workflow_handle(info.workflow_id or "").describe()
        except RPCError:
            continue
        if (
            latest.run_id == info.workflow_run_id
            or latest.status != WorkflowExecutionStatus.RUNNING
        ):
            continue
        for pending in latest.raw_description.pending_activities:
            if (
                pending.activity_id == info.activity_id
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and pending.last_worker_identity
                and pending.last_worker_identity != me
            ):
                return


async def restarted(
    task: asyncio.Task[Any], resets: MutableMapping[asyncio.Task[Any], int]
) -> bool:
    """Whether `task`, a call reset while it ran, was stopped for this attempt to make it anew.

    A `temporal activity reset` of a running call is joined by the attempt after
    it (the call is not made twice). An attempt that finds the call still
    running after that (the operator reset the hung call again) restarts it:
    the call is stopped (up to `STOP_WAIT`) and this attempt makes it anew.
    """
    if task.done() or task not in resets:
        return False
    if resets[task] == 0:
        resets[task] = 1  # the reset's attempt: it joins
        return False
    info = activity.info()
    logger.warning(
        "%s %s of run %s was reset and is still running: restarting it",
        info.activity_type,
        info.activity_id,
        info.workflow_id,
    )
    del resets[task]
    task.cancel()
    await asyncio.wait([task], timeout=STOP_WAIT)
    return True
