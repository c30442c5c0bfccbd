"""A decision the run refused, sent again under its own name, is refused again.

A client names its decision (A2A's `messageId`, the decision route's
`Idempotency-Key`) so that, sent again after its request timed out, it is answered
with what the first sending came to. A first sending the server or the run refused
outright (the call was decided by someone else meanwhile: the task is working, not
waiting) left nothing in Temporal, so the same message sent again was checked anew:
once the run waited for a later turn's call with the same id (models reuse
`call_0`), it decided that call, which nobody had seen, and it ran.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, scripted_agent, until

SCRIPT = [
    [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0")],
    [CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_0")],
    Reply("Paid."),
]


def gated_transfer(ledger: str, asking: str, gate: str) -> Any:
    """A transfer needing approval whose check of eve's call waits for the file `gate`
    (meanwhile the run is working, waiting for no one)."""

    def over(amount: float, to: str = "") -> bool:
        if to == "eve":
            Path(asking).touch()
            deadline = time.monotonic() + 90
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.02)
        return True

    @function_tool(requires_approval=over)
    def transfer(amount: float, to: str) -> str:
        """Send money.

        Args:
            amount: How much.
            to: To whom.
        """
        ledger_write(ledger, "transfer", f"{amount} {to}")
        return f"Sent {amount:g} to {to}."

    return transfer


def message(run_id: str, message_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "message/send",
        "params": {
            "message": {
                "role": "user",
                "messageId": message_id,
                "taskId": run_id,
                "parts": [{"kind": "data", "data": {"call_id": "call_0", "approve": True}}],
            }
        },
    }


async def test_a_refused_decision_sent_again_decides_no_later_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from agentor_temporal.serve import create_app

    ledger, asking, gate = (str(tmp_path / name) for name in ("ledger", "asking", "gate"))
    with ScriptedModelServer(SCRIPT) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[gated_transfer(ledger, asking, gate)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5, then eve 9000."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            # alice approves bob's call first; the run goes on to check eve's
            await agent.aapprove(run_id, paused.pending_approvals[0], by="alice")
            await until(lambda: os.path.exists(asking), "eve's check", timeout=60)
            transport = httpx.ASGITransport(app=create_app([agent]))
            route = f"/runs/{run_id}/approvals/call_0"
            keyed = {"Idempotency-Key": "approve-bob"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=120
            ) as http:
                # a client that saw bob's call waiting approves it too late: refused
                first = (await http.post("/", json=message(run_id, "m-1"))).json()
                assert "not waiting for input" in first["error"]["message"], first
                late = await http.post(route, json={"approve": True}, headers=keyed)
                assert late.status_code == 409, late.text
                Path(gate).touch()
                waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
                [pending] = waiting.pending_approvals
                assert (pending.turn, pending.args["to"]) == (2, "eve")
                # their answers were lost: each client sends its request again
                again = (await http.post("/", json=message(run_id, "m-1"))).json()
                assert "error" in again, again
                assert again["error"]["message"] == first["error"]["message"]
                retried = await http.post(route, json={"approve": True}, headers=keyed)
                assert retried.status_code == 409, retried.text
                assert retried.json() == late.json()
            waiting = await asyncio.wait_for(agent.aresume(run_id), 60)
            [pending] = waiting.pending_approvals
            assert (pending.turn, pending.args["to"]) == (2, "eve")
            assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
            await agent.adeny(run_id, pending, by="carol")
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    assert [line.split()[-1] for line in ledger_lines(ledger)] == ["bob"]
