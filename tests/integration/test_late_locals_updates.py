"""Known limit: a local result handed over a task late, after that task's updates, breaks replay.

A local activity's result can reach the workflow a task after the one that
recorded its marker (`late_results`): seen when queries came as the task
completed. If that later task also brought signals or updates, the SDK runs
their handlers first (an update is accepted: a WorkflowExecutionUpdateAccepted
event), then hands the result over, and the commands the run's code issues
right after the local activity (a search attribute upsert, the next local
activity) follow the acceptance in history. A replay hands the result over
in the task that recorded the marker, before the next task's updates are
delivered, so it issues those commands first, where history holds the
acceptance: TMPRL1100 ("UpsertWorkflowSearchAttributesMachine does not handle
WorkflowExecutionUpdateAccepted", or "Missing associated machine for
LocalActivity"), on every replay of the run (a query of a run not in cache,
a worker restarted). The order is the SDK's and Core's (Core resolves a
replayed local activity from its marker in the recording task); the run's
code sees the same thing at that point in a live run whose result was on
time and in a replay of a late one, so it cannot issue its commands
differently in the two. See README, "Local model calls".

`LateLocals` makes the lateness real: a worker interceptor holds every local
activity's result, live only, until the next workflow task, while the test
sends the run a signal and a `wait_paused` update every 0.3 s. The run itself
completes; replaying its history fails. Skipped until the SDK orders such a
task alike live and in replay (measured failing on 53014d1, 4 runs of 4, and as
much with `local_model_calls` off: a journal step or approval predicate is late then).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from late_results import executions, replayer
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import (
    Interceptor,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import PROMPT, scripted_agent, transfer_tool
from integration.test_step_savings import offered

pytestmark = pytest.mark.skip(
    reason="known limit: the SDK hands a late local result over after its task's updates "
    "live and before them in a replay (README, Local model calls)"
)


class _LateOutbound(WorkflowOutboundInterceptor):
    def start_local_activity(self, input: StartLocalActivityInput) -> Any:
        handle = super().start_local_activity(input)
        if workflow.unsafe.is_replaying():
            return handle

        async def next_task() -> Any:
            try:
                return await handle
            finally:
                at = workflow.info().get_current_history_length()
                await workflow.wait_condition(
                    lambda: workflow.info().get_current_history_length() > at
                )

        return asyncio.ensure_future(next_task())


class _LateInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_LateOutbound(outbound))


class LateLocals(Interceptor):
    """Every local activity's result reaches the run live a workflow task late."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _LateInbound


async def _poke(client: Client, run_id: str, stop: asyncio.Event) -> None:
    """A signal and a `wait_paused` update every 0.3 s: each held result's task takes some."""
    handle = client.get_workflow_handle(run_id)
    waits: list[asyncio.Future[Any]] = []
    while not stop.is_set():
        try:
            waits.append(asyncio.ensure_future(handle.execute_update("wait_paused")))
            await asyncio.sleep(0.05)
            await handle.signal("nudge", "x")
        except Exception:
            pass  # not started yet, or closed
        await asyncio.sleep(0.3)
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)


async def test_a_local_result_late_after_updates_replays(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    run_id = f"late-locals-{uuid.uuid4().hex[:8]}"
    with ScriptedModelServer(
        [CallTool("transfer", {"amount": 50, "to": "bob"}), Reply("Done.")]
    ) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[transfer_tool(str(tmp_path / "ledger"), threshold=10)],
            local_model_calls=True,
            embedded_worker=False,
        )
        async with build_worker(
            client, [agent], task_queue=task_queue, interceptors=[LateLocals()]
        ):
            await offered(task_queue, agent.name)
            stop = asyncio.Event()
            poke = asyncio.ensure_future(_poke(client, run_id, stop))
            try:
                result = await asyncio.wait_for(agent.arun(PROMPT, run_id=run_id), 120)
                if result.status == "awaiting_approval":
                    await agent.aapprove(run_id, result.pending_approvals[0])
                    result = await asyncio.wait_for(agent.aresume(run_id), 120)
            finally:
                stop.set()
                await poke
    assert result.status == "completed" and result.final_output == "Done.", result
    for history in await executions(client, run_id):
        replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
