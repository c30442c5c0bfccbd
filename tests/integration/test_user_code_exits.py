"""A `SystemExit` or `KeyboardInterrupt` from a user's code never stops the worker's loop.

asyncio re-raises either out of the event loop when it ends a task, and a
worker serves every call on that loop: a `worker.py` process stopped polling
and did not exit, and the next worker ran its calls in flight again (the
tool twice, the model request paid twice), the offending one too: seen from
a task an async tool started (`asyncio.gather`, `wait_for`, a `TaskGroup`;
an argparse or click entry point called with bad arguments exits). A
store's method (run in a thread) raising either is a failing store, as one
raising OSError is. Real dev server, a worker on an event loop of its own (in a
thread, as an embedded worker's), the real `openai` client against the
scripted model.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import Agentor, Event, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, polled, weather_agent

#: each tool, and how its answer begins
TOOLS = {"gathers": "SystemExit: 2", "waits_for": "KeyboardInterrupt", "in_group": "SystemExit: 2"}
if sys.version_info < (3, 11):  # no asyncio.TaskGroup
    del TOOLS["in_group"]


async def _exits(how: str) -> None:
    await asyncio.sleep(0)  # a step of its own first, as a real command's parsing has
    if how == "exit":
        sys.exit(2)
    raise KeyboardInterrupt


def _tools(ledger: str) -> list[Any]:
    @function_tool
    async def gathers() -> str:
        """Runs a command alongside, through asyncio.gather."""
        ledger_write(ledger, "gathers")
        await asyncio.gather(_exits("exit"))
        return "ran"

    @function_tool
    async def waits_for() -> str:
        """Runs a command under a timeout, through asyncio.wait_for."""
        ledger_write(ledger, "waits_for")
        await asyncio.wait_for(asyncio.ensure_future(_exits("interrupt")), 5)
        return "ran"

    @function_tool
    async def in_group() -> str:
        """Runs a command in a task group."""
        ledger_write(ledger, "in_group")
        async with asyncio.TaskGroup() as group:
            group.create_task(_exits("exit"))
        return "ran"

    return [t for t in (gathers, waits_for, in_group) if t.name in TOOLS]


def _serve(address: str, agent: Agentor, task_queue: str, stop: threading.Event) -> list[str]:
    """Serve `agent` on a loop of its own in a thread; the list gets how that loop ended."""
    ended: list[str] = []

    async def serve() -> None:
        client = await Client.connect(address)
        async with build_worker(client, [agent], task_queue=task_queue):
            while not stop.is_set():
                await asyncio.sleep(0.02)

    def run() -> None:
        try:
            asyncio.run(serve())
            ended.append("stopped")
        except BaseException as exc:  # noqa: B036 - what ended the worker's loop is the finding
            ended.append(f"{type(exc).__name__}: {exc}")

    threading.Thread(target=run, name="tool-exits-worker", daemon=True).start()
    return ended


async def test_a_task_an_async_tool_started_exiting_answers_the_model_and_keeps_the_worker(
    client: Client, task_queue: str, ledger: str, temporal_address: str
) -> None:
    """The tool ran once, the model read its error, and the worker serves on."""
    script = [[CallTool(name) for name in TOOLS], Reply("done")]
    stop = threading.Event()
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            tools=_tools(ledger),
            embedded_worker=False,
        )
        ended = _serve(temporal_address, agent, task_queue, stop)
        try:
            await polled(client, task_queue)
            running = asyncio.ensure_future(agent.arun("go"))
            done, _ = await asyncio.wait({running}, timeout=30)
            if not done:
                running.cancel()
                raise AssertionError(
                    f"the run did not end; the worker's loop ended: {ended}; "
                    f"tool runs: {ledger_lines(ledger)}"
                )
            result = running.result()
            assert ended == [], f"the worker's loop ended: {ended}"
        finally:
            stop.set()
    assert result.status == "completed" and result.final_output == "done", result.error
    answers = {e.name: e.error or "" for e in result.events if e.type == "tool_result"}
    for name, error in TOOLS.items():
        assert answers[name].startswith(error), answers
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == sorted(TOOLS)
    assert model.request_count == 2


class ExitingStore:
    """A store whose `append` calls `sys.exit` (its client refusing a setting), every time."""

    def __init__(self) -> None:
        self.exits = 0

    def append(self, run_id: str, event: Event) -> None:
        self.exits += 1
        sys.exit(5)

    def load(self, run_id: str) -> list[Event]:
        return []

    def list_runs(self) -> list[str]:
        return []


async def test_a_store_calling_sys_exit_is_a_failing_store_not_a_failed_call(
    client: Client,
    task_queue: str,
    ledger: str,
    temporal_address: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store's failure is logged as any store's is; the run goes on, each call made once.

    Its SystemExit failed the model request or tool call the mirror was folded
    into, every attempt, until the run failed: a store raising OSError is
    logged and the run goes on.
    """
    store = ExitingStore()

    @function_tool
    async def lookup() -> str:
        """Looks something up."""
        ledger_write(ledger, "lookup")
        return "found"

    stop = threading.Event()
    with ScriptedModelServer([CallTool("lookup"), Reply("done")]) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            tools=[lookup],
            store=store,
            embedded_worker=False,
        )
        ended = _serve(temporal_address, agent, task_queue, stop)
        try:
            with caplog.at_level(logging.ERROR):
                running = asyncio.ensure_future(agent.arun("go"))
                done, _ = await asyncio.wait({running}, timeout=30)
            if not done:
                running.cancel()
                raise AssertionError(
                    f"the run did not end; the worker's loop ended: {ended}; "
                    f"tool runs: {ledger_lines(ledger)}; model requests: {model.request_count}"
                )
            result = running.result()
            assert ended == [], f"the worker's loop ended: {ended}"
        finally:
            stop.set()
    assert result.status == "completed" and result.final_output == "done", result.error
    assert store.exits > 0
    assert len(ledger_lines(ledger)) == 1 and model.request_count == 2
    assert "raised SystemExit: 5" in caplog.text
