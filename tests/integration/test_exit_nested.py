"""An agent used as another agent's tool: a process's stop finishes the inner run too.

A tool that calls another agent (`inner.run(...)` inside the outer agent's
tool) waits on a run that this process's embedded worker serves. When a stop
drains the workers (Ctrl+C or SIGTERM during a call, the exit hook), the
outer call can only finish if the inner run's worker keeps serving it until
it ends: stopping every worker at once left the inner run without a worker,
the outer tool waited out the graceful shutdown, was handed back to Temporal
and ran again on the next worker. Real processes: `procs/plain_script.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import PROCS, ROOT, ledger_lines, until, weather_or_transfer

pytestmark = pytest.mark.slow

#: The graceful shutdown the scripts get: short, so a drain that waits it out shows, and
#: long enough that one which does not stays under it on a slow, loaded machine (it costs
#: nothing while the test passes).
GRACE = 15.0


def script_env(
    address: str,
    model: ScriptedModelServer,
    queue: str,
    tmp_path: Path,
    ledger: str,
    inner_queue: str,
) -> dict[str, str]:
    """`plain_script.py nested`'s environment: the inner agent on its own queue or the same."""
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_STORE": str(tmp_path / "runs"),
        "AGENT_LEDGER": ledger,
        "AGENT_TOOL_SECONDS": "1",
        "INNER_QUEUE": inner_queue,
        "AGENTOR_GRACEFUL_SHUTDOWN": str(GRACE),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    }


@pytest.mark.parametrize(
    ("signum", "inner_queue"),
    [(signal.SIGINT, "own"), (signal.SIGTERM, "same")],
    ids=["ctrl-c, inner agent on its own queue", "sigterm, both agents on one queue"],
)
async def test_a_stop_mid_call_finishes_the_inner_agents_run_and_the_outer_call_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    inner_queue: str,
    signum: signal.Signals,
) -> None:
    """Ctrl+C or SIGTERM while an agent-as-tool's inner run is mid-tool: the inner run and
    the outer tool call finish in this process, each tool runs once. Before, the drain
    stopped the inner agent's worker with the rest, the inner run waited for a worker, and
    the outer tool was cut off when the graceful shutdown ran out and ran again."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = script_env(temporal_address, model, task_queue, tmp_path, ledger, inner_queue)
        run_id = uuid.uuid4().hex
        command = [sys.executable, str(PROCS / "plain_script.py"), "nested", run_id]
        running = subprocess.Popen(
            [*command, "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            await until(lambda: len(ledger_lines(ledger)) == 2, "the inner agent's tool to start")
            stopped = time.monotonic()
            running.send_signal(signum)
            _, stderr = await asyncio.to_thread(running.communicate, None, 60)
            took = time.monotonic() - stopped
        finally:
            running.kill()
        assert running.returncode == -signum, stderr
        assert f"{signum.name}: finishing the calls" in stderr, stderr
        assert "graceful shutdown ran out" not in stderr, stderr
        assert took < GRACE, f"the stop took {took:.1f} s: {stderr}"
        resumed = await asyncio.to_thread(
            subprocess.run,
            [*command, "resume"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    # each tool ran once: the outer one in the stopped process, which recorded its answer
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "outer"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "Done: The weather in Paris is sunny and 22C.", result.result


async def test_a_call_approved_as_the_script_ends_finishes_its_inner_agents_run_cleanly(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A transfer approved just before the script ends, whose tool asks another agent (on the
    same task queue): the inner run is served by the exiting process's own worker, and the
    script exits 0 with nothing on stderr. Before, the inner call, made while the exit hook
    drained the workers, started a second runtime (another connection and worker): its
    worker, knowing only the inner agent, took the outer run's next task ('Unknown agent' on
    stderr)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = script_env(temporal_address, model, task_queue, tmp_path, ledger, "same")
        run_id = uuid.uuid4().hex
        command = [sys.executable, str(PROCS / "plain_script.py"), "nested", run_id]

        def step(*args: str) -> dict[str, Any]:
            done = subprocess.run(
                [*command, *args], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0 and done.stderr == "", (args, done.stderr)
            return dict(json.loads(done.stdout.strip().splitlines()[-1]))

        [call_id] = (await asyncio.to_thread(step, "ask"))["pending"]
        await asyncio.to_thread(step, "approve", call_id)
        # the transfer, and the inner run it waited on, finished in the approving process
        assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "outer"]
        resumed = await asyncio.to_thread(step, "resume")
    assert resumed["status"] == "completed"
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "outer"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "Done: The weather in Paris is sunny and 22C.", result.result
