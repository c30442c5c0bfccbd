"""A turn's calls decided one at a time, the run resumed after each, end with the run's answer.

A run waiting for a person stops, failed, once it took `policies.PAUSED_WAIT_TASKS`
(1,000) signals and accepted updates since it began to wait, or since its tools
began (each is a workflow task, and a fresh worker replays them all in one). A
turn holds at most `MAX_CALLS_PER_REPLY` (500) calls, so 1,000 is two a call:
a decision, and the `wait_paused` update `resume` sent while the approved call
ran. Approving each call then resuming, as `approve`'s docstring says, thus took
a turn of 500 calls to its budget with the last resume, and the run stopped
mid-turn, its last call cut off, though nobody did anything wrong (and fewer
calls with a second caller waiting beside). The budget is lowered here to
twice the turn's calls, the same ratio.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import ledger_lines, scripted_agent, transfer_tool

#: the turn's calls, each waiting for a person
CALLS = 6


async def test_calls_decided_one_at_a_time_with_a_resume_after_each_end_with_the_answer(
    client: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six transfers wait; each is approved, then the run resumed while it runs (a slow
    transfer), until the run answers. Before, each resume sent the run an update, and the
    last one took it to its budget: the run stopped mid-turn, failed."""
    monkeypatch.setattr(policies, "PAUSED_WAIT_TASKS", 2 * CALLS, raising=False)
    names = [f"p{i}" for i in range(CALLS)]

    def respond(request: dict[str, Any]) -> Any:
        if not any(m["role"] == "tool" for m in request["messages"]):
            return [CallTool("transfer", {"amount": 5, "to": n}, id=f"c_{n}") for n in names]
        return Reply("Paid everyone.")

    tool = transfer_tool(ledger, delay=1.5)
    with ScriptedModelServer(respond) as model:
        agent = scripted_agent(model, client, task_queue, tools=[tool], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.arun("Pay them all."), 60)
            for name in names:
                assert result.status == "awaiting_approval", result.error
                assert run_id_of(result) and f"c_{name}" in pending(result)
                await asyncio.wait_for(agent.aapprove(result.run_id, f"c_{name}", by="al"), 60)
                result = await asyncio.wait_for(agent.aresume(run_id_of(result)), 60)
    results = {e.call_id: e.error for e in result.events if e.type == "tool_result"}
    ended = [e.error for e in result.events if e.type == "run_end"]
    assert results == {f"c_{n}": None for n in names}, (results, ended)
    assert result.status == "completed", result.error
    assert result.final_output == "Paid everyone."
    assert sorted(line.split()[-1] for line in ledger_lines(ledger)) == names


def run_id_of(result: Any) -> str:
    run_id = result.run_id
    assert isinstance(run_id, str)
    return run_id


def pending(result: Any) -> list[str]:
    return [p.call_id for p in result.pending_approvals or []]
