"""Text no UTF-8 encoder takes (a lone surrogate, JSON's "\\ud800") never fails our own code.

A provider's error message can hold one (its JSON escapes it), and so can a
person's reason for a denial: a Temporal failure message and a terminal are
strict UTF-8, so such text reaches them with U+FFFD in the surrogate's place,
never as an encoder's error in place of the run's own.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from agentor_temporal import FileStore
from agentor_temporal.testing import CallTool, Fail, Raw, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import scripted_agent, transfer_tool, weather_tool
from integration.test_cli import cli


async def test_a_providers_refusal_holding_a_lone_surrogate_fails_the_run_at_once(
    client: Client, task_queue: str
) -> None:
    """A 400 whose message holds a lone surrogate fails the run at once, saying it."""
    refusal = '{"error": {"message": "bad \\ud800 request", "type": "invalid_request_error"}}'
    # behind it, what a retry would be answered: the run must not get there
    script = [Raw(refusal, status=400), Fail(400, "bad \ud800 again"), Reply("retried")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[weather_tool()])
        result = await agent.arun("go", run_id=uuid.uuid4().hex)
    # before: the failure could not be encoded ('Failed building exception result:
    # ... surrogates not allowed'), which Temporal retries: 3 requests, the run completed
    assert model.request_count == 1
    assert result.status == "failed", result
    assert result.error == "Model request failed with 400: bad \ufffd request", result.error


async def test_a_denial_holding_a_lone_surrogate_is_recorded_as_the_mirror_has_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A reason holding a lone surrogate is recorded with U+FFFD, in history as in the JSONL."""
    script = [[CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay")], Reply("done")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool()], store=FileStore(tmp_path)
        )
        run_id = uuid.uuid4().hex
        paused = await agent.arun("pay bob", run_id=run_id)
        assert paused.status == "awaiting_approval", paused
        await agent.adeny(run_id, paused.pending_approvals[0], reason="no \ud800 way", by="b\udcff")
        result = await agent.aresume(run_id)
    assert result.status == "completed", result
    recorded = [e for e in result.events if e.type == "approval_decision"]
    mirrored = [e for e in FileStore(tmp_path).load(run_id) if e.type == "approval_decision"]
    # before: the result (and TemporalStore) read 'no \ud800 way', the JSONL 'no \ufffd way'
    assert [(e.text, e.result) for e in recorded] == [("no \ufffd way", "b\ufffd")]
    assert [(e.text, e.result) for e in mirrored] == [("no \ufffd way", "b\ufffd")]


async def test_show_prints_a_run_holding_a_lone_surrogate(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """`show` prints a run a plain client started with a lone surrogate, shown escaped (as
    every character that could act on a terminal: `_terminal.terminal_text`)."""
    with ScriptedModelServer([Reply("done")]) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = uuid.uuid4().hex
        # a plain client's start: nothing on its way made the text encodable
        await client.start_workflow(
            "AgentRun",
            {"agent": "Weather Agent", "input": "London \ud800 please"},
            id=run_id,
            task_queue=task_queue,
        )
        assert (await agent.aresume(run_id)).status == "completed"
    shown = cli("show", run_id, "--temporal", temporal_address)
    # before: exit 1, "UnicodeEncodeError: 'utf-8' codec can't encode character '\ud800'"
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    assert "London \\ud800 please" in shown.stdout


async def test_a_second_decision_on_a_call_decided_by_a_lone_surrogate_is_refused_clearly(
    client: Client, task_queue: str
) -> None:
    """A call decided 'by' a name holding a lone surrogate (a plain client's update) refuses
    a second decision saying so, and the run takes its next decision and ends."""
    script = [
        [
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
            CallTool("transfer", {"amount": 6, "to": "bob"}, id="call_two"),
        ],
        Reply("done"),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool()], embedded_worker=False
        )
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):  # type: ignore[list-item]
            assert (await agent.arun("pay bob", run_id=run_id)).status == "awaiting_approval"
            handle = client.get_workflow_handle(run_id)
            # a plain client's update: nothing on its way made the text encodable
            first = {"call_id": "call_pay", "approved": False, "by": "b\udcff"}
            await asyncio.wait_for(handle.execute_update("decide", first), 30)
            again = {"call_id": "call_pay", "approved": True}
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await asyncio.wait_for(handle.execute_update("decide", again), 30)
            # before: the refusal could not be encoded, and the caller read only
            # 'Failure error' (the worker logged 'Task exception was never retrieved')
            # named as a string literal (formatting.printable): a surrogate is not printable
            assert "was already denied by 'b\\udcff'" in str(refused.value.cause), refused.value
            last = {"call_id": "call_two", "approved": False}
            await asyncio.wait_for(handle.execute_update("decide", last), 30)
            result = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert result.status == "completed", result
