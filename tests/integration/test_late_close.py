"""A run that closes right after a local activity replays with its result a task late.

A closing run without a mirror decides whether its last events go in its
result or take a journal step (`policies.JOURNAL_IN_RESULT`). Where they take
the step (a `run_agent` child, a worker whose payloads go through a codec,
events past what a result holds) it asked `workflow.patched` at the close:
with `local_model_calls` that is right after the run's last model request, a
local activity. Its result can reach the run a workflow task after the one
that recorded it (`late_results`), and a replay hands it over in that one,
where the patch's marker is not yet known: every replay of the closed run
(each query of it) failed with TMPRL1100. From behaviour level 22 the choice
is read from what history holds (`policies.JOURNAL_CHOICE_RECORDED`).
"""

from __future__ import annotations

import uuid

import pytest
from late_results import executions, replay_late
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from agentor_temporal import AgentorPlugin
from agentor_temporal.testing import Reply, ScriptedModelServer, tool_then_answer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflow import run_agent
from agentor_temporal.workflows import policies

from helpers import PROMPT, scripted_agent, weather_agent
from integration.test_plugin import support
from integration.test_step_savings import local_steps, offered, patches

#: more than a result's payload carries of a run's last events
LONG_ANSWER = "x" * (policies.MAX_RESULT_JOURNAL_BYTES + 10_000)


@workflow.defn(sandboxed=False)
class AskOnce:
    @workflow.run
    async def run(self) -> str:
        outcome = await run_agent("Support Agent", "Refund order A-1001?")
        assert outcome.status == "completed"
        return outcome.run_id


async def test_a_child_run_with_local_model_calls_replays_with_its_answer_a_task_late(
    client: Client, task_queue: str
) -> None:
    with ScriptedModelServer([Reply("Refunded.")]) as model:
        plugin = AgentorPlugin(agents=[support(model, local_model_calls=True)])
        async with Worker(client, task_queue=task_queue, workflows=[AskOnce], plugins=[plugin]):
            child = await client.execute_workflow(
                AskOnce.run, id=uuid.uuid4().hex, task_queue=task_queue
            )
    [history] = await executions(client, child)
    # its last events take a journal step: a child's result goes into its parent's history
    assert local_steps(history)[-2:] == [policies.GENERATE, policies.JOURNAL]
    await replay_late(history)
    assert patches(history) == []


async def test_a_run_whose_last_events_pass_a_result_replays_with_its_answer_a_task_late(
    client: Client, task_queue: str
) -> None:
    with ScriptedModelServer([Reply(LONG_ANSWER)]) as model:
        agent = scripted_agent(
            model, client, task_queue, store=None, local_model_calls=True, embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            await offered(task_queue, agent.name)
            result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == LONG_ANSWER
    [history] = await executions(client, str(result.run_id))
    assert local_steps(history)[-1] == policies.JOURNAL
    await replay_late(history)


async def test_a_codec_workers_run_with_local_model_calls_replays_with_its_answer_a_task_late(
    temporal_address: str, task_queue: str
) -> None:
    pytest.importorskip("cryptography")
    from agentor_temporal.codec import encrypted_data_converter, new_key, resolve_keys

    converter = encrypted_data_converter(resolve_keys(f"k1:{new_key()}"))
    coded = await Client.connect(temporal_address, data_converter=converter)
    with ScriptedModelServer(tool_then_answer) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=coded,
            embedded_worker=False,
            local_model_calls=True,
        )
        async with build_worker(coded, [agent], task_queue=task_queue):
            await offered(task_queue, agent.name)
            result = await agent.arun(PROMPT)
    assert result.status == "completed", result
    [history] = await executions(coded, str(result.run_id))
    assert local_steps(history)[-1] == policies.JOURNAL
    await replay_late(history, data_converter=converter)
    # marked in the run's first workflow task, before any local activity
    assert patches(history) == [policies.PATCH_RESULTS_UNKEPT]
    assert history.events[4].marker_recorded_event_attributes.marker_name == "core_patch"
