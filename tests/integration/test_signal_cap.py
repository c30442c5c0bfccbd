"""Runs past Temporal's cap on an execution's signals (10,000 by default).

Past the cap the server refuses every further signal to the execution
("exceeded workflow execution limit for signal events"), and the run goes on
without them: a flood of junk signals (a plain client's retry loop) is
enough to reach it. The tests start a dev server whose cap is `SIGNALS`, so
a few dozen signals reach it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from agentor_temporal.connection import temporal_binary
from agentor_temporal.testing import Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from conftest import SEARCH_ATTRIBUTE_ARGS
from helpers import scripted_agent

#: signals the server takes per execution in these tests (Temporal's default: 10,000)
SIGNALS = 30


@pytest_asyncio.fixture
async def few_signals() -> AsyncIterator[Client]:
    """A dev server that takes only SIGNALS signals per workflow execution."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=[
            *SEARCH_ATTRIBUTE_ARGS,
            "--log-level",
            "error",
            "--dynamic-config-value",
            f"history.maximumSignalsPerExecution={SIGNALS}",
        ],
        ui=False,
    )
    try:
        yield env.client
    finally:
        await env.shutdown()


async def flood(client: Client, run_id: str) -> None:
    """Junk signals until the server refuses one: the execution is at its cap."""
    handle = client.get_workflow_handle(run_id)
    for n in range(SIGNALS + 1):
        try:
            await handle.signal("decide_signal", {"request_id": f"junk-{n}", "decision": "x"})
        except RPCError as exc:
            assert "limit for signal events" in str(exc), exc
            return
    pytest.fail(f"the server took {SIGNALS + 1} signals")


async def test_a_streamed_answer_after_the_signal_cap_is_kept(
    few_signals: Client, task_queue: str
) -> None:
    """A streamed reply whose text deltas the run refuses (its execution past the signal cap)
    is still recorded, asked once: before, the refused publish failed the model request
    after its answer came, as an internal error, and the run failed with the paid answer lost."""
    client = few_signals
    flooded = threading.Event()

    def once_flooded(request: dict[str, Any]) -> Any:
        if flooded.is_set():
            return Reply("Sunny in London, " + "and warm " * 50)
        return Hang(0.1, once_flooded)

    with ScriptedModelServer([once_flooded]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Weather in London?", stream_text=True)
            await asyncio.to_thread(model.wait_for_requests, 1)
            await flood(client, run_id)
            flooded.set()
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert result.status == "completed", result.error
    assert result.final_output is not None and result.final_output.startswith("Sunny in London")
    assert model.request_count == 1
