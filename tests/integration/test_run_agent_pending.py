"""`run_agent` past Temporal's cap on a workflow's pending child executions.

Temporal refuses a workflow task whose commands would leave more child
workflows pending than its limit (2,000 by default): the whole task is
refused, so none of its children start, and the task is refused again on
every retry, for good. A parent that starts its agent runs side by side
(`asyncio.gather` over a few thousand prompts) never ran any of them.
`run_agent` holds a run back while `policies.MAX_PENDING_AGENT_RUNS` of this
execution's are pending, and starts it as one ends. The same for gRPC's 4 MB
on a task's completion, which carries every start's input: runs of large
prompts gathered side by side start `policies.RUN_AGENT_TASK_BYTES` a task.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from agentor_temporal import AgentorPlugin
from agentor_temporal.testing import Reply, ScriptedModelServer
from agentor_temporal.workflow import run_agent
from agentor_temporal.workflows import policies

from conftest import dev_server
from helpers import unwedged_history
from integration.test_plugin import support

#: pending child executions the test's server allows a workflow (Temporal's default: 2,000)
PENDING = 3
#: agent runs the parent starts side by side
RUNS = 7


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def few_children() -> AsyncIterator[Client]:
    """A dev server that lets a workflow have only PENDING child executions pending."""
    async with dev_server(f"limit.numPendingChildExecutions.error={PENDING}") as client:
        yield client


@workflow.defn(sandboxed=False)
class AskMany:
    @workflow.run
    async def run(self, count: int) -> list[str]:
        outcomes = await asyncio.gather(
            *(run_agent("Support Agent", f"Refund order A-{n}?") for n in range(count))
        )
        return [o.final_output or o.status for o in outcomes]


async def test_agent_runs_side_by_side_past_the_pending_children_cap_all_run(
    few_children: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = few_children
    monkeypatch.setattr(policies, "MAX_PENDING_AGENT_RUNS", PENDING)
    with ScriptedModelServer([Reply(f"Answer {n}.") for n in range(RUNS)]) as model:
        plugin = AgentorPlugin(agents=[support(model)])
        async with Worker(client, task_queue=task_queue, workflows=[AskMany], plugins=[plugin]):
            handle = await client.start_workflow(
                AskMany.run, RUNS, id=uuid.uuid4().hex, task_queue=task_queue
            )
            history = await unwedged_history(client, handle.id, timeout=60)
            answers = await handle.result()
    assert sorted(answers) == sorted(f"Answer {n}." for n in range(RUNS))
    assert most_pending(history) == PENDING
    await Replayer(workflows=[AskMany], plugins=[AgentorPlugin()]).replay_workflow(history)


async def test_a_parent_recorded_with_more_runs_pending_than_the_cap_replays(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history from before the cap (all its runs started at once) replays as it was."""
    with ScriptedModelServer([Reply(f"Answer {n}.") for n in range(RUNS)]) as model:
        plugin = AgentorPlugin(agents=[support(model)])
        async with Worker(client, task_queue=task_queue, workflows=[AskMany], plugins=[plugin]):
            handle = await client.start_workflow(
                AskMany.run, RUNS, id=uuid.uuid4().hex, task_queue=task_queue
            )
            assert len(await handle.result()) == RUNS
            history = await handle.fetch_history()
    assert most_pending(history) == RUNS
    monkeypatch.setattr(policies, "MAX_PENDING_AGENT_RUNS", PENDING)
    await Replayer(workflows=[AskMany], plugins=[AgentorPlugin()]).replay_workflow(history)


def most_pending(history: WorkflowHistory) -> int:
    """The most child executions the history has pending at once."""
    pending = most = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            pending += 1
            most = max(most, pending)
        elif event.event_type in CLOSED:
            pending -= 1
    return most


CLOSED = {
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
}


@workflow.defn(sandboxed=False)
class AskLarge:
    @workflow.run
    async def run(self, count: int) -> list[str]:
        outcomes = await asyncio.gather(
            *(run_agent("Support Agent", f"{n}" + "x" * 1_300_000) for n in range(count))
        )
        return [o.final_output or o.status for o in outcomes]


async def test_large_agent_runs_started_side_by_side_all_run(
    client: Client, task_queue: str
) -> None:
    """Their inputs together past gRPC's 4 MB: started a few to a workflow task."""
    runs = 4
    with ScriptedModelServer([Reply(f"Answer {n}.") for n in range(runs)]) as model:
        plugin = AgentorPlugin(agents=[support(model)])
        async with Worker(client, task_queue=task_queue, workflows=[AskLarge], plugins=[plugin]):
            handle = await client.start_workflow(
                AskLarge.run, runs, id=uuid.uuid4().hex, task_queue=task_queue
            )
            history = await unwedged_history(client, handle.id, timeout=60)
            answers = await handle.result()
    assert sorted(answers) == sorted(f"Answer {n}." for n in range(runs))
    await Replayer(workflows=[AskLarge], plugins=[AgentorPlugin()]).replay_workflow(history)
