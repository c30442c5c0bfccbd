"""A person's approval that reaches a run in the workflow task its cancel does.

Temporal hands a workflow task's signals and updates to the run before its
cancel, so an approval sent while no worker serves the run (a deploy) after
someone cancelled it, or sent at the moment of the cancel, is taken: the
person is told so and the run records it, then stops before the call starts.
That turn is still one none of whose calls started, and resume goes on from
its answer, as README's Recovery table says (the model is not asked again),
the approved call asking a person again. Before, the recorded approval made
resume rewind the turn: the model was asked again (a second paid request),
and the call the person was told was approved was dropped unsaid.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal import TemporalStore
from agentor_temporal._runs import decide_by_signal
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import Decision

from helpers import history_shows, ledger_lines, scripted_agent, transfer_tool


async def test_an_approval_taken_with_the_cancel_is_gone_on_from_by_resume(
    client: Client, task_queue: str, ledger: str
) -> None:
    script = [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
        Reply("Done."),
    ]
    with ScriptedModelServer(script) as model:
        agent: Any = scripted_agent(
            model, client, task_queue, tools=[transfer_tool(ledger)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 5000."), 60)
        assert paused.status == "awaiting_approval"
        run_id = paused.run_id
        handle = client.get_workflow_handle(run_id)
        # no worker serves the run: the cancel is in history before the decision is sent
        await handle.cancel()
        await history_shows(
            client, run_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
        )
        # sent by signal (as when Temporal takes no more updates): in history at once
        decision = Decision("call_pay", True, "checked", "alice", 1, time.time())
        deciding = asyncio.ensure_future(decide_by_signal(client, run_id, decision))
        await history_shows(client, run_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
        async with build_worker(client, [agent], task_queue=task_queue):
            told = await asyncio.wait_for(deciding, 120)
            assert told["approved"] is True  # taken, and said so
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 60)
            cancelled = await TemporalStore(client).aload(run_id)
            taken = next(e for e in cancelled if e.type == "approval_decision")
            assert (taken.status, taken.result) == ("approved", "alice")
            # stopped before the approved call started
            assert not any(e.type == "tool_result" for e in cancelled)
            assert ledger_lines(ledger) == []
            assert model.request_count == 1

            resumed = await asyncio.wait_for(agent.aresume(run_id), 60)
            # the model is not asked again (the fix): the approved call, never run, asks again
            assert model.request_count == 1
            assert resumed.status == "awaiting_approval", resumed.status
            assert [p.call_id for p in resumed.pending_approvals] == ["call_pay"]
            await asyncio.wait_for(agent.aapprove(run_id, resumed.pending_approvals[0]), 120)
            done = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert done.status == "completed", done.error
    assert done.final_output == "Done."
    # one request for the turn's answer, one after its result
    assert model.request_count == 2
    answers = [m for m in model.requests[-1]["messages"] if m.get("role") == "tool"]
    assert [a["tool_call_id"] for a in answers] == ["call_pay"]
    assert "Sent 5000" in str(answers[0]["content"])
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
