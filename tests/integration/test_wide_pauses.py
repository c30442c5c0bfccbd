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
import dataclasses
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from agentor_temporal import TemporalStore, function_tool
from agentor_temporal.store import events as events_module
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import AgentRunWorkflow, approvals, history_watch
from agentor_temporal.workflows.payloads import encoded_size

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


ITEMS = 200  # numbers in each call's arguments


@function_tool(requires_approval=True)
def load_batch(n: int, items: list[int]) -> str:
    """Load a batch, once a person agrees.

    Args:
        n: Which batch.
        items: What it holds.
    """
    return f"batch {n}: {len(items)} items"


@function_tool
def count_batch(n: int, items: list[int]) -> str:
    """Count a batch.

    Args:
        n: Which batch.
        items: What it holds.
    """
    return f"batch {n}: {len(items)} items"


@pytest.mark.parametrize("approval", [True, False], ids=["paused", "run"])
async def test_a_wide_turns_arguments_are_not_copied_item_by_item(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch, approval: bool
) -> None:
    """100 calls each given 200 numbers, paused for a person or run at once: the workflow
    copies no argument item by item, so the task beginning the pause (or the turn) and
    the one taking its results cost the encoder's work only.

    Before, the journal step's input and each `wait_paused` answer were dataclasses the
    SDK's converter deep-copied (`dataclasses.asdict`), and every journal step and
    published event copied each call's arguments again (`Event.to_dict`): 500 such
    calls took 1.4 s of one workflow task, and a slower machine or larger arguments
    pass the SDK's 2 s deadlock limit on every retry. Counted on replay.
    """
    width = 100
    tool = load_batch if approval else count_batch
    script: list[Step] = [
        [
            CallTool(tool.name, {"n": n, "items": list(range(ITEMS))}, id=f"call_{n}")
            for n in range(width)
        ],
        Reply("Loaded."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[tool], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.arun("Load them all."), 60)
            if approval:
                assert result.status == "awaiting_approval", result.error
                assert len(result.pending_approvals) == width
                assert all(len(c.args["items"]) == ITEMS for c in result.pending_approvals)
            else:
                assert result.status == "completed", result.error
            history = await client.get_workflow_handle(result.run_id).fetch_history()

    copied = 0  # argument items and other values copied one by one
    real_copied, real_asdict = events_module._copied, dataclasses.asdict

    def counted_copied(value: Any) -> Any:
        nonlocal copied
        copied += 1
        return real_copied(value)

    def counted_asdict(value: Any, **kwargs: Any) -> Any:
        nonlocal copied
        data = real_asdict(value, **kwargs)
        copied += encoded_size(data) // 4  # about one item in four bytes ("123,")
        return data

    monkeypatch.setattr(events_module, "_copied", counted_copied)
    monkeypatch.setattr(dataclasses, "asdict", counted_asdict)
    replayer = Replayer(workflows=[AgentRunWorkflow], workflow_runner=UnsandboxedWorkflowRunner())
    await replayer.replay_workflow(history)
    # each call's items are in its events (tool_call, approval_request), its
    # activity's input and the pause's answer: before, each was copied item by item
    assert copied < width * ITEMS, copied
