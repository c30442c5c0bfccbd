"""Callers and followers of a run past Temporal's cap on an execution's updates.

A caller waiting for a run's pause (`run`, `resume`) used to send the
`wait_paused` update every time: two history events and a workflow task per
call, so a service polling a paused run with `resume` grew its history
without end (towards Temporal's 51,200-event limit), and once the server
refused more updates for the execution (2,000 by default), the caller waited
for the run's end and never returned the pause. A follower's stream polls are
updates too: one the server refused stopped following and ended its stream
before the run's end, without an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentor_temporal.activities.tooldef import function_tool
from agentor_temporal.connection import temporal_binary
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from conftest import SEARCH_ATTRIBUTE_ARGS
from helpers import transfer_tool, weather_agent, weather_tool

PAY = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")
#: updates the server takes per execution in the second test (Temporal's default: 2,000)
UPDATES = 2


async def history_length(client: Client, run_id: str) -> int:
    return len((await client.get_workflow_handle(run_id).fetch_history()).events)


async def test_asking_a_paused_run_again_and_again_leaves_its_history_alone(
    client: Client, task_queue: str, ledger: str
) -> None:
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            tools=[transfer_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            before = await history_length(client, paused.run_id)
            for _ in range(20):
                again = await agent.aresume(paused.run_id)
                assert again.status == "awaiting_approval"
                assert [p.call_id for p in again.pending_approvals] == ["call_pay"]
            assert await history_length(client, paused.run_id) == before
            await agent.aapprove(paused.run_id, "call_pay", by="alice")
            done = await agent.aresume(paused.run_id)
    assert done.status == "completed" and done.final_output == "Paid."


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def few_updates() -> AsyncIterator[Client]:
    """A dev server that takes only UPDATES updates per workflow execution (each test its runs)."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=[
            *SEARCH_ATTRIBUTE_ARGS,
            "--log-level",
            "error",
            "--dynamic-config-value",
            f"history.maxTotalUpdates={UPDATES}",
        ],
        ui=False,
    )
    try:
        yield env.client
    finally:
        await env.shutdown()


async def test_callers_past_the_update_limit_still_get_the_pause(
    few_updates: Client, task_queue: str, ledger: str
) -> None:
    client = few_updates
    started, gate = asyncio.Event(), asyncio.Event()

    @function_tool
    async def prepare(account: str) -> str:
        """Get an account ready.

        Args:
            account: Which account.
        """
        started.set()
        await gate.wait()
        return f"{account} is ready."

    script = [[CallTool("prepare", {"account": "main"}, id="call_prep")], [PAY], Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            tools=[prepare, transfer_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = "pause-polling-limit"
            first = asyncio.ensure_future(agent.arun("Prepare, then pay bob.", run_id=run_id))
            # while the run works, more callers wait for it than it takes updates
            await asyncio.wait_for(started.wait(), 30)
            callers = [asyncio.ensure_future(agent.aresume(run_id)) for _ in range(UPDATES + 1)]
            gate.set()
            async with asyncio.timeout(30):
                results = await asyncio.gather(first, *callers)
    assert [r.status for r in results] == ["awaiting_approval"] * (UPDATES + 2)
    assert all([p.call_id for p in r.pending_approvals] == ["call_pay"] for r in results)


async def test_a_follower_the_stream_refuses_reads_history_to_the_runs_end(
    few_updates: Client, task_queue: str, ledger: str
) -> None:
    client = few_updates
    # quick turns use up the updates; the last tool outlasts the follower's
    # re-subscribing (~4 s), during which the run records nothing new
    cities = ["Oslo", "Rome", "Lima", "slow"]
    script = [CallTool("get_weather", {"city": city}) for city in cities]
    with ScriptedModelServer([*script, Reply("All sunny.")]) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            tools=[weather_tool(ledger, delay=6.0, delay_city="slow")],
            embedded_worker=False,
            max_turns=len(cities) + 1,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Weather everywhere.")
            async with asyncio.timeout(60):
                followed = [e async for e in agent.stream(run_id)]
            result = await agent.aresume(run_id)
    assert result.status == "completed" and result.final_output == "All sunny."
    # every event, in order, ending with the run's end
    assert [(e.type, e.turn) for e in followed] == [(e.type, e.turn) for e in result.events]
    assert followed[-1].type == "run_end"
