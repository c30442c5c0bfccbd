"""A decision sent again under its name after the run was cancelled and resumed decides
nothing new.

A run past Temporal's updates is decided by the `decide_signal` signal, whose outcome
only the execution keeps (`Approvals.signalled`); a `decide` update's outcome Temporal
keeps with the execution that took it. A run cancelled (or failed) and resumed starts
an execution of its own from the log: it carried none of them, so serve, asked the
same Idempotency-Key's decision again, found no update under it in the run's
executions, sent it to the new one, and it approved the call waiting there, turn 2's
`call_0` (models reuse ids: eve's 9000), which nobody had seen; it ran. A plain
client's update sent again under its id was taken for eve's call the same way.
`resume` now hands the closed execution's outcomes to the execution it starts
(`workflows.closed_outcomes`, `AgentRunInput.outcomes`). Both tests fail without it:
eve's call approved.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from conftest import dev_server
from helpers import ledger_lines, payer

SCRIPT = [
    [
        CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0"),
        CallTool("transfer", {"amount": 7, "to": "alice"}, id="call_1"),
    ],
    [CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_0")],
    Reply("Paid."),
]


@pytest_asyncio.fixture
async def few_updates() -> AsyncIterator[Client]:
    """A dev server that takes 2 updates per execution: decisions go by signal."""
    async with dev_server("history.maxTotalUpdates=2") as client:
        yield client


async def _use_up_updates(client: Client, run_id: str) -> None:
    for _ in range(2):
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(run_id).execute_update("wait_paused")


async def test_a_signalled_decision_sent_again_after_a_resume_decides_nothing(
    few_updates: Client, task_queue: str, tmp_path: Path
) -> None:
    from agentor_temporal.serve import create_app

    client = few_updates
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(SCRIPT) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5 and alice 7."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            handle = client.get_workflow_handle(run_id)
            await _use_up_updates(client, run_id)
            transport = httpx.ASGITransport(app=create_app([agent]))
            route = f"/runs/{run_id}/approvals/call_0"
            keyed = {"Idempotency-Key": "approve-bob"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                first = await http.post(route, json={"approve": True}, headers=keyed)
                assert first.status_code == 200, first.text
                history = await handle.fetch_history()
                assert "decide_signal" in history.to_json()  # it went by signal
                await handle.cancel()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(handle.result(), 60)
                waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
                assert [p.args["to"] for p in waiting.pending_approvals] == ["eve"], waiting
                again = await http.post(route, json={"approve": True}, headers=keyed)
                # answered with turn 1's outcome (bob's), or refused: never eve's call
                assert again.json().get("args", {}).get("to") != "eve", again.text
            waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert waiting.status == "awaiting_approval", waiting.error
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]


async def test_a_decision_update_sent_again_by_its_id_after_a_resume_decides_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A plain client's `decide` update, sent again under its id after a cancel and a
    resume, is answered with what it came to (bob's), not taken for eve's `call_0`."""
    ledger = str(tmp_path / "ledger")
    decision = {"call_id": "call_0", "approved": True}
    with ScriptedModelServer(SCRIPT) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5 and alice 7."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            handle = client.get_workflow_handle(run_id)
            first = await handle.execute_update("decide", decision, id="approve-bob")
            assert first["args"]["to"] == "bob", first
            await handle.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(handle.result(), 60)
            waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
            assert [p.args["to"] for p in waiting.pending_approvals] == ["eve"], waiting
            again = await client.get_workflow_handle(run_id).execute_update(
                "decide", decision, id="approve-bob", result_type=dict
            )
            assert again["args"]["to"] == "bob", again  # what it came to, not eve's
            waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert waiting.status == "awaiting_approval", waiting.error
    assert [p.args["to"] for p in waiting.pending_approvals] == ["eve"]
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
