"""A decision sent again under its name, the run having continued as new more than
`RECENT_EXECUTIONS` times since, decides nothing more.

serve asks a run's latest executions (`RECENT_EXECUTIONS`, 10) for the outcome of a
decision sent again under its Idempotency-Key (an A2A messageId): Temporal keeps an
update's outcome with the execution that took it. A run continuing as new every turn
(a small history budget), whose later turns' calls need no person, went past 10
executions within moments, and the same request sent again once turn 13 waited for
its `call_0` (models reuse ids) decided that call, which nobody had seen; so did
one the run had refused (kept by its `decision_refused` update).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from agentor_temporal.serve._decisions import RECENT_EXECUTIONS
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, scripted_agent, transfer_tool

SMALL = RECENT_EXECUTIONS + 1
SCRIPT = [
    [CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_0")],
    *[[CallTool("transfer", {"amount": 1, "to": f"x{n}"}, id="call_0")] for n in range(SMALL)],
    [CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_0")],
    Reply("Paid."),
]


# the first sending took turn 1's call, or was refused (someone else decided it first)
@pytest.mark.parametrize("refused", [False, True], ids=["taken", "refused"])
async def test_a_decision_sent_again_past_the_latest_executions_decides_nothing(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refused: bool,
) -> None:
    from agentor_temporal.serve import create_app

    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "2000")  # continues as new every turn
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(SCRIPT) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[transfer_tool(ledger, threshold=100)],
            embedded_worker=False,
            max_turns=40,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob, the xs, then eve."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            transport = httpx.ASGITransport(app=create_app([agent]))
            route = f"/runs/{run_id}/approvals/call_0"
            keyed = {"Idempotency-Key": "approve-bob"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                if refused:
                    await agent.aapprove(run_id, "call_0", by="alice")
                first = await http.post(route, json={"approve": True}, headers=keyed)
                assert first.status_code == (409 if refused else 200), first.text
                assert refused or first.json()["turn"] == 1
                waiting = await asyncio.wait_for(agent.aresume(run_id), 120)
                assert [p.args["to"] for p in waiting.pending_approvals] == ["eve"], waiting
                listed = [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]
                assert len(listed) > RECENT_EXECUTIONS + 1  # visibility may lag: at least
                again = await http.post(route, json={"approve": True}, headers=keyed)
                assert again.status_code == first.status_code, again.text
                assert again.json() == first.json()
            waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
            [pending] = waiting.pending_approvals
            assert pending.args["to"] == "eve"
            await agent.adeny(run_id, pending, by="carol")
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    assert "eve" not in [line.split()[-1] for line in ledger_lines(ledger)]
