"""`run_agent` in a parent that is reset: the reset execution attaches to the agent run its
base started (live or finished), instead of starting and paying for the agent again.

A reset (`temporal workflow reset`) re-runs the parent's workflow code from its
point, and the SDK reseeds the random source the default run id was drawn
from: the agent was started again under a fresh id, its model asked again,
its tools run again, while the first run went on (or had finished) unseen.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from agentor_temporal import AgentorPlugin
from agentor_temporal.testing import Hang, Reply, ScriptedModelServer
from agentor_temporal.workflow import run_agent

from helpers import until
from integration.test_plugin import support


@workflow.defn(sandboxed=False)
class AskThenWait:
    """Asks the agent, then waits for `finish`; continues as new `rounds` times first."""

    def __init__(self) -> None:
        self.finished = False

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.run
    async def run(self, rounds: int) -> list[Any]:
        outcome = await run_agent("Support Agent", "Refund order A-1001?")
        if rounds:
            workflow.continue_as_new(rounds - 1)
        await workflow.wait_condition(lambda: self.finished)
        return [outcome.run_id, outcome.final_output]


def _children(events: Any) -> list[str]:
    started = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in events
        if e.event_type == started
    ]


async def _reset_to_first_task(client: Client, handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Reset the parent to its first workflow task; the children its base started."""
    events = (await handle.fetch_history()).events
    done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(
                workflow_id=handle.id, run_id=(await handle.describe()).run_id
            ),
            reason="test",
            workflow_task_finish_event_id=[e.event_id for e in events if e.event_type == done][0],
            request_id=uuid.uuid4().hex,
        )
    )
    return _children(events)


async def test_a_parent_reset_attaches_to_the_agent_run_it_started(
    client: Client, task_queue: str
) -> None:
    """Reset while the agent runs, and again once it finished: one model request in all;
    a parent continued as new starts an agent run of its own in each execution."""
    script = [Hang(3, Reply("first")), Reply("second"), Reply("third")]
    with ScriptedModelServer(script) as model:
        plugin = AgentorPlugin(agents=[support(model)])
        async with Worker(client, task_queue=task_queue, workflows=[AskThenWait], plugins=[plugin]):
            started = await client.start_workflow(
                AskThenWait.run, 0, id=uuid.uuid4().hex, task_queue=task_queue
            )
            handle = client.get_workflow_handle(started.id)  # the latest execution
            await until(lambda: model.request_count >= 1, "the agent's model request")
            [child] = await _reset_to_first_task(client, handle)  # the agent still running

            async def answered() -> bool:
                # the outcome, taken by an activity (attached) or from a child it started
                done = {
                    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
                    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
                }
                return any(e.event_type in done for e in (await handle.fetch_history()).events)

            deadline = asyncio.get_running_loop().time() + 30
            while not await answered():  # the reset parent took the run's outcome
                assert asyncio.get_running_loop().time() < deadline, "no outcome taken"
                await asyncio.sleep(0.05)
            assert model.request_count == 1, "the reset parent started the agent again"
            assert await _reset_to_first_task(client, handle) == [child]  # finished now
            await handle.signal(AskThenWait.finish)
            assert await asyncio.wait_for(handle.result(), 30) == [child, "first"]
            assert model.request_count == 1, "the reset parent started the agent again"

            chained = await client.start_workflow(
                AskThenWait.run, 1, id=uuid.uuid4().hex, task_queue=task_queue
            )
            await until(lambda: model.request_count >= 3, "the second execution's request")
            await chained.signal(AskThenWait.finish)
            run_id, answer = await asyncio.wait_for(chained.result(), 30)
    assert answer == "third" and run_id != child
