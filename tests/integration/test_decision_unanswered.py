"""A decision sent by signal whose run closes, and whose worker cannot answer what it came to.

`decide_by_signal` asks the run (`signalled_decision`) what the decision came
to. A closed execution is answered by replaying its history, the same each
time: when that fails (a replay that diverged, as a local activity's result
handed over a task late made some do), it fails every time. The sender waited
`DECISION_PATIENCE` (60 s) and was told no worker took the decision, though
the run had taken it and gone on to close. Now the sender is told at once that
the execution closed, what the worker answered, and how its history says the
call was decided.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import (
    HandleQueryInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from agentor_temporal._runs import decide_by_signal
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import Decision, policies

from helpers import scripted_agent, transfer_tool
from integration.test_step_savings import offered

PATIENCE = 60.0


class _Unanswerable(WorkflowInboundInterceptor):
    async def handle_query(self, input: HandleQueryInput) -> Any:
        if input.query == "signalled_decision":
            # as a replay that diverges fails it: the worker's answer is a failure
            raise RuntimeError("[TMPRL1100] Nondeterminism error: replay diverged")
        return await super().handle_query(input)


class UnanswerableDecisions(Interceptor):
    """A worker that cannot answer what a signalled decision came to."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Unanswerable


async def test_a_closed_run_that_cannot_answer_says_so_at_once(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(policies, "DECISION_PATIENCE", timedelta(seconds=PATIENCE))
    script = [CallTool("transfer", {"amount": 50, "to": "bob"}, id="call_bob"), Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool()], embedded_worker=False
        )
        async with build_worker(
            client, [agent], task_queue=task_queue, interceptors=[UnanswerableDecisions()]
        ):
            await offered(task_queue, agent.name)
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval", paused
            began = time.monotonic()
            with pytest.raises(ValueError) as caught:
                await decide_by_signal(
                    client, str(paused.run_id), Decision("call_bob", True, "fine", "carol")
                )
            took = time.monotonic() - began
    said = str(caught.value)
    assert "has closed (completed)" in said, said
    assert "replay diverged" in said, said
    assert "call 'call_bob' was already approved by carol" in said, said
    # not after the whole patience (before: TimeoutError, 'No worker took the decision')
    assert took < PATIENCE / 2, took
