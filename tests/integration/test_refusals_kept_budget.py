"""Two reviewers deciding every call of a wide turn end it with the model's answer.

serve keeps a decision it refuses under the decision's own name (A2A's `messageId`,
the decision route's `Idempotency-Key`) as the run's `decision_refused` update, so
the same message sent again is refused again (`serve/_decisions.py`). Each such
update is a workflow task; counted against `policies.PAUSED_WAIT_TASKS` (1,000,
twice a turn's 500 calls), reviewers approving every call of a turn of 500 (a
second one's approvals refused, each kept) took the run there, and it stopped
mid-turn, failed, its last approved call cancelled, though neither did anything
wrong. From `policies.REFUSALS_UNCOUNTED` one kept refusal per decision taken is
not counted (`refusals.counted`). The budget is lowered here to twice the turn's
calls, the same ratio; a third reviewer's late approval is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import scripted_agent, transfer_tool

#: the turn's calls, each waiting for a person
CALLS = 4


def message(run_id: str, call_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "message/send",
        "params": {
            "message": {
                "role": "user",
                "messageId": uuid.uuid4().hex,
                "taskId": run_id,
                "parts": [{"kind": "data", "data": {"call_id": call_id, "approve": True}}],
            },
            "configuration": {"blocking": False},
        },
    }


async def test_reviewers_approving_every_call_end_with_the_answer(
    client: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentor_temporal.serve import create_app

    monkeypatch.setattr(policies, "PAUSED_WAIT_TASKS", 2 * CALLS, raising=False)
    names = [f"p{i}" for i in range(CALLS)]

    def respond(request: dict[str, Any]) -> Any:
        if not any(m["role"] == "tool" for m in request["messages"]):
            return [CallTool("transfer", {"amount": 5, "to": n}, id=f"c_{n}") for n in names]
        return Reply("Paid everyone.")

    with ScriptedModelServer(respond) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool(ledger, delay=1)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay them all."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            transport = httpx.ASGITransport(app=create_app([agent]))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                for name in names[:-1]:
                    await asyncio.wait_for(agent.aapprove(run_id, f"c_{name}", by="alice"), 60)
                    # bob approves it too, a moment late: refused, the refusal kept
                    late = (await http.post("/", json=message(run_id, f"c_{name}"))).json()
                    assert "error" in late, late
                # carol too, for the first call
                late = (await http.post("/", json=message(run_id, f"c_{names[0]}"))).json()
                assert "error" in late, late
                # (refused, should the run have stopped already: it is then asked of resume)
                with contextlib.suppress(ValueError):
                    await asyncio.wait_for(agent.aapprove(run_id, f"c_{names[-1]}", by="alice"), 60)
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    results = {e.call_id: e.error for e in result.events if e.type == "tool_result"}
    ended = [e.error for e in result.events if e.type == "run_end"]
    assert results == {f"c_{n}": None for n in names}, (results, ended)
    assert result.status == "completed", result.error


async def test_refusals_past_the_decisions_taken_still_stop_the_run(
    client: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refusals kept past one per decision taken count: a client sending refused decisions
    without end (a call no turn has) stops the waiting run at its budget, failed and
    resumable, as any flood does (a guard on the bound: it passes before the change too)."""
    budget = 6
    monkeypatch.setattr(policies, "PAUSED_WAIT_TASKS", budget, raising=False)
    from agentor_temporal.serve import create_app

    def respond(request: dict[str, Any]) -> Any:
        if not any(m["role"] == "tool" for m in request["messages"]):
            return [CallTool("transfer", {"amount": 5, "to": n}, id=f"c_{n}") for n in "ab"]
        return Reply("Paid them.")

    with ScriptedModelServer(respond) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool(ledger)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay them."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            await asyncio.wait_for(agent.aapprove(run_id, "c_a", by="alice"), 60)
            handle = client.get_workflow_handle(run_id)
            transport = httpx.ASGITransport(app=create_app([agent]))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                for sent in range(1, 4 * budget):
                    late = (await http.post("/", json=message(run_id, "c_nope"))).json()
                    assert "error" in late, (sent, late)
                    if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
                        break
                else:
                    pytest.fail(f"the run kept {sent} refusals and waits on")
            outcome = await asyncio.wait_for(handle.result(), 60)
    assert outcome["status"] == "failed", outcome
    assert f"while it waited (it stops at {budget}" in outcome["error"], outcome
    assert sent < 3 * budget, sent  # stopped near its budget, not at some other limit
