"""A run stopped for good mid-turn (terminated, timed out) keeps the calls that finished.

A turn of parallel calls in which one call finished (its activity completed in
history) and another was still running when the run was terminated: resume
(and fork) went back to the request and asked the model again, which asked
for the same calls, so the finished one (a payment) ran a second time and the
model was paid twice for the turn. Real dev server, real openai client
against the scripted model, a ledger file counting the tool's executions.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, scripted_agent, until


def _model(request: dict[str, Any]) -> Step:
    messages = request.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return Reply("Done.")
    return [
        CallTool("pay", {"amount": 5}, id="call_pay"),
        CallTool("slow_lookup", {"what": "x"}, id="call_slow"),
    ]


def _tools(ledger: str, release: Path) -> list[Any]:
    @function_tool
    def pay(amount: int) -> str:
        """Send money.

        Args:
            amount: How much.
        """
        ledger_write(ledger, "pay", str(amount))
        return f"Paid {amount}."

    @function_tool
    async def slow_lookup(what: str) -> str:
        """Look something up, slowly.

        Args:
            what: What to look up.
        """
        ledger_write(ledger, "slow_lookup", what)
        for _ in range(3000):
            if release.exists():
                break
            await asyncio.sleep(0.02)
        return f"Found {what}."

    return [pay, slow_lookup]


async def _completed(client: Client, run_id: str, activity_id: str) -> None:
    """Wait until the run's history holds the completion of activity `activity_id`."""
    handle = client.get_workflow_handle(run_id)

    async def done() -> bool:
        events = (await handle.fetch_history()).events
        scheduled = {
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_id == activity_id
        }
        return any(
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
            for e in events
        )

    async with asyncio.timeout(30):
        while not await done():
            await asyncio.sleep(0.05)


async def _terminated_mid_turn(
    client: Client, model: ScriptedModelServer, task_queue: str, ledger: str, release: Path
) -> tuple[Any, str]:
    agent = scripted_agent(
        model, client, task_queue, tools=_tools(ledger, release), embedded_worker=False
    )
    run_id = f"cut-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, [agent], task_queue=task_queue):
        running = asyncio.ensure_future(agent.arun("pay and look", run_id=run_id))
        try:
            await until(
                lambda: len(ledger_lines(ledger)) == 2, "the payment and the lookup's start"
            )
            # the payment's completion is in history; the lookup still runs
            await _completed(client, run_id, "tool-1-0")
            await client.get_workflow_handle(run_id).terminate("test: stopped mid-turn")
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    release.touch()
    return agent, run_id


async def test_resume_of_a_run_terminated_mid_turn_pays_once(
    client: Client, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """Terminated with one call done and one running: resume runs neither again."""
    with ScriptedModelServer(_model) as model:
        agent, run_id = await _terminated_mid_turn(
            client, model, task_queue, ledger, tmp_path / "release"
        )
        agent.embedded_worker = True
        result = await asyncio.wait_for(agent.aresume(run_id), 60)
        requests = model.request_count
        last = model.requests[-1]["messages"]
    assert result.status == "completed", result.error
    ran = sorted(line.split()[0] for line in ledger_lines(ledger))  # side by side: either order
    assert ran == ["pay", "slow_lookup"], ledger_lines(ledger)
    assert requests == 2
    answers = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert answers["call_pay"] == "Paid 5."
    assert "was terminated; it may or may not have run" in answers["call_slow"]
    # the new segment records the kept answer again (`AgentRunInput.answer`), then the results
    kinds = [e.type for e in result.events]
    assert kinds.count("tool_result") == 2 and kinds.count("run_start") == 2, kinds


async def test_fork_of_a_run_terminated_mid_turn_pays_once(
    client: Client, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """The same run forked instead: the fork keeps the payment's result and the cut lookup."""
    with ScriptedModelServer(_model) as model:
        agent, run_id = await _terminated_mid_turn(
            client, model, task_queue, ledger, tmp_path / "release"
        )
        agent.embedded_worker = True
        result = await asyncio.wait_for(agent.afork(run_id), 60)
        requests = model.request_count
        last = model.requests[-1]["messages"]
    assert result.status == "completed", result.error
    ran = sorted(line.split()[0] for line in ledger_lines(ledger))  # side by side: either order
    assert ran == ["pay", "slow_lookup"], ledger_lines(ledger)
    assert requests == 2
    answers = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert answers["call_pay"] == "Paid 5."
    assert "may or may not have run" in answers["call_slow"]
