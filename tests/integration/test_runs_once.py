"""Races between callers never make a tool or model call twice.

Real processes against a real dev server. Two processes starting one run id
at the same moment get one run; two approving one waiting call get one
decision (the other is refused); a turn of 200 parallel calls runs each
once; a run id whose history is gone but whose mirror has it is not run a
second time.
Each test counts tool executions in a ledger file and model requests at the
scripted model against what the run needs.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step

from conftest import start_dev_server
from helpers import (
    PROMPT,
    ROOT,
    finish,
    ledger_lines,
    scripted_agent,
    spawn,
    stop_process,
    wait_line,
)


async def test_same_run_id_started_by_two_processes_at_once(
    temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Two processes `run(prompt, run_id=X)` at the same moment: one run, tool once, 2 requests."""
    go = tmp_path / "go"
    run_id = uuid.uuid4().hex
    with ScriptedModelServer() as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "TOOL_DELAY": "1",
        }
        procs = [spawn(["run", "--run-id", run_id, "--go-file", str(go)], env) for _ in "ab"]
        try:
            for proc in procs:
                await asyncio.to_thread(wait_line, proc, "waiting")
            go.touch()
            results = [await asyncio.to_thread(finish, proc) for proc in procs]
        finally:
            for proc in procs:
                stop_process(proc)
        requests = model.request_count
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert results[0]["events"] == results[1]["events"]
    assert len(ledger_lines(ledger)) == 1
    assert requests == 2


async def test_one_call_approved_by_two_processes_at_once(
    temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Two processes approve one waiting call at once: one is refused, the transfer runs once."""
    go = tmp_path / "go"
    script: list[Step] = [
        [CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")],
        Reply("Paid."),
    ]
    with ScriptedModelServer(script) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "APPROVAL": "1",
        }
        worker = spawn(["worker"], env)
        callers = {**env, "EMBEDDED_WORKER": "0"}
        approvers: list[subprocess.Popen[str]] = []
        try:
            await asyncio.to_thread(wait_line, worker, "worker ready")
            run_id = uuid.uuid4().hex
            paused = await asyncio.to_thread(finish, spawn(["run", "--run-id", run_id], callers))
            assert paused["status"] == "awaiting_approval"
            approve = ["approve", "--run-id", run_id, "--call-id", "call_pay", "--go-file", str(go)]
            approvers = [spawn([*approve, "--by", who], callers) for who in ("alice", "bob")]
            for proc in approvers:
                await asyncio.to_thread(wait_line, proc, "waiting")
            go.touch()
            outs = [await asyncio.to_thread(proc.communicate, None, 120) for proc in approvers]
        finally:
            stop_process(worker)
            for proc in approvers:
                stop_process(proc)
        requests = model.request_count
    codes = [proc.returncode for proc in approvers]
    assert sorted(codes) == [0, 1], outs
    [(_, refused)] = [out for out, code in zip(outs, codes, strict=True) if code == 1]
    assert "already approved by" in refused, refused[-2000:]
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
    assert requests == 2


async def test_two_hundred_parallel_calls_in_one_turn_each_run_once(
    client: Client, task_queue: str, ledger: str
) -> None:
    """One turn of 200 parallel calls: each runs once, the run completes."""
    cities = [f"city{i}" for i in range(200)]
    script: list[Step] = [
        [CallTool("get_weather", {"city": c}, id=f"c{i}") for i, c in enumerate(cities)]
    ]
    script.append(Reply("All done."))
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, ledger=ledger)
        result = await asyncio.wait_for(agent.arun("weather everywhere"), 240)
        tool_messages = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert result.status == "completed" and result.final_output == "All done."
    # ledger lines: "get_weather RUN:CALL pid=.. attempt=.. CITY"
    ran = sorted(line.split()[-1] for line in ledger_lines(ledger))
    assert ran == sorted(cities)
    assert all("attempt=1 " in line for line in ledger_lines(ledger))
    assert [m["tool_call_id"] for m in tool_messages] == [f"c{i}" for i in range(200)]


async def test_a_run_id_gone_from_temporal_but_mirrored_is_not_run_again(
    task_queue: str, tmp_path: Path, ledger: str, model: ScriptedModelServer
) -> None:
    """`run(prompt, run_id=X)` again (a redelivered message) once X's history is gone
    (retention, a server's database lost) while the store has it: the run is returned
    from its mirror, not run again. It was: the model asked twice more, the tool ran
    a second time, and the first run's log was set aside as unconfirmed."""
    store = FileStore(tmp_path / "runs")
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    results = []
    for _ in "ab":  # a fresh in-memory server each time: the first one's history is gone
        env = await start_dev_server()
        try:
            agent = scripted_agent(model, env.client, task_queue, store=store, ledger=ledger)
            results.append(await asyncio.wait_for(agent.arun(PROMPT, run_id=run_id), 60))
            if len(results) == 2:
                # a start not waited for (serve's POST /runs, A2A) is refused, saying the way on
                with pytest.raises(ValueError, match=r"gone from Temporal.*`resume\("):
                    await asyncio.wait_for(agent.astart(PROMPT, run_id=run_id), 60)
                # one that crashed after its tool (a log Agentor wrote) is continued from
                # there: the model asked once more, the tool not run
                crashed = f"crashed-{uuid.uuid4().hex[:8]}"
                shutil.copy(
                    ROOT / "tests" / "fixtures" / "crashed-after-tool.jsonl",
                    tmp_path / "runs" / f"{crashed}.jsonl",
                )
                results.append(await asyncio.wait_for(agent.arun(PROMPT, run_id=crashed), 60))
        finally:
            await env.shutdown()
    first, again, continued = results
    assert again.status == "completed"
    assert again.final_output == first.final_output
    assert [e.call_id for e in again.events] == [e.call_id for e in first.events]
    assert continued.status == "completed"
    assert model.request_count == 3
    assert len(ledger_lines(ledger)) == 1
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        [f"{run_id}.jsonl", f"{crashed}.jsonl"]
    )
