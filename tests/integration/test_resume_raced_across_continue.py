"""A resume whose start comes after the segment it raced continued the run as new.

A resume starts the run's next segment under a request id named by what it
continues (the run, its closed execution, the events it read), so a second
start continuing the same state is deduplicated by Temporal, or attached to
the segment while it runs. Temporal dedups a start only against the run's
current execution, though, and a segment that continued as new is no longer
that execution: once its chain had closed, a start sent late (a second
resumer slow between its reading and its start, or one resume's start sent
again after the server took it and its answer was lost) began a segment of
its own from the old execution's events, asking the model again for the
turns the chain had paid for and running their tools again.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal import _start
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import TemporalStore

from helpers import chunk_tool, coder, ledger_lines, tool_results

pytestmark = pytest.mark.slow

#: a history budget one turn of four 8 KB results passes: the resumed segment
#: continues as new by its last model request
BUDGET = 20_000
ANSWER = "Read eight chunks."
#: model requests of the run: the one that failed, and the resumed run's three
REQUESTS = 4


def _model(asked: list[int]) -> Any:
    """Fails the run's first request; then two turns of four 8 KB chunks, and an answer."""

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        asked.append(done)
        if len(asked) == 1:
            return Fail(400, "Invalid request")  # the run fails: resumable
        if done < 8:
            return [CallTool("read_chunk", {"n": n}, id=f"call_{n}") for n in range(done, done + 4)]
        return Reply(ANSWER)

    return respond


def _continued(statuses: list[str]) -> bool:
    """The run's executions once resumed: the failed one (its workflow completed, saying
    so), the resumed segment continued as new (once or more), and its completion."""
    return (
        len(statuses) >= 3
        and statuses[-1] == "completed"
        and all(s == "continued_as_new" for s in statuses[1:-1])
    )


async def _failed_run(agent: Any) -> str:
    failed = await asyncio.wait_for(agent.arun("Read eight chunks.", max_turns=10), 120)
    assert failed.status == "failed", failed.error
    assert failed.run_id is not None
    return str(failed.run_id)


async def test_a_second_resumer_slow_to_start_attaches_to_the_continued_run(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two resumers of a failed run; the second, held after its reading, sends its start
    once the first's segment continued as new and completed: it gets that result."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    ledger = str(tmp_path / "ledger")
    asked: list[int] = []
    late_client = await Client.connect(temporal_address)
    held, release = threading.Event(), threading.Event()
    trace_header = _start._trace_header

    async def slow_start(client: Client, run_id: str, execution: str | None) -> Any:
        # the last step of the late resumer's start before it is sent
        if client is late_client:
            held.set()
            await asyncio.to_thread(release.wait, 120)
        return await trace_header(client, run_id, execution)

    monkeypatch.setattr(_start, "_trace_header", slow_start)
    with ScriptedModelServer(_model(asked)) as model:
        tools = [chunk_tool(ledger, 8000)]
        agent = coder(model, client, task_queue, tools=tools)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await _failed_run(agent)
            late = coder(model, late_client, task_queue, tools=tools)
            late_resume: asyncio.Task[Any] = asyncio.create_task(late.aresume(run_id))
            try:
                assert await asyncio.to_thread(held.wait, 60), "the late start was not sent"
                first = await asyncio.wait_for(agent.aresume(run_id), 120)
                assert first.status == "completed", first.error
                assert model.request_count == REQUESTS
                statuses = [s.status for s in await TemporalStore(client).segments(run_id)]
                assert _continued(statuses), statuses
            finally:
                release.set()
            second = await asyncio.wait_for(late_resume, 120)
            segments = await TemporalStore(client).segments(run_id)
    assert second.status == "completed", second.error
    assert second.final_output == ANSWER
    # the turns the first resumer's segment paid for were not asked for again
    assert model.request_count == REQUESTS, asked
    assert _continued([s.status for s in segments])
    assert len(ledger_lines(ledger)) == 8


async def test_a_resumes_start_sent_again_after_its_answer_was_lost_starts_nothing_more(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One resume whose start the server took and whose answer was lost (an outage): its
    start, sent again once the segment continued as new and completed, starts no other."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    ledger = str(tmp_path / "ledger")
    asked: list[int] = []
    resumer_client = await Client.connect(temporal_address)
    service = resumer_client.workflow_service
    inner = service.start_workflow_execution
    sent: list[str] = []
    chain_done = threading.Event()

    async def lossy_start(req: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(req.request_id)
        if len(sent) > 1:
            # sent again: the server is back once the segment's chain has closed
            await asyncio.to_thread(chain_done.wait, 120)
            return await inner(req, *args, **kwargs)
        await inner(req, *args, **kwargs)
        raise RPCError("connection reset", RPCStatusCode.UNAVAILABLE, b"")

    with ScriptedModelServer(_model(asked)) as model:
        tools = [chunk_tool(ledger, 8000)]
        agent = coder(model, client, task_queue, tools=tools)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await _failed_run(agent)
            service.start_workflow_execution = lossy_start  # type: ignore[method-assign]
            resumer = coder(model, resumer_client, task_queue, tools=tools)
            resuming: asyncio.Task[Any] = asyncio.create_task(resumer.aresume(run_id))
            try:

                async def chain_closed() -> bool:
                    segments = await TemporalStore(client).segments(run_id)
                    return _continued([s.status for s in segments])

                deadline = asyncio.get_running_loop().time() + 120
                while not await chain_closed():
                    assert asyncio.get_running_loop().time() < deadline, "the chain never closed"
                    await asyncio.sleep(0.2)
            finally:
                chain_done.set()
            result = await asyncio.wait_for(resuming, 120)
            segments = await TemporalStore(client).segments(run_id)
    assert result.status == "completed", result.error
    assert result.final_output == ANSWER
    assert model.request_count == REQUESTS, asked
    assert _continued([s.status for s in segments])
    assert len(ledger_lines(ledger)) == 8
