"""A worker stopped with SIGTERM mid-run (a rolling deploy) loses nothing.

The real `python worker.py` CLI, two of them on one task queue, as a fleet
would run them: the one executing the run's in-flight call is sent SIGTERM,
stops polling, finishes that call, reports it and exits 0; the other worker
finishes the run. Nothing runs twice and nothing is lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import Hang, ScriptedModelServer

from helpers import (
    ANSWER,
    PROMPT,
    ledger_lines,
    scripted_agent,
    stop_process,
    wait_line,
    wait_until,
    worker_cli,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("during", "signum"),
    # SIGHUP gets the very handler of SIGTERM: tests/unit/test_hangup_as_terminate.py
    [("tool_call", signal.SIGTERM), ("generation", signal.SIGTERM)],
    ids=["tool_call", "generation"],
)
async def test_sigterm_mid_run_finishes_in_flight_work_and_loses_nothing(
    during: str,
    signum: int,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """SIGTERM (or SIGHUP: its terminal closed) mid-call: that worker drains the call and
    exits 0; the other finishes the run."""
    runs = tmp_path / "runs"
    # the in-flight call takes 2 s: long enough to signal it mid-way
    script = [Hang(2)] if during == "generation" else []
    with ScriptedModelServer(script) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "TOOL_DELAY": "2" if during == "tool_call" else "0",
        }
        logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
        workers = [worker_cli(env, log, "env_agent:agent", "--store", str(runs)) for log in logs]
        try:
            for proc in workers:
                wait_line(proc, "worker ready")
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            run_id = uuid.uuid4().hex
            task = asyncio.create_task(agent.arun(PROMPT, run_id=run_id))
            if during == "tool_call":
                lines = await asyncio.to_thread(
                    wait_until, lambda: ledger_lines(ledger), "the tool to start", 60
                )
                busy = lines[0].split("pid=")[1].split()[0]
            else:
                await asyncio.to_thread(model.wait_for_requests, 1, 60)
                busy = await _generating_worker(client, run_id)
            stopped = next(p for p in workers if str(p.pid) == busy)
            stopped.send_signal(signum)
            code = await asyncio.to_thread(stopped.wait, 60)
            exited_at = time.time()
            result = await asyncio.wait_for(task, 60)
        finally:
            for proc in workers:
                stop_process(proc)
        requests = model.request_count

    assert code == 0
    log = logs[workers.index(stopped)].read_text()
    assert "Stopping: no new work is taken; finishing in-flight activities" in log
    assert "Worker stopped" in log
    assert result.status == "completed" and result.final_output == ANSWER
    # nothing handed over ran twice: the drained call's result was accepted
    assert len(ledger_lines(ledger)) == 1
    assert requests == 2
    mirrored = FileStore(runs).load(run_id)
    assert [e.to_dict() for e in mirrored] == [
        e.to_dict() for e in await TemporalStore(client).aload(run_id)
    ]
    assert len(mirrored) == 7
    # the stopped worker exited only after the call it held had finished
    kind = "tool_result" if during == "tool_call" else "generation"
    finished = next(e.ended_at for e in mirrored if e.type == kind)
    assert finished is not None and finished < exited_at


async def _generating_worker(client: Client, run_id: str) -> str:
    """The pid of the worker whose generate activity is in flight (from its identity)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        desc = await client.get_workflow_handle(run_id).describe()
        for act in desc.raw_description.pending_activities:
            if act.last_worker_identity:
                return act.last_worker_identity.split("@")[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no worker picked up the generation")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_second_signal_abandons_the_drain_and_says_so(
    signum: signal.Signals,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A worker draining a long call (first SIGTERM, or Ctrl+C) says how long it may wait and
    that a second signal abandons the call; the second does, at once, saying so, and the
    process ends by it. Before, a second signal did nothing: only SIGKILL cut the drain short."""
    with ScriptedModelServer() as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "TOOL_DELAY": "30",
        }
        log = tmp_path / "worker.log"
        proc = worker_cli(env, log, "env_agent:agent", "--store", str(tmp_path / "runs"))
        try:
            wait_line(proc, "worker ready")
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            await agent.astart(PROMPT, run_id=uuid.uuid4().hex)
            await asyncio.to_thread(wait_until, lambda: ledger_lines(ledger), "the tool", 60)
            proc.send_signal(signum)
            await asyncio.to_thread(
                wait_until, lambda: "Stopping:" in log.read_text(), "the drain to start", 30
            )
            proc.send_signal(signum)
            code = await asyncio.to_thread(proc.wait, 10)
        finally:
            stop_process(proc)
    text = log.read_text()
    assert code == -signum, text
    assert "finishing in-flight activities (up to 30 s; interrupt again to abandon them" in text
    # docker's default grace (10 s) kills a drain of 30 s: the line says how long it must be
    assert "`docker stop -t 35`" in text
    assert f"{signum.name} again: abandoning the calls in flight" in text, text
    assert "Traceback" not in text, text


async def test_signals_reach_a_worker_whose_event_loop_a_tool_blocks(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """An `async def` tool that blocks the event loop (sleeps without awaiting): SIGTERM says
    at once that the worker stops, and a second abandons the call at once, saying so. Before,
    the loop's own signal handling waited for the tool: nothing was said, and a second signal
    did nothing until the tool returned (a container's grace ran out first: SIGKILL)."""
    with ScriptedModelServer() as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "TOOL_DELAY": "60",
            "TOOL_BLOCKS_LOOP": "1",
        }
        log = tmp_path / "worker.log"
        proc = worker_cli(env, log, "env_agent:agent", "--store", str(tmp_path / "runs"))
        try:
            wait_line(proc, "worker ready")
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            await agent.astart(PROMPT, run_id=uuid.uuid4().hex)
            await asyncio.to_thread(wait_until, lambda: ledger_lines(ledger), "the tool", 60)
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(
                wait_until, lambda: "Stopping:" in log.read_text(), "the stopping line", 20
            )
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 20)
        finally:
            stop_process(proc)
    text = log.read_text()
    assert code == -signal.SIGTERM, text
    assert "SIGTERM again: abandoning the calls in flight" in text, text
    assert "Traceback" not in text, text


async def test_a_call_cut_off_by_the_graceful_shutdown_is_said_and_runs_again_elsewhere(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A tool still running when a stopping worker's graceful shutdown runs out (a sync tool
    that ignores cancellation): the worker says in one line that it handed the call back and
    that another worker runs it again; the next worker does, and the run completes with every
    event mirrored. Before, it said only "Worker stopped", as after a clean drain."""
    with ScriptedModelServer() as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "TOOL_DELAY": "30",
            "AGENTOR_GRACEFUL_SHUTDOWN": "1",
        }
        log = tmp_path / "worker.log"
        run_id = uuid.uuid4().hex
        proc = worker_cli(env, log, "env_agent:agent", "--store", str(tmp_path / "runs"))
        try:
            wait_line(proc, "worker ready")
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            await agent.astart(PROMPT, run_id=run_id)
            await asyncio.to_thread(wait_until, lambda: ledger_lines(ledger), "the tool", 60)
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 30)
        finally:
            stop_process(proc)
        text = log.read_text()
        assert code == 0, text
        [said] = [line for line in text.splitlines() if "graceful shutdown ran out" in line]
        assert "get_weather(city='London')" in said and run_id in said, said
        assert "another worker runs it again" in said, said
        env["TOOL_DELAY"] = "0"
        proc = worker_cli(
            env, tmp_path / "next.log", "env_agent:agent", "--store", str(tmp_path / "runs")
        )
        try:
            wait_line(proc, "worker ready")
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
        finally:
            stop_process(proc)
    assert outcome["status"] == "completed"
    assert [line.split()[3] for line in ledger_lines(ledger)] == ["attempt=1", "attempt=2"]
    mirrored = [e.to_dict() for e in FileStore(tmp_path / "runs").load(run_id)]
    assert mirrored == [e.to_dict() for e in await TemporalStore(client).aload(run_id)]


def _first_child(pid: int) -> int:
    """The pid of process `pid`'s first child (Linux: /proc)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0])


async def test_a_second_signal_ends_a_worker_that_is_a_containers_first_process(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`CMD ["python", "worker.py"]` without an init: the worker is PID 1, which the kernel's
    default action never ends. A second SIGTERM abandons the drain and ends it (exit status
    143, as Docker reports a SIGTERM'd process). Before, the signal it sent itself did nothing:
    it went on draining, and only the container runtime's SIGKILL ended it."""
    probe = subprocess.run(
        ["unshare", "-Urpf", sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "1":
        pytest.skip("no user and PID namespaces here (`unshare -Urpf`)")
    with ScriptedModelServer() as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "TOOL_DELAY": "60",
        }
        log = tmp_path / "worker.log"
        proc = worker_cli(
            env,
            log,
            "env_agent:agent",
            "--store",
            str(tmp_path / "runs"),
            prefix=("unshare", "-Urpf"),
        )
        worker_pid = None
        try:
            wait_line(proc, "worker ready")
            worker_pid = _first_child(proc.pid)
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            await agent.astart(PROMPT, run_id=uuid.uuid4().hex)
            await asyncio.to_thread(wait_until, lambda: ledger_lines(ledger), "the tool", 60)
            os.kill(worker_pid, signal.SIGTERM)
            await asyncio.to_thread(
                wait_until, lambda: "Stopping:" in log.read_text(), "the stopping line", 20
            )
            os.kill(worker_pid, signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 20)
        finally:
            if worker_pid is not None and proc.poll() is None:
                os.kill(worker_pid, signal.SIGKILL)  # its namespace's end ends `unshare`
            stop_process(proc)
    text = log.read_text()
    assert code == 128 + signal.SIGTERM, text
    assert "SIGTERM again: abandoning the calls in flight" in text, text
