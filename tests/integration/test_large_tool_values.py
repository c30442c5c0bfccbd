"""A tool returning a large structure (a query's rows), or raising a long error, runs once.

What a tool returns is written as JSON for the model, then cut to 256 kB. Written by
`json.dumps`, a few million rows held the interpreter's lock for the whole dump, seconds on
end: the heartbeat thread could not beat, the server timed the live call out and gave it
to another worker, which ran the tool again (and every other call of the stalled worker
went the same way). Written a piece at a time, the lock is let go between pieces and the
call beats throughout. A long error quoting a dotted list and a URL held the lock the same
way, in the search for URLs whose credentials its text must not show (quadratic in C).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import RunResult
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import PROCS, ledger_lines, stop_process, until, wait_line, worker_cli

pytestmark = pytest.mark.slow

#: rows whose C dump takes several seconds of the lock: past the 5 s heartbeat timeout
ROWS = 8_000_000


async def test_a_tool_returning_millions_of_rows_runs_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker writing the rows keeps its call: the second worker polling beside it never
    runs the tool again (before: two ledger lines, the second its attempt 2)."""
    result, ran = await _run_beside_a_second_worker(
        client,
        temporal_address,
        task_queue,
        ledger,
        tmp_path,
        monkeypatch,
        tool="query_rows",
        env={"BIG_ROWS": str(ROWS)},
    )
    assert len(ran) == 1, f"the tool ran again: {ran}"
    assert result.status == "completed", result.error


async def _run_beside_a_second_worker(
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    tool: str,
    env: dict[str, str],
) -> tuple[RunResult, list[str]]:
    """Run one call of `tool` in a worker process given `env`, a second worker (this
    process's, where the tool is small and quick) polling from the call's start on; the
    run's result and the tool's ledger lines."""
    if str(PROCS) not in sys.path:
        monkeypatch.syspath_prepend(str(PROCS))
    big_result = importlib.import_module("big_result")
    monkeypatch.setenv("AGENT_LEDGER", ledger)  # this process's worker's tool writes there too
    with ScriptedModelServer([CallTool(tool), Reply("done")]) as model:
        full = {
            "TEMPORAL_ADDRESS": temporal_address,
            "AGENT_TASK_QUEUE": task_queue,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_LEDGER": ledger,
            **env,
        }
        first = worker_cli(full, tmp_path / "first.log", "big_result:agent")
        try:
            await asyncio.to_thread(wait_line, first, "worker ready", 120)
            agent = big_result.build(model.base_url, client, task_queue, embedded_worker=False)
            run_id = f"big-{uuid.uuid4().hex[:8]}"
            running = asyncio.ensure_future(agent.arun("go", run_id=run_id))
            await until(lambda: ledger_lines(ledger), "the tool's first run", 120)
            async with build_worker(client, [agent], task_queue=task_queue):
                result: RunResult = await asyncio.wait_for(running, 180)
        finally:
            stop_process(first)
        assert model.request_count == 2
    return result, ledger_lines(ledger)


#: characters of the dotted list the error quotes: a quadratic URL search held the lock ~10 s
ERROR_CHARS = 90_000


async def test_a_tool_raising_a_long_error_runs_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker masking the error keeps its call (before: two ledger lines)."""
    result, ran = await _run_beside_a_second_worker(
        client,
        temporal_address,
        task_queue,
        ledger,
        tmp_path,
        monkeypatch,
        tool="fail_loudly",
        env={"BIG_ERROR": str(ERROR_CHARS)},
    )
    assert len(ran) == 1, f"the tool ran again: {ran}"
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.error is not None and "bad versions a.a." in answer.error


#: characters of log a tool's error quotes: masking them is seconds of work (0.5-1 s a
#: megabyte), past the 5 s heartbeat timeout
LOG_CHARS = 15_000_000


async def test_a_tool_raising_an_error_quoting_a_long_log_runs_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker keeps beating while it masks a tool's long error (a failed job's whole
    log quoted): before, the beats stopped when the tool raised, the server timed the
    call's attempt out after 5 s and gave it to a worker, the second one running the tool
    again (two ledger lines, the second its attempt 2)."""
    result, ran = await _run_beside_a_second_worker(
        client,
        temporal_address,
        task_queue,
        ledger,
        tmp_path,
        monkeypatch,
        tool="fail_reading",
        env={"BIG_LOG": str(LOG_CHARS), "SERVICE_API_KEY": "sk-" + uuid.uuid4().hex * 2},
    )
    assert len(ran) == 1, f"the tool ran again: {ran}"
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.error is not None and "INFO job 1 ok" in answer.error
    # the first attempt answered: never timed out, whichever worker the next one reached
    assert await _tool_attempts(client, result.run_id) == [1]


async def _tool_attempts(client: Client, run_id: str) -> list[int]:
    """The attempt each tool call of the run was answered by, in its history."""
    tools: set[int] = set()
    attempts = []
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        scheduled = event.activity_task_scheduled_event_attributes
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if "tool" in scheduled.activity_type.name:
                tools.add(event.event_id)
        started = event.activity_task_started_event_attributes
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            if started.scheduled_event_id in tools:
                attempts.append(started.attempt)
    return attempts
