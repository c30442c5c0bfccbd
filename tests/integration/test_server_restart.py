"""The Temporal server itself SIGKILLed mid-run and restarted on the same database file."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import (
    ANSWER,
    SEED_EVENT_TYPES,
    DevServerProcess,
    finish,
    ledger_lines,
    spawn,
    stop_process,
    wait_until,
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
