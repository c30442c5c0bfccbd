"""A decision sent by signal, sent again under its name after the run continued as new,
decides nothing more.

A run Temporal takes no more updates from is decided by the `decide_signal` signal,
its outcome kept by the execution under the sender's request id. serve names a
decision sent with an Idempotency-Key (or an A2A messageId) so that, sent again, it
is answered with what it came to; before level 29 a run that continued as new between the turns
(a long run past its history budget) kept no such outcome in its new execution, and
the same request, sent again once the run waited for turn 2's `call_0` (models
reuse ids), decided that call, which nobody had seen.

From behaviour level 29 a continue-as-new carries the latest outcomes of
decisions by signal (`workflows.carried_outcomes`), and the next execution
answers the decision sent again under its id with that outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from conftest import dev_server
from helpers import ledger_lines, payer

SCRIPT = [
    [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0")],
    [CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_0")],
    Reply("Paid."),
]


@pytest_asyncio.fixture
async def few_updates() -> AsyncIterator[Client]:
    """A dev server that takes 2 updates per execution: decisions go by signal."""
    async with dev_server("history.maxTotalUpdates=2") as client:
        yield client


async def _use_up_updates(client: Client, run_id: str) -> None:
    """The latest execution's updates used up (a followed run): decisions go by signal."""
    for _ in range(2):
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(run_id).execute_update("wait_paused")


# sent again by update (the new execution takes updates), or by signal (it takes none either)
@pytest.mark.parametrize(
    "again_by_signal", [False, True], ids=["again-by-update", "again-by-signal"]
)
async def test_a_signalled_decision_sent_again_after_a_continue_as_new_decides_nothing(
    few_updates: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    again_by_signal: bool,
) -> None:
    from agentor_temporal.serve import create_app

    client = few_updates
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "2000")
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(SCRIPT) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5, then eve 9000."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            first_execution = (await client.get_workflow_handle(run_id).describe()).run_id
            await _use_up_updates(client, run_id)
            transport = httpx.ASGITransport(app=create_app([agent]))
            route = f"/runs/{run_id}/approvals/call_0"
            keyed = {"Idempotency-Key": "approve-bob"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                first = await http.post(route, json={"approve": True}, headers=keyed)
                assert first.status_code == 200, first.text
                assert first.json()["turn"] == 1
                history = await client.get_workflow_handle(run_id).fetch_history()
                assert "decide_signal" in history.to_json()  # it went by signal
                waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
                assert [p.turn for p in waiting.pending_approvals] == [2]
                now = (await client.get_workflow_handle(run_id).describe()).run_id
                assert now != first_execution  # turn 2 waits in an execution of its own
                if again_by_signal:
                    await _use_up_updates(client, run_id)
                again = await http.post(route, json={"approve": True}, headers=keyed)
                assert again.status_code == 200, again.text
                assert again.json() == first.json()
                history = await client.get_workflow_handle(run_id).fetch_history()
                assert ("decide_signal" in history.to_json()) is again_by_signal
            waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
            [pending] = waiting.pending_approvals
            assert (pending.turn, pending.args["to"]) == (2, "eve")
            assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
            await agent.adeny(run_id, pending, by="carol")
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
