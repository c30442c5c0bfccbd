"""A stopping worker hands the outcome of its paused calls to the server.

A model request or tool call paused (`temporal activity pause`) keeps running
in its worker, and the attempt after the unpause joins it or takes its result
(`_joining.LiveCalls`). That result lives only in the worker's memory: a worker
stopped before the unpause (SIGTERM in a rolling deploy, a script's end) lost
it, and the unpause's attempt, on another worker, asked the model again (a
second paid request) or ran the tool again. So as the worker stops, each paused
call still running is waited for (`PAUSED_WAIT`), and each one's result given to
the server as its activity's completion (by the activity's id, which the server
takes while the activity is paused): the run goes on with it. A call that failed,
or is still running past the wait, is left to the unpause as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal.activities._joining import LiveCalls

logger = logging.getLogger(__name__)

#: Seconds a stopping worker waits, past its drain, for paused calls still running. Short:
#: the drain has had the graceful shutdown (a container's stop grace) already, and a call
#: an operator paused is often one that hangs; one still running is left to the unpause.
PAUSED_WAIT = 10.0


async def hand_over_paused(calls: LiveCalls, client: Client, patience: float) -> int:
    """Complete each paused call's activity with its result; return how many were handed over.

    `patience`: seconds to wait, in all, for paused calls still running.
    """
    paused = calls.paused()
    if not paused:
        return 0
    deadline = time.monotonic() + patience
    running = [task for _, task in paused if not task.done()]
    if running:
        logger.info(
            "waiting up to %.0f s for %d paused call(s) to finish before the worker stops",
            patience,
            len(running),
        )
        await asyncio.wait(running, timeout=max(0.0, deadline - time.monotonic()))
    handed = 0
    still = {id(task) for _, task in calls.paused()}  # not taken by an attempt meanwhile
    for (workflow_id, run_id, activity_id), task in paused:
        if not task.done() or task.cancelled() or task.exception() is not None:
            continue  # left to the unpause's attempt, as before
        if id(task) not in still:
            continue
        result: Any = task.result()
        handle = client.get_async_activity_handle(
            workflow_id=workflow_id, run_id=run_id or None, activity_id=activity_id
        )
        try:
            await handle.complete(result)
        except RPCError as exc:
            # the run ended, or the unpause's attempt completed it elsewhere
            logger.info(
                "paused %s of run %s not handed over: %s", activity_id, workflow_id, exc.message
            )
            continue
        except Exception as exc:  # a codec or a connection failing: the worker still stops
            logger.warning(
                "paused %s of run %s not handed over: %s; the unpause makes the call again",
                activity_id,
                workflow_id,
                exc,
            )
            continue
        calls.taken(task)
        handed += 1
        logger.info(
            "paused %s of run %s finished in this stopping worker: its result is the "
            "activity's, handed to the server (the run goes on with it)",
            activity_id,
            workflow_id,
        )
    return handed
