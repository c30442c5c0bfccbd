"""A decision sent by signal under a request id the run cannot keep is said, not dropped in
silence.

`decide_signal` takes {"request_id": text of 1 to 64 characters, "decision": ...} and
keeps what each came to for its sender's `signalled_decision` query. One whose request id
was longer, or missing (a plain client sending the bare decision), was dropped with no
word: the call was not decided, nothing was logged or counted, and the sender's query
answered None ("not taken yet") for ever, so a client polling it waited for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowQueryFailedError

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import ledger_lines, scripted_agent, transfer_tool

LONG_ID = "req-" + "x" * 96
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED


async def test_a_decision_signalled_without_a_usable_request_id_is_said(
    client: Client, task_queue: str, ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    approve = {"call_id": "call_pay", "approved": True, "by": "plain"}
    script = [CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"), Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[transfer_tool(ledger)])
        paused = await asyncio.wait_for(agent.arun("Pay bob 5000."), 60)
        assert paused.status == "awaiting_approval", paused.error
        handle = client.get_workflow_handle(paused.run_id)
        async with agent._serving(client):
            await handle.signal("decide_signal", {"request_id": LONG_ID, "decision": approve})
            await handle.signal("decide_signal", approve)  # the bare decision
            state = await _state_after(handle, 2)
            # neither decided the call, and the run says it dropped them
            assert state["status"] == "awaiting_approval", state
            assert state["unreadable_signals"] == 2, state
            # the sender polling for its outcome is told, not answered None for ever
            with pytest.raises(WorkflowQueryFailedError, match="1 to 64 characters"):
                await handle.query("signalled_decision", LONG_ID)
            with pytest.raises(WorkflowQueryFailedError, match="1 to 64 characters"):
                await handle.query("signalled_decision", "")
        dropped = [r.getMessage() for r in caplog.records if "decide_signal" in r.getMessage()]
        assert any("request_id" in m for m in dropped), dropped
        assert not any(LONG_ID in m for m in dropped), dropped
        # a well-formed one still decides
        await handle.signal("decide_signal", {"request_id": "r1", "decision": approve})
        done = await asyncio.wait_for(agent.aresume(paused.run_id), 60)
    assert done.status == "completed" and done.final_output == "Paid.", done.error
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]


async def _state_after(handle: Any, signals: int, timeout: float = 60) -> dict[str, Any]:
    """The run's state once a workflow task has taken its first `signals` signals."""
    deadline = time.monotonic() + timeout
    while True:
        events = list((await handle.fetch_history()).events)
        signalled = [i for i, e in enumerate(events) if e.event_type == SIGNALED]
        if len(signalled) >= signals and any(
            e.event_type == TASK_COMPLETED for e in events[signalled[signals - 1] :]
        ):
            state: dict[str, Any] = await handle.query("state")
            return state
        assert time.monotonic() < deadline, f"no workflow task took {signals} signals"
        await asyncio.sleep(0.05)
