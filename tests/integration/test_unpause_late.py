"""A call that finished while paused, unpaused long after (past `KEEP`), is not made again.

A paused call keeps running in its worker for the attempt after the unpause to
join. Once finished it was forgotten after `KEEP` (30 s) like any finished
call, so an unpause after that asked the model again (a paid request for an
answer the worker had) or ran the tool again (one whose answer was too large
for `FinishedCalls`). It is now kept until an attempt takes it or its run ends.
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
from agentor_temporal.testing import Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, pause_call, scripted_agent, unpause_call, until

#: `KEEP` in this test: the unpause comes well after it
KEEP = 0.3


@pytest.mark.parametrize("call", ["model", "tool"])
async def test_a_call_unpaused_after_it_was_kept_is_not_made_again(
    client: Client,
    task_queue: str,
    ledger: str,
    call: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pause a model request (or a tool call with a 20 kB answer), let it finish, unpause it
    well past KEEP: one model request for the turn, one run of the tool."""
    monkeypatch.setattr(_joining, "KEEP", KEEP)
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
        return f"The weather in {city} is sunny and 22C. " + "x" * 20_000

    with ScriptedModelServer() as model:
        if call == "model":
            model.set_script([Hang(4, Reply("It is sunny."))])
        agent = scripted_agent(model, client, task_queue, tools=[weather], embedded_worker=False)
        run_id = uuid.uuid4().hex
        activity_id = "generate-1" if call == "model" else "tool-1-0"
        execution = WorkflowExecution(workflow_id=run_id)
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            try:
                if call == "model":
                    await until(lambda: model.request_count, "the model request", timeout=30)
                else:
                    await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
                asked = time.monotonic()
                await pause_call(client, execution, activity_id)
                await until(
                    lambda: "produced by activity pause" in caplog.text,
                    "the worker to hear of the pause",
                    timeout=30,
                )
                release.set()
                if call == "model":
                    # the scripted model answers 4 s after it was asked
                    await until(lambda: time.monotonic() > asked + 4, "the answer", timeout=30)
                else:
                    await until(lambda: len(ledger_lines(ledger)) == 2, "the tool's end")
                # the call's result is past KEEP: it was forgotten, without the fix
                done = time.monotonic()
                await until(lambda: time.monotonic() > done + 5 * KEEP, "KEEP to pass")
                await unpause_call(client, execution, activity_id)
                result = await asyncio.wait_for(started, 30)
            finally:
                release.set()
                if not started.done():
                    started.cancel()
        assert result.status == "completed", result.error
        if call == "model":
            assert (model.request_count, result.final_output) == (1, "It is sunny.")
        else:
            assert [line.split()[0] for line in ledger_lines(ledger)] == ["start", "end"]
            assert model.request_count == 2
