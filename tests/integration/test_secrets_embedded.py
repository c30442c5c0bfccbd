"""A run in a script's own process (the embedded worker) logs no key through the
script's handlers: asyncio's report of a task a tool dropped is masked too.

The commands mask every line they print (their handlers carry the filter); a script
that runs agents in its own process keeps its own handlers, and only the loggers this
package and its libraries write through are masked. asyncio is one: a tool's task that
failed with the key in its error, never awaited, was reported with it. Real dev server,
scripted model, real `openai` client.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest
from temporalio.client import Client

from agentor_temporal import Agentor, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import INSTRUCTIONS, PROMPT

KEY = "sk-embedded-Zq81fJ2xVb7Kc0LmN4pRt6"
DROPPED: list[asyncio.Future[None]] = []


async def _refused() -> None:
    raise RuntimeError(f"the gateway refused {KEY}")


@function_tool
async def notify(channel: str) -> str:
    """Notify a channel.

    Args:
        channel: The channel.
    """
    DROPPED.append(asyncio.ensure_future(_refused()))  # never awaited
    await asyncio.sleep(0)
    return "sent"


async def test_a_dropped_tasks_error_is_masked_in_the_scripts_log(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    with ScriptedModelServer([CallTool("notify", {"channel": "ops"}), Reply("Done.")]) as model:
        agent = Agentor(
            name="Notify Agent",
            instructions=INSTRUCTIONS,
            tools=[notify],
            base_url=model.base_url,
            api_key=KEY,
            temporal=client,
            task_queue=task_queue,
        )
        result = await agent.arun(PROMPT)
    assert result.status == "completed", result.error
    deadline = time.monotonic() + 10
    # on the worker's loop (its own thread): done there, then let go of here
    while not all(task.done() for task in DROPPED):
        assert time.monotonic() < deadline, "the dropped task never ended"
        await asyncio.sleep(0.05)
    DROPPED.clear()  # the last reference: asyncio reports the task's error as it goes
    while not any("never retrieved" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "asyncio never reported the dropped task"
        gc.collect()
        await asyncio.sleep(0.05)
    lines = [f"{r.name}: {r.getMessage()}\n{r.exc_text or ''}" for r in caplog.records]
    reported = [line for line in lines if "never retrieved" in line]
    assert "the gateway refused ***" in "".join(reported), reported
    assert [line for line in lines if KEY in line] == []
