"""A run waiting for a person, or whose tools run, that many signals or updates reach stops
at a task budget.

Each signal or accepted update is a workflow task in the run's history, and a
worker that does not hold the run in its cache replays the whole history in
one workflow task: past a few thousand of them (bench/replay_signals.py) the
replay outlasted the 5 s workflow task timeout on every attempt, and the run
waited for good. The budget (`policies.PAUSED_WAIT_TASKS`, 1,000) is lowered
here to a few dozen.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import TemporalStore, policies

from helpers import ledger_lines, payer, scripted_agent, until, weather_tool

#: what a run waiting may take here before it stops
BUDGET = 20


async def test_a_waiting_run_stops_at_its_task_budget_and_resumes(
    client: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two transfers wait; one is approved and runs; junk signals follow until the run stops,
    failed and resumable, at its task budget, the approved transfer's result kept and the
    other answered as not run. Resume asks the model, which asks for that transfer again;
    it is approved and the run ends with its answer, each transfer run exactly once.
    Before, the run took every signal and waited on (until a worker replaying it
    could no longer finish its first workflow task)."""
    monkeypatch.setattr(policies, "PAUSED_WAIT_TASKS", BUDGET, raising=False)

    def respond(request: dict[str, Any]) -> Any:
        answers = {
            m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"
        }
        if not answers:
            return [
                CallTool("transfer", {"amount": 10, "to": "alice"}, id="c_alice"),
                CallTool("transfer", {"amount": 20, "to": "bob"}, id="c_bob"),
            ]
        if "c_bob_2" not in answers:  # told bob's transfer did not run: asks for it again
            return CallTool("transfer", {"amount": 20, "to": "bob"}, id="c_bob_2")
        return Reply("Paid alice and bob.")

    with ScriptedModelServer(respond) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay alice and bob."), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            await asyncio.wait_for(agent.aapprove(run_id, "c_alice", by="al"), 60)
            handle = client.get_workflow_handle(run_id)
            for sent in range(1, 10 * BUDGET):
                try:
                    await handle.signal("decide_signal", {"request_id": f"junk-{sent}", "x": 1})
                except RPCError:
                    break  # the run closed
            else:
                pytest.fail(f"the run took {sent} signals and waits on")
            outcome = await asyncio.wait_for(handle.result(), 60)
            events = await TemporalStore(client).aload(run_id)
            # a decision sent after the stop is told the run failed and resume goes on (it
            # was told "it is completed")
            with pytest.raises(ValueError, match=r"\(it is failed; resume\(run_id\) continues it"):
                await asyncio.wait_for(agent.aapprove(run_id, "c_bob", by="al"), 60)
            again = await asyncio.wait_for(agent.aresume(run_id), 60)
            assert again.status == "awaiting_approval", again.error
            assert [p.call_id for p in again.pending_approvals or []] == ["c_bob_2"]
            await asyncio.wait_for(agent.aapprove(run_id, "c_bob_2", by="al"), 60)
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert outcome["status"] == "failed", outcome
    assert "stopped while waiting" in outcome["error"], outcome
    assert f"signals and updates while it waited (it stops at {BUDGET}" in outcome["error"]
    assert sent < 3 * BUDGET, sent  # stopped near its budget, not at some other limit
    results = {e.call_id: e.error for e in events if e.type == "tool_result"}
    assert results == {"c_alice": None, "c_bob": "run failed"}, results
    assert done.status == "completed" and done.final_output == "Paid alice and bob.", done.error
    assert sorted(line.split()[-1] for line in ledger_lines(ledger)) == ["alice", "bob"]


async def test_a_run_whose_tool_runs_stops_at_its_task_budget_and_resumes(
    client: Client, task_queue: str, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool runs (for hours, say) while junk signals reach its run: the run stops mid-turn,
    failed and resumable, at its task budget, and resume ends with its answer. Before, it
    took every signal (up to Temporal's 10,000 an execution: 40,000 events is past that)
    and ran on, its history beyond what a fresh worker replays within the task timeout."""
    monkeypatch.setattr(policies, "PAUSED_WAIT_TASKS", BUDGET, raising=False)
    gate = tmp_path / "go"

    def respond(request: dict[str, Any]) -> Any:
        if not any(m["role"] == "tool" for m in request["messages"]):
            return CallTool("get_weather", {"city": "Oslo"}, id="c_wx")
        return Reply("Sunny in Oslo.")

    tool = weather_tool(ledger, delay=120, gate=str(gate))
    with ScriptedModelServer(respond) as model:
        agent = scripted_agent(model, client, task_queue, tools=[tool], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Weather in Oslo?")
            await until(lambda: bool(ledger_lines(ledger)), "the tool running", timeout=60)
            handle = client.get_workflow_handle(run_id)
            for sent in range(1, 10 * BUDGET):
                try:
                    await handle.signal("decide_signal", {"request_id": f"junk-{sent}", "x": 1})
                except RPCError:
                    break  # the run closed
                if sent == 3 * BUDGET:
                    break
            gate.touch()  # the sync tool's thread cannot be stopped: it ends now
            outcome = await asyncio.wait_for(handle.result(), 60)
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert outcome["status"] == "failed", outcome
    assert "stopped mid-turn" in outcome["error"], outcome
    assert f"signals and updates while its tools ran (it stops at {BUDGET}" in outcome["error"]
    assert done.status == "completed" and done.final_output == "Sunny in Oslo.", done.error
