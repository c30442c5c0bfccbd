"""A turn of hundreds of calls waiting for people, decided many at a time, never wedges.

Every call waiting asked, in every pass of every workflow task, whether the
run's history had grown past what a pause may reach (`pause_overgrown`): a
turn of 320 calls waiting, decided 20 at a time, spent over 2 s in one task
(the SDK's deadlock limit), the task failed, and a decision sent then was
refused ("Workflow Task in failed state"). From `PAUSE_WATCHED_ONCE` one
watcher asks it for all of them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import TemporalStore, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import approvals, history_watch

from helpers import scripted_agent

WIDTH = 300
RAN: list[int] = []


@function_tool(requires_approval=True)
def open_valve(n: int) -> str:
    """Open a valve, once a person agrees.

    Args:
        n: Which valve.
    """
    RAN.append(n)
    return f"valve {n} open"


async def test_a_wide_turn_decided_many_at_a_time_asks_its_history_once_a_pass(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 calls waiting, approved 10 at a time: the run completes, every call once.

    The history's stop is asked about in proportion to the turn, not to its
    square (before: ~100 times per call waiting, 30,000 for this turn).
    """
    RAN.clear()
    asked = 0
    real = history_watch.history_now

    def counted() -> tuple[int, int]:
        nonlocal asked
        asked += 1
        return real()

    # where a pause asks it: the watcher's module (and, before it, approvals')
    for module in ("agentor_temporal.workflows.pause_watch", approvals.__name__):
        monkeypatch.setattr(f"{module}.history_now", counted, raising=False)
    script: list[Step] = [
        [CallTool("open_valve", {"n": n}, id=f"call_{n}") for n in range(WIDTH)],
        Reply("All open."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[open_valve], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Open them all."), 60)
            assert paused.status == "awaiting_approval", paused.error
            assert len(paused.pending_approvals) == WIDTH
            gate = asyncio.Semaphore(10)  # Temporal's updates in flight per execution

            async def approve(call: Any) -> None:
                async with gate:
                    await agent.aapprove(paused.run_id, call)

            await asyncio.wait_for(
                asyncio.gather(*(approve(c) for c in paused.pending_approvals)), 120
            )
            handle = client.get_workflow_handle(paused.run_id)
            outcome = await asyncio.wait_for(handle.result(), 60)
    assert outcome["status"] == "completed", outcome
    assert sorted(RAN) == list(range(WIDTH))
    history = await handle.fetch_history()
    kinds = [e.event_type for e in history.events]
    first_decision = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    # no task failed while decisions came (the task that begins the pause, recording
    # 600 events at once, may pass the SDK's 2 s on a loaded machine; it is retried
    # before any decision can be sent, so it refuses none)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds[first_decision:]
    events = await TemporalStore(client).aload(paused.run_id)
    assert sum(1 for e in events if e.type == "approval_decision") == WIDTH
    assert asked < 10 * WIDTH, asked
