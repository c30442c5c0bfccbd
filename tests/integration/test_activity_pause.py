"""A tool call paused from the CLI or API (`temporal activity pause`), then unpaused, runs once.

The server tells the worker of the pause through the heartbeat's answer, and
the SDK cancels the attempt. The call was cancelled with it, and the attempt
after the unpause ran the tool again: its side effect twice, under the same
idempotency key, on the same live worker. The call now keeps running, and the
attempt after the unpause (a first attempt again when the unpause resets the
attempts) joins it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import (
    ResetActivityRequest,
)
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, pause_call, scripted_agent, unpause_call, until


@pytest.mark.parametrize("sync", [False, True], ids=["async_tool", "sync_tool"])
@pytest.mark.parametrize("reset_attempts", [False, True], ids=["attempts_kept", "attempts_reset"])
async def test_a_paused_then_unpaused_tool_call_runs_once(
    client: Client,
    task_queue: str,
    ledger: str,
    reset_attempts: bool,
    sync: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pause the running tool call (async or sync), unpause it once the worker has ended the
    paused attempt: one ledger line, the run completes, two model requests."""
    caplog.set_level(logging.WARNING, logger="temporalio.activity")
    release = threading.Event()

    @function_tool(name="get_weather")
    async def async_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        while not release.is_set():
            await asyncio.sleep(0.02)
        return f"The weather in {city} is sunny and 22C."

    @function_tool(name="get_weather")
    def sync_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        release.wait(60)
        return f"The weather in {city} is sunny and 22C."

    def heard_of_pause() -> bool:
        # the SDK ends a paused attempt with this warning (unfixed and fixed alike)
        return "produced by activity pause" in caplog.text

    with ScriptedModelServer() as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[sync_weather if sync else async_weather],
            embedded_worker=False,
        )
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            try:
                await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
                execution = WorkflowExecution(workflow_id=run_id)
                await pause_call(client, execution, "tool-1-0")
                await until(heard_of_pause, "the worker to hear of the pause", timeout=30)
                await unpause_call(client, execution, "tool-1-0", reset_attempts=reset_attempts)
                release.set()
                result = await asyncio.wait_for(started, 30)
            finally:
                release.set()
                if not started.done():
                    started.cancel()
        assert result.status == "completed", result.error
        lines = ledger_lines(ledger)
        assert len(lines) == 1, lines
        assert model.request_count == 2


async def test_a_hung_tool_call_reset_twice_is_restarted(
    client: Client, task_queue: str, ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung call reset (`temporal activity reset`) is joined by the attempt after the reset,
    so it stays hung; reset again while that attempt waits, it is stopped and made anew,
    and the run completes."""
    caplog.set_level(logging.INFO, logger="agentor_temporal.activities")

    @function_tool(name="get_weather")
    async def weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        first = not ledger_lines(ledger)
        ledger_write(ledger, "start", city)
        try:
            while first:  # the first call hangs
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            ledger_write(ledger, "stopped", city)
            raise
        return f"The weather in {city} is sunny and 22C."

    async def reset() -> None:
        await client.workflow_service.reset_activity(
            ResetActivityRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=run_id),
                id="tool-1-0",
                identity="test",
            )
        )

    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue, tools=[weather], embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
            await reset()
            await until(
                lambda: "joins the call its attempt before started" in caplog.text,
                "the reset's attempt to join the hung call",
                timeout=30,
            )
            await reset()
            result = await asyncio.wait_for(started, 30)
        assert result.status == "completed", result.error
        kinds = [line.split()[0] for line in ledger_lines(ledger)]
        assert kinds == ["start", "stopped", "start"], ledger_lines(ledger)
