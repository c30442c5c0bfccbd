"""A tool call paused (`temporal activity pause`) whose run is then terminated or cancelled.

The paused call keeps running in its worker for the attempt after the unpause to
join. When no unpause can come (the run was terminated, or cancelled), it ran on
for ever: `resume` then ran the tool again beside it, two executions of the same
call at once, and the first's work went on after its run had ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.activities import _joining
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, pause_call, scripted_agent, until


@pytest.mark.parametrize("paused", [True, False], ids=["paused", "running"])
@pytest.mark.parametrize("end", ["terminate", "cancel"])
async def test_a_call_of_a_run_that_ended_is_stopped_before_the_resume_runs_one(
    client: Client,
    task_queue: str,
    ledger: str,
    end: str,
    paused: bool,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End the run of a running tool call (paused first, or not): the call is stopped, and
    a resume at once never has two calls of the tool running. (The model's answer is
    forgotten past KEEP: the resume asks again and gets another call id, so its call
    cannot join the ended one.)"""
    monkeypatch.setattr(_joining, "KEEP", 0.3)
    caplog.set_level(logging.WARNING, logger="temporalio.activity")
    running = 0
    most = 0
    calls = 0

    @function_tool(name="get_weather")
    async def weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        nonlocal running, most, calls
        calls += 1
        running += 1
        most = max(most, running)
        ledger_write(ledger, "start", city)
        try:
            for _ in range(400 if calls == 1 else 0):  # the first runs 8 s, unless stopped
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            ledger_write(ledger, "stopped", city)
            raise
        finally:
            running -= 1
        ledger_write(ledger, "end", city)
        return f"The weather in {city} is sunny and 22C."

    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue, tools=[weather], embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
            began = time.monotonic()
            await until(lambda: time.monotonic() > began + 1.5, "the answer to be forgotten")
            if paused:
                await pause_call(client, WorkflowExecution(workflow_id=run_id), "tool-1-0")
                await until(
                    lambda: "produced by activity pause" in caplog.text,
                    "the worker to hear of the pause",
                    timeout=30,
                )
            handle = client.get_workflow_handle(run_id)
            if end == "terminate":
                await handle.terminate("test")
            else:
                await handle.cancel()
            ended = await asyncio.wait_for(started, 30)
            assert ended.status != "completed"
            result = await agent.aresume(run_id)
            assert result.status == "completed", result.error
            lines = ledger_lines(ledger)
        assert most == 1, lines
        assert [line.split()[0] for line in lines].count("stopped") == 1, lines
        assert model.request_count == 3
