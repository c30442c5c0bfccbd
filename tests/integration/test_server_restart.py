"""The Temporal server itself SIGKILLed mid-run and restarted on the same database file."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import (
    ANSWER,
    PROMPT,
    SEED_EVENT_TYPES,
    DevServerProcess,
    finish,
    ledger_lines,
    spawn,
    stop_process,
    transfer_tool,
    wait_until,
    weather_agent,
    weather_tool,
)

pytestmark = pytest.mark.slow


async def test_run_completes_across_a_server_crash(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A dev server killed while a tool runs and restarted on its database: the run completes."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    run_id = uuid.uuid4().hex
    runs = tmp_path / "runs"
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_STORE": str(runs),
        "AGENT_LEDGER": ledger,
        # long enough that the server is down and back while the tool runs
        "TOOL_DELAY": "3",
    }
    proc = spawn(["run", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        server.kill()
        server.start()
        result = finish(proc, timeout=120)
        client = await Client.connect(server.address)
        projected = await TemporalStore(client).aload(run_id)
    finally:
        stop_process(proc)
        server.stop()

    assert result["status"] == "completed" and result["final_output"] == ANSWER
    assert [e["type"] for e in result["events"]] == SEED_EVENT_TYPES
    assert result["events"] == [e.to_dict() for e in projected]
    assert [e.to_dict() for e in FileStore(runs).load(run_id)] == result["events"]
    # the tool may have been re-run if its completion was lost with the server,
    # but only ever under the one idempotency key
    assert len({line.split()[1] for line in ledger_lines(ledger)}) == 1


#: longer than the client SDK's own retries of a call (~10 s), which a caller
#: waiting in `run()` outlived no more: it exited with "tcp connect error"
OUTAGE = 12.0


async def test_a_waiting_caller_rides_out_a_server_outage(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`agent.run()` in a plain script waits through a 12 s outage, saying so once, and returns."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "1",
    }
    proc = spawn(["run", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        server.kill()
        down = time.monotonic()
        # the caller is still waiting when the server comes back
        wait_until(lambda: time.monotonic() - down > OUTAGE or proc.poll() is not None, "outage")
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        server.start()
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
        server.stop()

    assert proc.returncode == 0, err[-4000:]
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert result["status"] == "completed" and result["final_output"] == ANSWER
    # said once, naming the address, not a silent hang
    said = [line for line in err.splitlines() if "is unreachable" in line]
    assert len(said) == 1 and server.address in said[0], err[-4000:]


async def test_a_caller_gives_up_on_a_server_that_stays_down(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Past AGENTOR_OUTAGE_PATIENCE the caller fails clearly: where, and how to re-attach."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "1",
        "AGENTOR_OUTAGE_PATIENCE": "2",
    }
    proc = spawn(["run", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        server.kill()
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
        server.stop()

    assert proc.returncode != 0
    last = err.strip().splitlines()[-1]
    assert "ConnectionFailed" in last and server.address in last, err[-4000:]
    assert f"resume({run_id!r})" in last and "AGENTOR_OUTAGE_PATIENCE" in last, last


async def test_a_stream_follower_rides_out_a_server_outage(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`stream_chat` goes on through a 12 s outage and ends with the run's `run_end`."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "1",
    }
    proc = spawn(["stream", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        server.kill()
        down = time.monotonic()
        wait_until(lambda: time.monotonic() - down > OUTAGE or proc.poll() is not None, "outage")
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        server.start()
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
        server.stop()

    assert proc.returncode == 0, err[-4000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    events = [e for e in lines if e["type"] != "text_delta"]
    assert [e["type"] for e in events] == SEED_EVENT_TYPES
    assert events[-1]["status"] == "completed"


async def test_a_run_started_while_the_server_is_down_starts_once_it_is_back(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A connected caller's `arun` in a 12 s outage starts the run once the server is back."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    try:
        agent = weather_agent(
            base_url=model.base_url, task_queue=task_queue, temporal=server.address, ledger=ledger
        )
        assert (await agent.arun(PROMPT)).status == "completed"  # connected
        server.kill()
        run_id = uuid.uuid4().hex
        task = asyncio.ensure_future(agent.arun(PROMPT, run_id=run_id))
        await asyncio.wait({task}, timeout=OUTAGE)
        assert not task.done(), task.exception()
        server.start()
        result = await asyncio.wait_for(task, 60)
        client = await Client.connect(server.address)
        segments = await TemporalStore(client).segments(run_id)
    finally:
        server.stop()

    assert result.status == "completed" and result.final_output == ANSWER
    assert len(segments) == 1  # started once


async def test_an_approval_sent_during_an_outage_is_delivered_once_the_server_is_back(
    task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`aapprove` in a 12 s outage decides once the server is back; the run then completes."""
    script = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
            CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
        ],
        Reply("Paid and checked."),
    ]
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    try:
        with ScriptedModelServer(script) as model:
            agent = weather_agent(
                base_url=model.base_url,
                task_queue=task_queue,
                temporal=server.address,
                tools=[weather_tool(ledger), transfer_tool(ledger)],
            )
            paused = await agent.arun("Pay bob 5000 and tell me the weather in Oslo.")
            assert paused.status == "awaiting_approval"
            server.kill()
            task = asyncio.ensure_future(agent.aapprove(paused.run_id, "call_pay", by="alice"))
            await asyncio.wait({task}, timeout=OUTAGE)
            assert not task.done(), task.exception()
            server.start()
            await asyncio.wait_for(task, 60)
            result = await asyncio.wait_for(agent.aresume(paused.run_id), 60)
    finally:
        server.stop()

    assert result.status == "completed" and result.final_output == "Paid and checked."
    decisions = [e for e in result.events if e.type == "approval_decision"]
    assert [(e.status, e.result) for e in decisions] == [("approved", "alice")]
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "transfer"]
