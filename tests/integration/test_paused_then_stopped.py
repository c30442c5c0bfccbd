"""A call paused in a worker that then stops (a deploy's SIGTERM) before the unpause.

A paused model request keeps running in its worker, and its answer was kept
there, in memory only, for the attempt after the unpause to take. The worker
stopped first (its graceful shutdown, as SIGTERM or a script's end does), the
answer went with it, and the unpause's attempt on the next worker asked the
model again: a second paid request for the turn. The stopping worker now waits
for its paused calls and hands their results to the server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import (
    ledger_lines,
    ledger_write,
    pause_call,
    scripted_agent,
    stop_process,
    unpause_call,
    until,
    wait_line,
    worker_cli,
)


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "running"])
async def test_a_paused_request_of_a_worker_that_stops_is_not_asked_again(
    finished: bool, client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Pause the model request; stop its worker once the answer came (or while it comes);
    unpause on another worker: one request, its answer the run's."""
    caplog.set_level(logging.WARNING, logger="temporalio.activity")
    with ScriptedModelServer() as model:
        model.set_script([Hang(4, Reply("It is sunny.")), Reply("asked again")])
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        run_id = uuid.uuid4().hex
        execution = WorkflowExecution(workflow_id=run_id)
        started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
        try:
            async with build_worker(client, [agent], task_queue=task_queue):
                await until(lambda: model.request_count, "the model request", timeout=60)
                asked = time.monotonic()
                await pause_call(client, execution, "generate-1")
                await until(
                    lambda: "produced by activity pause" in caplog.text,
                    "the worker to hear of the pause",
                    timeout=60,
                )
                if finished:
                    # the scripted model answers 4 s after it was asked
                    await until(lambda: time.monotonic() > asked + 5, "the answer", timeout=60)
            # that worker stopped; the next one takes the run
            async with build_worker(client, [agent], task_queue=task_queue):
                await unpause_call(client, execution, "generate-1", handed_over=True)
                result = await asyncio.wait_for(started, 60)
        finally:
            if not started.done():
                started.cancel()
        assert (model.request_count, result.final_output) == (1, "It is sunny.")


async def test_a_paused_tool_call_of_a_worker_that_stops_runs_once(
    client: Client, task_queue: str, ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Pause a tool call, let it finish, stop its worker, unpause on another: the tool ran
    once, and the run goes on from its result."""
    caplog.set_level(logging.WARNING, logger="temporalio.activity")
    release = asyncio.Event()

    @function_tool(name="get_weather")
    async def weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "start", city)
        await release.wait()
        ledger_write(ledger, "end", city)
        return f"The weather in {city} is sunny and 22C."

    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue, tools=[weather], embedded_worker=False)
        run_id = uuid.uuid4().hex
        execution = WorkflowExecution(workflow_id=run_id)
        started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
        try:
            async with build_worker(client, [agent], task_queue=task_queue):
                await until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
                await pause_call(client, execution, "tool-1-0")
                await until(
                    lambda: "produced by activity pause" in caplog.text,
                    "the worker to hear of the pause",
                    timeout=60,
                )
                release.set()
                await until(lambda: len(ledger_lines(ledger)) == 2, "the tool's end", timeout=60)
            async with build_worker(client, [agent], task_queue=task_queue):
                await unpause_call(client, execution, "tool-1-0", handed_over=True)
                result = await asyncio.wait_for(started, 60)
        finally:
            release.set()
            if not started.done():
                started.cancel()
    assert result.status == "completed", result.error
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["start", "end"]
    assert model.request_count == 2


@pytest.mark.slow
async def test_a_worker_sigtermed_with_a_paused_answer_hands_it_over(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """The real worker CLI, sent SIGTERM (a rolling deploy) while it keeps a paused request's
    answer: it exits 0 having handed the answer over; the run ends with it, asked once."""
    with ScriptedModelServer() as model:
        model.set_script([Hang(4, Reply("It is sunny.")), Reply("asked again")])
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
        }
        log = tmp_path / "worker.log"
        proc = worker_cli(env, log, "env_agent:agent")
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        run_id = uuid.uuid4().hex
        execution = WorkflowExecution(workflow_id=run_id)
        started: asyncio.Future[Any] | None = None
        try:
            await asyncio.to_thread(wait_line, proc, "worker ready")
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            await until(lambda: model.request_count, "the model request", timeout=60)
            asked = time.monotonic()
            await pause_call(client, execution, "generate-1")
            await until(
                lambda: "paused or reset" in log.read_text(),
                "the worker to hear of the pause",
                timeout=60,
            )
            await until(lambda: time.monotonic() > asked + 5, "the answer", timeout=60)
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 60)
        finally:
            stop_process(proc)
        assert code == 0
        assert started is not None
        try:
            # the operator unpauses on the next worker: the run went on from the answer
            async with build_worker(client, [agent], task_queue=task_queue):
                await unpause_call(client, execution, "generate-1", handed_over=True)
                result = await asyncio.wait_for(started, 60)
        finally:
            if not started.done():
                started.cancel()
    assert (model.request_count, result.final_output) == (1, "It is sunny.")
    assert "handed to the server" in log.read_text()
