"""Approvals at the edges: a worker killed between two decisions, a pause past the budget.

Real dev server; worker processes SIGKILLed where the test is about a crash.
Each call runs at most once, each decision reaches its own call, and a run
whose history passed its budget while a call waited for a person continues
as new only after the decision.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal._runs import send_decision
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.workflows import Decision

from helpers import (
    ledger_lines,
    spawn,
    stop_process,
    transfer_tool,
    wait_line,
    weather_agent,
    weather_tool,
)

#: a history budget the paused turn's results alone pass
BUDGET = 20_000
PAY = "Pay bob 5000 and tell me the weather in Oslo."


def _env(address: str, model: ScriptedModelServer, task_queue: str, ledger: str) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "APPROVAL": "1",
    }


def _caller(model: ScriptedModelServer, client: Client, task_queue: str, ledger: str) -> Any:
    """The agent as a caller only (no embedded worker): a worker process serves."""
    return weather_agent(
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=client,
        tools=[weather_tool(ledger), transfer_tool(ledger)],
        embedded_worker=False,
    )


async def _events(client: Client, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = await client.get_workflow_handle(run_id).query(
        "events", 0, result_type=list
    )
    return events


@pytest.mark.slow
async def test_two_approvals_with_a_worker_sigkill_between_the_decisions(
    client: Client, temporal_address: str, task_queue: str, ledger: str
) -> None:
    """Approve one, SIGKILL the worker (the approved transfer in flight), deny the other."""
    script: list[Step] = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_a"),
            CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_b"),
        ],
        Reply("Handled both."),
    ]
    with ScriptedModelServer(script) as model:
        env = _env(temporal_address, model, task_queue, ledger)
        agent = _caller(model, client, task_queue, ledger)
        first = spawn(["worker"], env)
        second: subprocess.Popen[str] | None = None
        try:
            wait_line(first, "worker ready")
            paused = await asyncio.wait_for(agent.arun(PAY), 60)
            assert sorted(p.call_id for p in paused.pending_approvals) == ["call_a", "call_b"]
            await asyncio.wait_for(
                send_decision(client, paused.run_id, Decision("call_a", True, None, "alice")), 30
            )
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            second = spawn(["worker"], env)
            wait_line(second, "worker ready")
            await asyncio.wait_for(
                send_decision(client, paused.run_id, Decision("call_b", False, "no", "bob")), 60
            )
            outcome = await asyncio.wait_for(client.get_workflow_handle(paused.run_id).result(), 90)
            events = await _events(client, paused.run_id)
        finally:
            stop_process(first)
            stop_process(second)
    assert outcome["status"] == "completed", outcome
    transfers = [line for line in ledger_lines(ledger) if line.startswith("transfer")]
    # call_a exactly once (or at most once if the kill beat it, the retry runs it); never call_b
    assert len(transfers) == 1 and "bob" in transfers[0], transfers
    decisions = {e["call_id"]: e["status"] for e in events if e["type"] == "approval_decision"}
    assert decisions == {"call_a": "approved", "call_b": "denied"}


async def test_an_approval_pending_when_history_is_past_its_budget(
    client: Client, task_queue: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """History past its budget while a call waits: the run waits in that execution, then
    continues as new after the decision; every call runs once."""
    from collections import Counter

    from agentor_temporal import TemporalStore
    from agentor_temporal.worker import build_worker

    from integration.test_long_runs import chunk_tool, coder

    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    ledger = str(tmp_path / "ledger")

    def respond(request: dict[str, Any]) -> Any:
        done = sum(1 for m in request.get("messages") or [] if m.get("role") == "tool")
        if done == 12:
            # four 8 KB results in the paused turn: its execution passes the budget
            return [
                *(CallTool("read_chunk", {"n": n}, id=f"call_{n}") for n in range(13, 17)),
                CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
            ]
        if done < 20:
            return CallTool("read_chunk", {"n": done + 1}, id=f"call_{done + 1}")
        return Reply("Read and paid.")

    with ScriptedModelServer(respond) as model:
        agent = coder(
            model, client, task_queue, tools=[chunk_tool(ledger, 8000), transfer_tool(ledger)]
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Read and pay.", max_turns=40), 120)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            state = await client.get_workflow_handle(run_id).query("state", result_type=dict)
            before = len(await TemporalStore(client).segments(run_id))
            await agent.aapprove(run_id, "call_pay", by="carol")
            result = await asyncio.wait_for(agent.aresume(run_id), 120)
    # the pause came with history past its budget, in the execution that made the request
    assert state["status"] == "awaiting_approval" and state["history_bytes"] > BUDGET, state
    assert result.status == "completed" and result.final_output == "Read and paid."
    after = len(await TemporalStore(client).segments(run_id))
    assert after > before
    lines = ledger_lines(ledger)
    assert sum(1 for line in lines if line.startswith("transfer")) == 1
    reads = Counter(line for line in lines if not line.startswith("transfer"))
    assert len(reads) == 19 and set(reads.values()) == {1}
