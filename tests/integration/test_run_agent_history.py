"""`run_agent` in a parent's history: each agent run adds its outcome, not its log.

A child run's result carried its last events and whole log in its payload's
metadata (for `Agentor.run`, which reads the run's result): 141 KB in the
parent's history for a 20 KB answer, so a workflow calling `run_agent` a few
hundred times reached Temporal's 50 MB and was terminated, long before its
answers alone would.
"""

from __future__ import annotations

import uuid

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from agentor_temporal import AgentorPlugin, TemporalStore
from agentor_temporal.testing import Reply, ScriptedModelServer
from agentor_temporal.workflow import run_agent

from integration.test_plugin import support

ANSWER = "x" * 20_000


@workflow.defn(sandboxed=False)
class AskTwice:
    @workflow.run
    async def run(self) -> list[str]:
        ids = []
        for _ in range(2):
            outcome = await run_agent("Support Agent", "Refund order A-1001?")
            assert outcome.status == "completed" and outcome.final_output == ANSWER
            ids.append(outcome.run_id)
        return ids


async def test_an_agent_run_adds_its_outcome_to_the_parents_history_not_its_log(
    client: Client, task_queue: str
) -> None:
    with ScriptedModelServer([Reply(ANSWER), Reply(ANSWER)]) as model:
        plugin = AgentorPlugin(agents=[support(model)])
        async with Worker(client, task_queue=task_queue, workflows=[AskTwice], plugins=[plugin]):
            handle = await client.start_workflow(
                AskTwice.run, id=uuid.uuid4().hex, task_queue=task_queue
            )
            children = await handle.result()
            history = await handle.fetch_history()
            store = TemporalStore(client)
            logs = [await store.aload(child) for child in children]
    done = EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED
    results = [
        e.child_workflow_execution_completed_event_attributes.result.payloads[0]
        for e in history.events
        if e.event_type == done
    ]
    assert len(results) == 2
    for payload in results:
        assert set(payload.metadata) == {"encoding"}
        assert payload.ByteSize() < len(ANSWER) + 2_000
    # the children's own histories keep their every event
    for events in logs:
        assert [e.type for e in events][0] == "run_start"
        assert events[-1].type == "run_end" and events[-1].text == ANSWER
