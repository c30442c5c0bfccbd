"""A script whose stderr cannot take our lines still finishes its calls once, and ends cleanly.

The lines a signal's handler or the exit hook says ("SIGTERM: finishing the calls ...") are
written mid-drain. A script started with its stderr closed (`python script.py 2>&-`, a
service manager's or cron's choice: Python then sets `sys.stderr` to None) raised
AttributeError from there, which ended the drain: the call in flight was cut off, and the
next worker ran it again (a transfer made twice); the script ended with exit status 1.
Real processes, a real dev server; the script's stderr closed by the shell, as a user's is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import TemporalStore
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import PROCS, ROOT, here_agent, ledger_lines, resume_here, until, weather_or_transfer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def catches(pid: int, signum: signal.Signals) -> bool:
    """Whether process `pid` has a handler on `signum` now (Linux: /proc's SigCgt mask)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.parametrize("command", ["approve", "run"], ids=["approved-at-exit", "mid-run"])
async def test_a_sigterm_to_a_script_without_stderr_finishes_the_call_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    command: str,
) -> None:
    """SIGTERM to a script started with `2>&-` while its worker runs a call (the transfer just
    approved, as the script exits; a `run()`'s tool): the call finishes, recorded, and the script
    ends by SIGTERM. Before, the line saying so raised AttributeError: the drain ended, the
    call was cut off (exit status 1), and resuming ran it a second time."""
    run_id = uuid.uuid4().hex
    with ScriptedModelServer(weather_or_transfer) as model:
        args = [run_id, "Weather in Paris?"]
        if command == "approve":
            agent = here_agent(ledger, model, task_queue, client, tmp_path / "runs")
            async with build_worker(client, [agent], task_queue=task_queue):
                paused = await asyncio.wait_for(agent.arun("Send 5 to bob", run_id=run_id), 60)
            args = [run_id, paused.pending_approvals[0].call_id]
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_STORE": str(tmp_path / "runs"),
            "AGENT_LEDGER": ledger,
            # long enough for the signal to land mid-call; no gate: nothing said shows when
            "AGENT_TOOL_SECONDS": "3",
            "AGENT_TRANSFER_SECONDS": "3",
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
        }
        script = [sys.executable, str(PROCS / "plain_script.py"), command, *args]
        running = subprocess.Popen(
            ["/bin/sh", "-c", 'exec "$@" 2>&-', "sh", *script],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            await until(lambda: ledger_lines(ledger), "the tool to start")
            # our handler is on (the call's, or the exit hook's): the signal is ours to handle
            await until(lambda: catches(running.pid, signal.SIGTERM), "a SIGTERM handler", 10)
            running.terminate()
            out, _ = await asyncio.to_thread(running.communicate, None, 60)
        finally:
            running.kill()
        assert running.returncode == -signal.SIGTERM, (running.returncode, out)
        if command == "approve":
            assert json.loads(out) == {"decided": args[1]}
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    tool = "transfer" if command == "approve" else "get_weather"
    assert [line.split()[0] for line in ledger_lines(ledger)] == [tool]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.error is None, result.error
