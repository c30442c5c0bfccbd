"""A run whose model answer reached it a task late continues as new as its replays do.

A local activity's result can reach the workflow a task after the one that
recorded its marker (`late_results`); a replay hands it over in that one.
With `local_model_calls`, a turn whose calls ran no activity (a tool the
model made up) reads the history for its continue-as-new right after the
model's answer: live, a later task's figures (more events) than a replay's.
A budget in that gap continued the run as new live and not in a replay, so
every replay of it failed (TMPRL1100): each query of the run, any worker
without it cached. From behaviour level 24 the figures read in a local
activity's result task are its start task's (`steady.reading`).

`LateAnswer` makes the lateness real: a worker interceptor holds the first
model answer, live only, until the next workflow task (a signal the test
sends once the answer's marker is in history), as the SDK did when a query
came as the task completed; a replay, without it, hands the answer over in
the task that recorded it, as replays do.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from late_results import executions
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartLocalActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from agentor_temporal import AgentorPlugin
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import PROMPT, scripted_agent
from integration.test_step_savings import local_steps, offered


class _LateOutbound(WorkflowOutboundInterceptor):
    def start_local_activity(self, input: StartLocalActivityInput) -> Any:
        handle = super().start_local_activity(input)
        if input.activity != policies.GENERATE or workflow.unsafe.is_replaying():
            return handle
        run = workflow.instance()
        if getattr(run, "held_once", False) or workflow.info().continued_run_id is not None:
            return handle  # the run's first answer only, in its first execution
        run.held_once = True  # type: ignore[attr-defined]

        async def next_task() -> Any:
            result = await handle
            at = workflow.info().get_current_history_length()
            await workflow.wait_condition(lambda: workflow.info().get_current_history_length() > at)
            return result

        return asyncio.ensure_future(next_task())


class _LateInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_LateOutbound(outbound))


class LateAnswer(Interceptor):
    """The run's first local model answer reaches it live a workflow task late."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _LateInbound


async def _nudge_after_answer(client: Client, run_id: str) -> None:
    """Signal the run once its first model answer's marker is in history (a new task)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            history = await client.get_workflow_handle(run_id).fetch_history()
        except Exception:
            history = None
        if history is not None and policies.GENERATE in local_steps(history):
            await client.get_workflow_handle(run_id).signal("nudge", "next task")
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the run's first model answer never reached its history")


async def test_a_continue_as_new_after_a_late_local_answer_replays(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the run's whole first execution fits one workflow task (3 events) had its
    # answer come in time; it came a task later, past 3 events, live
    monkeypatch.setattr(policies, "HISTORY_EVENTS_BUDGET", 3)
    run_id = f"late-continue-{uuid.uuid4().hex[:8]}"
    with ScriptedModelServer([CallTool("no_such_tool", {}), Reply("Done.")]) as model:
        agent = scripted_agent(
            model, client, task_queue, store=None, local_model_calls=True, embedded_worker=False
        )
        async with build_worker(
            client, [agent], task_queue=task_queue, interceptors=[LateAnswer()]
        ):
            await offered(task_queue, agent.name)
            nudge = asyncio.ensure_future(_nudge_after_answer(client, run_id))
            result = await asyncio.wait_for(agent.arun(PROMPT, run_id=run_id), 120)
            await nudge
    assert result.status == "completed" and result.final_output == "Done.", result
    histories = await executions(client, run_id)
    first = histories[0]
    assert any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in first.events
    )
    for history in histories:
        replayer = Replayer(
            workflows=[],
            plugins=[AgentorPlugin()],
            unsandboxed_workflow_runner=UnsandboxedWorkflowRunner(),
            debug_mode=True,
        )
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
