"""A worker whose serving loop a user's code stops exits, naming why; another finishes the run.

A supervisor (systemd, Kubernetes, docker-compose `restart:`) starts a worker
again only when its process exits. A callback a tool schedules on the
worker's event loop (`loop.call_soon`, `call_later`: not a task, so the tool's
containment does not reach it) that raised SystemExit or KeyboardInterrupt,
or that stopped the loop, left the `worker.py` process alive and polling
nothing: its runs waited for ever. Now the process ends, exit status 1, with
one line on stderr naming the cause, and a second worker finishes the run.
Also what a thread the tool starts does: `sys.exit` there ends only the
thread, SIGTERM is a requested stop (the worker drains and exits 0), and
`os._exit` ends the process (the call runs again on the next worker).
Real dev server, real `python worker.py` processes, the real `openai` client
against the scripted model.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import forkserver
import pytest
from temporalio.client import Client

from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import (
    ANSWER,
    PROMPT,
    ROOT,
    ledger_lines,
    scripted_agent,
    stop_process,
    wait_line,
    wait_until,
    worker_cli,
)
from procs.loop_breakers import get_weather

pytestmark = pytest.mark.slow

#: how each break ends the first worker: its exit status, a line its stderr has, and
#: how many times the tool may run in all. A thread the tool starts was tried too: its
#: SIGTERM is a requested stop (drained, exit 0, the tool run once), its os._exit a
#: worker lost (the call runs again, as a SIGKILL's: test_worker_loss.py)
BREAKS = {
    "callback_exit": (1, "the worker's event loop was stopped by SystemExit: 3", 1),
    "callback_interrupt": (1, "the worker's event loop was stopped by KeyboardInterrupt", 1),
    "loop_stop": (1, "the worker's event loop was stopped (loop.stop())", 1),
}


@pytest.mark.parametrize("how", list(BREAKS))
async def test_a_worker_broken_by_a_tool_exits_and_another_finishes_the_run(
    how: str,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first worker exits within seconds, saying why; the second (the test's own, a
    process more would only cost its imports) finishes the run."""
    code_wanted, line, most_runs = BREAKS[how]
    env = {
        "TEMPORAL_ADDRESS": temporal_address,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "AGENT_BREAK": how,
        "AGENT_BROKEN_FLAG": str(tmp_path / "broken"),
    }
    for name in ("AGENT_LEDGER", "AGENT_BROKEN_FLAG"):
        monkeypatch.setenv(name, env[name])
    # both launchers: `agentor-temporal worker` and `python worker.py`
    cli = ("-m", "agentor_temporal", "worker") if how.startswith("callback") else ()
    with ScriptedModelServer() as model:
        env["MODEL_BASE_URL"] = model.base_url
        first = worker_cli(env, tmp_path / "first.log", "loop_breakers:agent", launcher=cli)
        try:
            wait_line(first, "worker ready")
            agent = scripted_agent(
                model, client, task_queue, tools=[get_weather], embedded_worker=False
            )
            task = asyncio.create_task(agent.arun(PROMPT, run_id=uuid.uuid4().hex))
            await asyncio.to_thread(wait_until, lambda: ledger_lines(ledger), "the tool", 60)
            try:
                code = await asyncio.to_thread(first.wait, 30)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"the broken worker did not exit: {(tmp_path / 'first.log').read_text()}"
                ) from None
            async with build_worker(client, [agent], task_queue=task_queue):
                result = await asyncio.wait_for(task, 60)
        finally:
            stop_process(first)
    log = (tmp_path / "first.log").read_text()
    assert code == code_wanted, log
    assert line in log, log
    assert "Traceback" not in log, log
    assert result.status == "completed" and result.final_output == ANSWER, result.error
    assert 1 <= len(ledger_lines(ledger)) <= most_runs


SCRIPT = """
from helpers import PROMPT
from procs.loop_breakers import agent
result = agent.run(PROMPT)
print("RESULT", result.status, result.final_output, flush=True)
"""


@pytest.mark.parametrize("how", ["callback_exit", "loop_stop"])
def test_a_script_whose_tool_stops_the_embedded_workers_loop_finishes_its_run(
    how: str, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """The embedded worker's loop (a script's, `serve --worker`'s) keeps serving: the run
    completes in that process, the tool run once, the cause said in one line.

    Its thread ended silently, and the script's `agent.run` waited for ever."""
    with ScriptedModelServer() as model:
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": temporal_address,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "AGENT_BREAK": how,
            "MODEL_BASE_URL": model.base_url,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        }
        proc = forkserver.ForkedPopen(
            [sys.executable, "-c", SCRIPT],
            env=env,
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the script did not end: {out}{err[-2000:]}") from None
    assert proc.returncode == 0, err
    assert f"RESULT completed {ANSWER}" in out, out + err
    assert "the worker's event loop was stopped" in err, err
    assert "Traceback" not in err, err
    assert len(ledger_lines(ledger)) == 1
