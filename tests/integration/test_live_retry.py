"""A live worker's call is not made twice, even when its event loop is blocked.

A tool blocks the worker's event loop for longer than its heartbeat timeout.
Heartbeats go out from a thread, so the server never gives up on the call.
And when it does (the loop blocked past `STALLED_LOOP_LIMIT`, taken for
hung), the retry it schedules joins the attempt still running in the live
worker: either way the tool runs once and the model is asked only what the
run needs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError

from agentor_temporal import function_tool
from agentor_temporal.activities import _ended
from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.policies import TOOL_HEARTBEAT_TIMEOUT

from helpers import PROMPT, ledger_lines, scripted_agent, spawn, stop_process, wait_line

pytestmark = pytest.mark.slow


async def test_a_blocked_event_loop_does_not_stop_the_heartbeats(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """Loop blocked past the heartbeat timeout: no retry at all, the tool runs once."""
    history, runs = await _run_with_a_blocking_tool(client, model, task_queue)
    attempts = _attempts(history)
    assert attempts and max(attempts) == 1, f"the server retried a live call: {attempts}"
    assert len(runs) == 1
    assert model.request_count == 2


async def test_a_retry_of_a_live_tool_call_joins_it(
    client: Client, model: ScriptedModelServer, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timed out on heartbeat while live: the tool runs once, the run completes, 2 model calls."""
    # the blocked loop counts as hung: its call stops beating and is retried
    monkeypatch.setattr(policies, "STALLED_LOOP_LIMIT", timedelta(seconds=0.5))
    history, runs = await _run_with_a_blocking_tool(client, model, task_queue)
    assert max(_attempts(history)) >= 2, (
        "the server did not retry the tool: the test proved nothing"
    )
    assert len(runs) == 1
    assert model.request_count == 2


async def test_a_frozen_worker_s_streamed_request_is_joined_by_its_retry(
    client: Client, temporal_address: str, task_queue: str, ledger: str, tmp_path: Any
) -> None:
    """A worker frozen mid streamed model request (SIGSTOP: a paused VM, a long GC pause)
    past its heartbeat timeout, then thawed: the server's retry joins the request the
    worker still holds, one paid request, the tool asked once, the text streamed once.

    A streamed request (`stream_text`, serve's page, `stream_chat(stream_text=True)`)
    never joined: its retry asked the model again, the first answer paid and dropped
    (and a scripted model's next step answered in its place).
    """
    freeze = policies.MODEL_HEARTBEAT_TIMEOUT.total_seconds() + 1
    script = [Hang(1.5, CallTool("get_weather", {"city": "London"})), Reply("Done: sunny")]
    with ScriptedModelServer(script) as model:
        with (tmp_path / "worker.err").open("w+") as err:
            worker = spawn(
                ["worker"],
                {
                    "TEMPORAL_ADDRESS": temporal_address,
                    "AGENT_TASK_QUEUE": task_queue,
                    "MODEL_BASE_URL": model.base_url,
                    "AGENT_LEDGER": ledger,
                },
                stderr=err,
            )
            try:
                await asyncio.to_thread(wait_line, worker, "worker ready")
                agent = scripted_agent(model, client, task_queue, embedded_worker=False)
                run_id = f"frozen-{uuid.uuid4().hex[:8]}"
                followed = asyncio.ensure_future(
                    _collect(agent.stream_chat(PROMPT, run_id=run_id, stream_text=True))
                )

                async def asked() -> bool:
                    return model.request_count == 1

                await _eventually(asked, "the first model request")
                os.kill(worker.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(freeze)  # the frozen worker's time: nothing to wait on
                finally:
                    os.kill(worker.pid, signal.SIGCONT)
                events = await asyncio.wait_for(followed, 60)
            finally:
                stop_process(worker)
            err.seek(0)
            logged = err.read()
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert max(_attempts(history)) >= 2, "the server did not retry: the test proved nothing"
    assert events[-1].type == "run_end" and events[-1].status == "completed", events[-4:]
    assert model.request_count == 2, f"a streamed request was sent again: {logged[-3000:]}"
    assert len(ledger_lines(ledger)) == 1
    # one stream: no retry marker voiding the text streamed so far
    assert not [e for e in events if e.type == "error"], events
    # the attempt the server gave up on ends quietly (it was a CancelledError's traceback)
    assert "Traceback" not in logged, logged[-3000:]


@pytest.mark.parametrize("answer_after", [1.5, 10.0], ids=["in_the_freeze", "after_it"])
async def test_a_frozen_worker_s_local_request_is_joined_by_its_rerun_task(
    answer_after: float,
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Any,
) -> None:
    """A worker frozen mid local model request (`local_model_calls`) past the workflow task
    timeout, then thawed: the task the server runs again asks under the same key, as a
    first attempt, and joins the request the worker holds, answered in the freeze or
    still answering after it: one paid request, its tool run once.

    The rerun task asked the model again: the first answer paid and dropped (and a
    scripted model's next step, the final answer, came in its place: the tool never ran).
    """
    freeze = policies.WORKFLOW_TASK_TIMEOUT.total_seconds() + 3
    script = [Hang(answer_after, CallTool("get_weather", {"city": "London"})), Reply("Done")]
    with ScriptedModelServer(script) as model:
        worker = spawn(
            ["worker"],
            {
                "TEMPORAL_ADDRESS": temporal_address,
                "AGENT_TASK_QUEUE": task_queue,
                "MODEL_BASE_URL": model.base_url,
                "AGENT_LEDGER": ledger,
                "LOCAL_MODEL_CALLS": "1",
            },
            stderr=subprocess.DEVNULL,
        )
        try:
            await asyncio.to_thread(wait_line, worker, "worker ready")
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            run_id = f"frozen-local-{uuid.uuid4().hex[:8]}"
            running = asyncio.ensure_future(agent.arun(PROMPT, run_id=run_id))

            async def asked() -> bool:
                return model.request_count == 1

            await _eventually(asked, "the first model request")
            os.kill(worker.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(freeze)  # the frozen worker's time: nothing to wait on
            finally:
                os.kill(worker.pid, signal.SIGCONT)
            result = await asyncio.wait_for(running, 60)
        finally:
            stop_process(worker)
    history = await client.get_workflow_handle(run_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT in kinds, "no task lost: proved nothing"
    assert result.status == "completed", result.error
    assert len(ledger_lines(ledger)) == 1, "the first answer was dropped"
    assert model.request_count == 2, "the rerun task asked the model again"


async def _collect(events: Any) -> list[Any]:
    return [e async for e in events]


def _attempts(history: WorkflowHistory) -> list[int]:
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]


async def _run_with_a_blocking_tool(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> tuple[WorkflowHistory, list[float]]:
    """The seed's run, its tool blocking the worker's event loop past its heartbeat timeout."""
    runs: list[float] = []

    @function_tool
    async def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        runs.append(time.time())
        # the event loop blocked for longer than the heartbeat timeout
        time.sleep(TOOL_HEARTBEAT_TIMEOUT.total_seconds() + 1.5)
        return f"The weather in {city} is sunny and 22C."

    agent = _served_agent(get_weather, client, model, task_queue)
    run_id = f"live-retry-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, [agent], task_queue=task_queue):
        result = await agent.arun(PROMPT, run_id=run_id)
    assert result.status == "completed", result.error
    return await client.get_workflow_handle(run_id).fetch_history(), runs


async def test_a_call_of_a_terminated_run_stops(
    client: Client, model: ScriptedModelServer, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terminated mid-tool, and no resume joins it within ENDED_GRACE: the tool's body is
    cancelled, not left running for nobody."""
    monkeypatch.setattr(_ended, "ENDED_GRACE", 1.0)
    progress: list[str] = []

    @function_tool
    async def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        progress.append("started")
        try:
            for _ in range(120):
                await asyncio.sleep(0.25)
        except asyncio.CancelledError:
            progress.append("cancelled")
            raise
        progress.append("finished")
        return f"The weather in {city} is sunny and 22C."

    agent = _served_agent(get_weather, client, model, task_queue)
    run_id = f"terminated-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, [agent], task_queue=task_queue):
        running = asyncio.ensure_future(agent.arun(PROMPT, run_id=run_id))
        try:
            handle = client.get_workflow_handle(run_id)

            async def beating() -> bool:
                try:
                    pending = (await handle.describe()).raw_description.pending_activities
                except RPCError:  # not started yet
                    return False
                return any(p.HasField("last_heartbeat_time") for p in pending)

            # the call has beaten: the server knows it live when the run ends
            await _eventually(beating, "the tool's first heartbeat")
            await handle.terminate("test: the run is over")

            async def cancelled() -> bool:
                return "cancelled" in progress

            await _eventually(cancelled, "the tool to be cancelled", 20)
        finally:
            running.cancel()
    assert progress == ["started", "cancelled"]


async def _eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0
) -> None:
    """Wait (without blocking the loop the worker runs on) until `check` holds."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _served_agent(tool: Any, client: Client, model: ScriptedModelServer, task_queue: str) -> Any:
    """The seed's agent with `tool`, served by a worker the test runs (not an embedded one)."""
    return scripted_agent(model, client, task_queue, tools=[tool], embedded_worker=False)
