"""A decision a client sends again under its own name decides nothing more.

A2A names each message by its `messageId`; a client whose `message/send` timed out
(a blocking send waits for the run to end or ask again: the approved call may be
slow) sends the same message again. A message that starts a task attaches to the
run the first one started; a message deciding a call was decided again: models
reuse call ids (`call_0` in every turn), so once the run had moved on to another
turn's call with that id, the same message approved that call, which nobody had
seen, and it ran. So did serve's decision route, sent again with its Idempotency-Key.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, payer

SCRIPT = [
    [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0")],
    [CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_0")],
    Reply("Paid."),
]


def decision(run_id: str, message_id: str, approve: bool = True) -> dict[str, Any]:
    data = {"call_id": "call_0", "approve": approve}
    return {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "message/send",
        "params": {
            "message": {
                "role": "user",
                "messageId": message_id,
                "taskId": run_id,
                "parts": [{"kind": "data", "data": data}],
            }
        },
    }


async def test_a_decision_message_sent_again_decides_no_later_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from agentor_temporal.serve import create_app

    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(SCRIPT) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5, then eve 9000."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            transport = httpx.ASGITransport(app=create_app([agent]))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                first = (await http.post("/", json=decision(run_id, "m-1"))).json()
                # blocking: answered once the run asks again, for turn 2's call_0
                assert first["result"]["status"]["state"] == "input-required", first
                # the client's send timed out: it sends the very message again
                again = (await http.post("/", json=decision(run_id, "m-1"))).json()
                assert "error" not in again, again
                assert again["result"]["status"]["state"] == "input-required", again
            waiting = await agent.aresume(run_id)
            assert waiting.status == "awaiting_approval", waiting.status
            [pending] = waiting.pending_approvals
            assert (pending.call_id, pending.turn, pending.args["to"]) == ("call_0", 2, "eve")
            transfers = [line.split()[-1] for line in ledger_lines(ledger)]
            assert transfers == ["bob"], transfers
            # a new message (its own id) decides the call waiting now
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                denied = (await http.post("/", json=decision(run_id, "m-2", False))).json()
                assert denied["result"]["status"]["state"] == "completed", denied
                # sent again once the task has ended, each is answered with the task
                for name in ("m-1", "m-2"):
                    late = (await http.post("/", json=decision(run_id, name))).json()
                    assert late["result"]["status"]["state"] == "completed", late
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    decisions = [(e.turn, e.status, e.result) for e in done.events if e.type == "approval_decision"]
    assert decisions == [(1, "approved", "a2a"), (2, "denied", "a2a")], decisions
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]


async def test_a_decision_route_sent_again_with_its_key_decides_no_later_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from agentor_temporal.serve import create_app

    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(SCRIPT) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5, then eve 9000."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            transport = httpx.ASGITransport(app=create_app([agent]))
            route = f"/runs/{run_id}/approvals/call_0"
            keyed = {"Idempotency-Key": "approve-bob"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                first = await http.post(route, json={"approve": True}, headers=keyed)
                assert first.status_code == 200, first.text
                assert first.json()["turn"] == 1
                # the run goes on and asks for turn 2's call_0
                waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
                assert [p.turn for p in waiting.pending_approvals] == [2]
                # the client's request timed out: it sends it again, with its key
                again = await http.post(route, json={"approve": True}, headers=keyed)
                assert again.status_code == 200, again.text
                assert again.json() == first.json()
                waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
                [pending] = waiting.pending_approvals
                assert (pending.turn, pending.args["to"]) == (2, "eve")
                # a key of its own decides the call waiting now
                denied = await http.post(
                    route, json={"approve": False}, headers={"Idempotency-Key": "deny-eve"}
                )
                assert denied.status_code == 200 and denied.json()["turn"] == 2, denied.text
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]


async def test_a_decision_message_sent_again_after_a_continue_as_new_decides_nothing(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run continued as new between the turns: the message's decision is found in the
    execution that took it (before the fix, and asking the latest only, turn 2's was taken)."""
    from agentor_temporal.serve import create_app

    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "2000")
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(SCRIPT) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5, then eve 9000."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            first_execution = (await client.get_workflow_handle(run_id).describe()).run_id
            transport = httpx.ASGITransport(app=create_app([agent]))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                first = (await http.post("/", json=decision(run_id, "m-1"))).json()
                assert first["result"]["status"]["state"] == "input-required", first
                now = (await client.get_workflow_handle(run_id).describe()).run_id
                assert now != first_execution  # turn 2 waits in an execution of its own
                again = (await http.post("/", json=decision(run_id, "m-1"))).json()
                assert again["result"]["status"]["state"] == "input-required", again
            waiting = await agent.aresume(run_id)
            [pending] = waiting.pending_approvals
            assert (pending.turn, pending.args["to"]) == (2, "eve")
            assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
            await agent.adeny(run_id, pending, by="carol")
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
