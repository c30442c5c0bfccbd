"""Waiting for a run's pause without adding to the history its waiting counts.

A run waiting for a person stops, failed, once it took
`policies.PAUSED_WAIT_TASKS` (1,000) signals and accepted updates since it
began to wait, or since its turn's tools began: each is a workflow task, and a
worker without the run in its cache replays them all in one, within Temporal's
5 s task timeout. A turn holds up to `MAX_CALLS_PER_REPLY` (500) calls, so the
budget is two a call. A caller waiting for the pause used to send the
`wait_paused` update whenever the run was not paused at that moment: approving
one call then resuming (as `approve` says to) found the approved call running
and sent one, so deciding a turn's calls one at a time took two a call and a
turn of 500 reached the budget with its last resume, the run stopping mid-turn
though nobody did anything wrong (a second caller beside, fewer calls). While
some call still waits for a person the pause is only a running call away, so
the caller asks by query (no history) until it comes, and sends the update
only when nobody is asked (the run works on its own: the model, tools before
any waits).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import (
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from agentor_temporal.workflows import PausedState

#: how long a caller waits for a worker to answer whether a run is paused
#: before asking it by update (which waits for a worker as long as it takes)
PAUSED_QUERY_TIMEOUT = timedelta(seconds=5)
#: how often a run that refuses more updates is asked again by query
UPDATES_REFUSED_POLL = 1.0
#: how soon, then at most how often, a run some call of which waits for a person
#: while others run is asked again by query whether it paused
ASKED_POLL_FIRST = 0.05
ASKED_POLL = 1.0


async def wait_paused(
    handle: WorkflowHandle[Any, Any], *, ask_first: bool = True
) -> PausedState | None:
    """The run's pause, or None when it ended (or cannot say) instead.

    A run already paused answers a query, which leaves no trace in its
    history; a run some call of which waits for a person (the others running)
    is asked again by query until it pauses; only a run working on its own is
    sent the `wait_paused` update. A run that refuses it (Temporal caps an
    execution's updates) is asked by query again each second, until it pauses
    or the caller sees it end. A `partial` answer (many callers answered in
    one workflow task share its size) is read whole by query; a run no longer
    paused by then is waited for again.
    """
    delay = ASKED_POLL_FIRST
    while True:
        if ask_first:
            now = await _paused_now(handle)
            if now is not None:
                return now
            if await _asking_people(handle):
                # each update is a workflow task its wait counts: the caller
                # waits by query, which adds nothing (the caller's wait for the
                # run's end stops this one)
                await asyncio.sleep(delay)
                delay = min(delay * 2, ASKED_POLL)
                continue
        ask_first = True  # once refused, the update is asked again only after a query
        try:
            state: PausedState = await handle.execute_update("wait_paused", result_type=PausedState)
        except (WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError):
            # the SDK turns this task's own cancellation (the run ended first)
            # into a timeout error: nothing for anyone to retrieve
            return None
        except RPCError:
            # refused: Temporal caps an execution's updates (2,000 by
            # default); the caller's wait for the run's end stops this one
            await asyncio.sleep(UPDATES_REFUSED_POLL)
            continue
        if state.partial:
            continue  # the query first, then the update again if it is not paused
        return state


async def _paused_now(handle: WorkflowHandle[Any, Any]) -> PausedState | None:
    """The run's pause if it is paused now; None if not, or if it cannot answer."""
    try:
        raw = await handle.query("paused", rpc_timeout=PAUSED_QUERY_TIMEOUT)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError):
        # a worker without the query (an older build), or none answering
        return None
    if not isinstance(raw, dict) or raw.get("status") != "awaiting_approval":
        return None
    return PausedState("awaiting_approval", list(raw.get("pending") or []))


async def _asking_people(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether some call of the run waits for a person now (its `state` query's status);
    False if the run cannot say (the update is sent then, as before)."""
    try:
        raw = await handle.query("state", rpc_timeout=PAUSED_QUERY_TIMEOUT)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError):
        return False
    return isinstance(raw, dict) and raw.get("status") == "awaiting_approval"
