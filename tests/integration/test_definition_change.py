"""An agent built differently under the same name never takes over a run.

The run records its agent's spec (and fingerprint) at the start of each
segment, and every task it schedules carries the fingerprint. A worker whose
agent of that name differs (instructions, tools, model) refuses the task,
naming what differs, and leaves it for a worker with the run's definition;
if none comes within DEFINITION_PATIENCE, the run fails with that message.
Definitions are never mixed. A segment whose starter expects another
definition than the worker's fails at its start, before anything runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal import Agentor, TemporalStore
from agentor_temporal.streaming import RunFailedError
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import failure_message
from agentor_temporal.workflows.tool_calls import CALL_FAILED

from helpers import ledger_lines, transfer_tool, weather_or_transfer, weather_tool

pytestmark = pytest.mark.slow


def banker(
    server: ScriptedModelServer, queue: str, client: Client, ledger: str, **kw: Any
) -> Agentor:
    options: dict[str, Any] = {
        "name": "Banker",
        "model": "m",
        "instructions": "Move money carefully.",
        "tools": [transfer_tool(ledger), weather_tool(ledger)],
        "base_url": server.base_url,
        "api_key": "k",
        "temporal": client,
        "task_queue": queue,
        "embedded_worker": False,
    }
    options.update(kw)
    return Agentor(**options)


async def pending_failure(client: Client, run_id: str) -> str | None:
    desc = await client.get_workflow_handle(run_id).describe()
    for act in desc.raw_description.pending_activities:
        if act.last_failure.message:
            return str(act.last_failure.message)
    return None


async def test_a_changed_worker_leaves_the_run_to_one_built_as_it_was(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Any
) -> None:
    old_ledger, new_ledger = str(tmp_path / "old.txt"), str(tmp_path / "new.txt")
    with ScriptedModelServer(weather_or_transfer) as model:
        old = banker(model, task_queue, client, old_ledger)
        new = banker(
            model,
            task_queue,
            client,
            new_ledger,
            instructions="Move money fast.",
            tools=[transfer_tool(new_ledger)],
        )
        old_client = await Client.connect(temporal_address)
        async with build_worker(old_client, [old], task_queue=task_queue):
            paused = await old.arun("Send 5 to bob", run_id=uuid.uuid4().hex)
        assert paused.status == "awaiting_approval"
        new_client = await Client.connect(temporal_address)
        async with build_worker(new_client, [new], task_queue=task_queue):
            await old.aapprove(paused.run_id, paused.pending_approvals[0].call_id)

            async def refused() -> str | None:
                return await pending_failure(client, paused.run_id)

            message = None
            deadline = time.monotonic() + 30
            while message is None:
                assert time.monotonic() < deadline, "the changed worker did not refuse the call"
                message = await refused()
                await asyncio.sleep(0.1)
            assert "built differently" in message
            assert "instructions differ" in message and "tools missing here: get_weather" in message
            assert ledger_lines(new_ledger) == []
            # a worker built as the run was comes back: it takes the call
            async with build_worker(old_client, [old], task_queue=task_queue):
                done = await asyncio.wait_for(old.aresume(paused.run_id), 60)
    assert done.status == "completed", done.error
    assert len(ledger_lines(old_ledger)) == 1 and ledger_lines(new_ledger) == []


async def test_with_no_worker_built_as_the_run_it_fails_naming_what_differs(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(policies, "DEFINITION_PATIENCE", timedelta(seconds=3))
    caplog.set_level(logging.WARNING)
    old_ledger, new_ledger = str(tmp_path / "old.txt"), str(tmp_path / "new.txt")
    with ScriptedModelServer(weather_or_transfer) as model:
        old = banker(model, task_queue, client, old_ledger)
        new = banker(model, task_queue, client, new_ledger, model="other-model")
        old_client = await Client.connect(temporal_address)
        async with build_worker(old_client, [old], task_queue=task_queue):
            paused = await old.arun("Send 5 to bob", run_id=uuid.uuid4().hex)
        async with build_worker(client, [new], task_queue=task_queue):
            await old.aapprove(paused.run_id, paused.pending_approvals[0].call_id)
            outcome = await asyncio.wait_for(client.get_workflow_handle(paused.run_id).result(), 60)
    assert outcome["status"] == "failed"
    error = outcome["error"]
    assert "built differently" in error and "model 'm' vs 'other-model'" in error
    assert "the run stops rather than mix definitions" in error
    assert "or go on with the new build in a new run that copies this one: fork(run_id)" in error
    assert ledger_lines(old_ledger) == [] and ledger_lines(new_ledger) == []
    events = await TemporalStore(client).aload(paused.run_id)
    assert events[-1].type == "run_end" and events[-1].error == error
    # each refused attempt is expected: one warning for the run, one traceback at the end
    refusals = [r for r in caplog.records if "Completing activity as failed" in r.getMessage()]
    assert len(refusals) <= 1, [r.getMessage() for r in refusals]


async def _start(agent: Agentor, client: Client, how: str, prompt: str) -> tuple[str, str | None]:
    """Start a run the way `how` names and wait for it: its status and error."""
    if how == "run":
        result = await agent.arun(prompt)
        return result.status, result.error
    if how == "start":  # what the HTTP routes and A2A start runs with
        run_id = await agent.astart(prompt)
        try:
            outcome = await client.get_workflow_handle(run_id).result()
        except WorkflowFailureError as exc:  # a run refused at its start fails its workflow
            return "failed", failure_message(exc)
        return outcome["status"], outcome["error"]
    try:
        events = [event async for event in agent.stream_chat(prompt)]
    except RunFailedError as exc:  # the workflow failed with no run_end to stream
        return "failed", str(exc)
    return events[-1].status or "", events[-1].error


@pytest.mark.parametrize("how", ["run", "start", "stream"])
async def test_a_segment_started_for_another_definition_fails_at_its_start(
    how: str, client: Client, task_queue: str, tmp_path: Any
) -> None:
    """The starter's agent differs from the only worker's: the run fails before any step."""
    old_ledger, new_ledger = str(tmp_path / "old.txt"), str(tmp_path / "new.txt")
    with ScriptedModelServer(weather_or_transfer) as model:
        old = banker(model, task_queue, client, old_ledger)
        new = banker(model, task_queue, client, new_ledger, instructions="Something else.")
        async with build_worker(client, [new], task_queue=task_queue):
            prompt = "What is the weather in Oslo?"
            status, error = await asyncio.wait_for(_start(old, client, how, prompt), 30)
        requests = model.request_count
    assert status == "failed" and error is not None
    assert "built differently" in error and "fork(run_id)" in error
    assert requests == 0 and ledger_lines(new_ledger) == []


def pay_and_look(request: dict[str, Any]) -> Any:
    """A model asking for a transfer (needs approval) and the weather in one turn, until it
    has their answers."""
    messages = request.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return Reply("Looked it up; the transfer could not be made.")
    return [
        CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
        CallTool("get_weather", {"city": "Paris"}, id="call_wx"),
    ]


async def test_a_call_that_finds_no_worker_built_as_the_run_keeps_its_finished_siblings(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run ended by a call no worker could run (CallFailed) records the results of the calls
    beside it that finished, so resume runs none of them again."""
    monkeypatch.setattr(policies, "DEFINITION_PATIENCE", timedelta(seconds=3))
    old_ledger, new_ledger = str(tmp_path / "old.txt"), str(tmp_path / "new.txt")
    with ScriptedModelServer(pay_and_look) as model:
        old = banker(model, task_queue, client, old_ledger)
        new = banker(model, task_queue, client, new_ledger, model="other-model")
        old_client = await Client.connect(temporal_address)
        async with build_worker(old_client, [old], task_queue=task_queue):
            paused = await old.arun("Pay bob 5 and look up Paris", run_id=uuid.uuid4().hex)
        assert paused.status == "awaiting_approval", paused.error
        assert [line.split()[0] for line in ledger_lines(old_ledger)] == ["get_weather"]
        async with build_worker(client, [new], task_queue=task_queue):
            await old.aapprove(paused.run_id, "call_pay")
            outcome = await asyncio.wait_for(client.get_workflow_handle(paused.run_id).result(), 60)
        assert outcome["status"] == "failed" and "built differently" in outcome["error"]
        events = await TemporalStore(client).aload(paused.run_id)
        answers = {e.call_id: e.error for e in events if e.type == "tool_result"}
        assert answers == {"call_pay": CALL_FAILED, "call_wx": None}, answers
        assert events[-1].type == "run_end" and events[-1].error == outcome["error"]
        async with build_worker(old_client, [old], task_queue=task_queue):
            resumed = await asyncio.wait_for(old.aresume(paused.run_id), 60)
    assert resumed.status == "completed", resumed.error
    assert [line.split()[0] for line in ledger_lines(old_ledger)] == ["get_weather"]
    assert ledger_lines(new_ledger) == []
