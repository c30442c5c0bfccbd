"""With `local_model_calls`, a model request that never answers stops the run at its time limit.

A run with a time limit stops itself `DEADLINE_MARGIN` before it and waits for a request
in flight only until `DEADLINE_CLOSE` before it (test_time_limits.py), by workflow timers.
A local activity holds its workflow task open, and the SDK sends the task's commands (the
limit's timer among them) and reads new events (the timer's firing) only at the task's
heartbeat, about every 8 s (80% of the 10 s task timeout): the run's first task, held by
turn 1's local request, sent its timer 8 s late (reckoned from the task's start, so it
fired after the limit). Seen before level 33: the timer recorded at 8.0 s of a 14 s
limit, the run WORKFLOW_EXECUTION_TIMED_OUT at 14 s, its turn unsettled. From level 33
(`policies.LOCAL_REQUEST_BOUNDED`) the worker gives up on the local request at the run's
`settle_by`, and the run closes failed with its own error.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal.testing import Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import scripted_agent

pytestmark = pytest.mark.slow

#: test_time_limits.py's: the run stops itself after 7 s, closes by 11 s
LIMIT = timedelta(seconds=14)


async def start_limited(client: Client, agent: Any, task_queue: str, run_id: str) -> Any:
    """Start the run as a plain client does, with an execution_timeout, and return its outcome."""
    handle = await client.start_workflow(
        policies.WORKFLOW_TYPE,
        {"agent": agent.name, "input": "Pay bob."},
        id=run_id,
        task_queue=task_queue,
        result_type=dict,
        execution_timeout=LIMIT,
    )
    return dict(await asyncio.wait_for(handle.result(), 60))


async def test_a_local_model_request_cut_off_by_the_time_limit_is_named_in_the_error(
    client: Client, task_queue: str
) -> None:
    with ScriptedModelServer([Hang(60), Reply("Sunny.")]) as model:
        agent = scripted_agent(
            model, client, task_queue, embedded_worker=False, local_model_calls=True
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"limited-local-{uuid.uuid4().hex[:8]}"
            outcome = await start_limited(client, agent, task_queue, run_id)
    assert outcome["status"] == "failed", outcome
    assert "The run reached its time limit of 14 s" in outcome["error"], outcome["error"]
    assert "Turn 1's model request was cut off" in outcome["error"], outcome["error"]
