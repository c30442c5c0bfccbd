"""A sync tool that hangs past its timeout costs its own call and nothing more.

Python cannot stop a thread: a timed-out sync tool is abandoned, still
running, and the model is told so. Its thread must not keep a script or a
stopped worker from exiting (real processes), nor take a place from later
sync tool calls, which run and answer as usual; a normal sync tool still
returns its answer and is still cut off at its timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import forkserver
import pytest
from temporalio.client import Client

from agentor_temporal import Agentor, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.workflows.policies import SYNC_TOOL_THREADS

from helpers import (
    PROCS,
    ROOT,
    ledger_lines,
    ledger_write,
    scripted_agent,
    stop_process,
    wait_line,
    wait_until,
)

#: What the model is told about a sync tool abandoned by its timeout.
ABANDONED = "its thread is still running and was abandoned"
#: How long a process may take to exit once its work is done (it exits in
#: about a second here; the margin is for a loaded machine).
EXIT_WITHIN = 20.0


def _env(address: str, model: ScriptedModelServer, queue: str, ledger: str) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_LEDGER": ledger,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(PROCS)]),
        "PYTHONUNBUFFERED": "1",
    }


def _exit_after(proc: subprocess.Popen[str], since: float) -> tuple[int, float]:
    """Wait for `proc` to exit; fail naming what it printed if it outlives EXIT_WITHIN."""
    try:
        code = proc.wait(max(0.0, since + EXIT_WITHIN - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(
            f"still running {EXIT_WITHIN:g} s after its work ended; stderr: {err[-2000:]!r}"
        ) from None
    return code, time.monotonic() - since


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line `proc` prints (read raw, so the deadline holds)."""
    assert proc.stdout is not None
    fd, seen = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while b"\n" not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"nothing printed in {timeout:g} s: {seen[-500:]!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"exited ({proc.wait(10)}) without a result: {seen!r}")
            seen += chunk
    return seen.decode().splitlines()[0]


@pytest.mark.slow
async def test_a_script_whose_sync_tool_hung_exits_promptly(
    temporal_address: str, task_queue: str, ledger: str
) -> None:
    """The run ends (the tool timed out), and then the script ends too."""
    with ScriptedModelServer([CallTool("stuck"), Reply("done")]) as model:
        proc = forkserver.ForkedPopen(
            [sys.executable, str(PROCS / "hung_tool.py")],
            env=_env(temporal_address, model, task_queue, ledger),
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            printed = json.loads(await asyncio.to_thread(_first_line, proc, 90))
            code, took = await asyncio.to_thread(_exit_after, proc, time.monotonic())
            _, err = proc.communicate(timeout=10)
        finally:
            stop_process(proc)
    print(f"exited {took:.2f} s after printing its result")
    assert code == 0, err[-2000:]
    assert printed["status"] == "completed"
    [answer] = printed["answers"]
    assert answer.startswith("Error: stuck timed out after 1 s;") and ABANDONED in answer
    # the tool did start: its thread was blocked in it when the process ended
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["stuck"]


@pytest.mark.slow
async def test_a_stopped_worker_whose_sync_tool_hung_exits(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """SIGTERM after the run: the worker stops and exits 0 though a tool thread is blocked.

    (The worker CLI leaves through `os._exit`, so it exited before the fix
    too; this guards that its drain never waits on an abandoned thread.)
    """
    with ScriptedModelServer([CallTool("stuck"), Reply("done")]) as model:
        proc = forkserver.ForkedPopen(
            [
                sys.executable,
                str(ROOT / "worker.py"),
                "--agents",
                "hung_tool:agent",
                "--temporal",
                temporal_address,
                "--task-queue",
                task_queue,
            ],
            env=_env(temporal_address, model, task_queue, ledger),
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "worker.log").open("w"),
            text=True,
        )
        try:
            await asyncio.to_thread(wait_line, proc, "worker ready")
            # built as hung_tool builds it (the worker checks it is the same agent)
            agent = Agentor(
                name="Stuck",
                model="m",
                tools=[_stuck_stand_in()],
                base_url=model.base_url,
                api_key="k",
                temporal=client,
                task_queue=task_queue,
                max_tool_failures=10,
                embedded_worker=False,
            )
            result = await asyncio.wait_for(agent.arun("go"), 60)
            proc.send_signal(signal.SIGTERM)
            code, took = await asyncio.to_thread(_exit_after, proc, time.monotonic())
        finally:
            stop_process(proc)
    print(f"worker exited {took:.2f} s after SIGTERM")
    assert code == 0, (tmp_path / "worker.log").read_text()[-2000:]
    assert result.status == "completed"
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.error is not None and ABANDONED in answer.error


def _stuck_stand_in() -> Any:
    """The caller's copy of hung_tool's tool: same schema, never run here."""

    @function_tool(timeout=1)
    def stuck() -> str:
        """Never returns."""
        raise AssertionError("runs only on the worker")

    return stuck


async def test_hung_sync_tools_do_not_starve_later_sync_tools(
    client: Client, task_queue: str, ledger: str
) -> None:
    """As many hung calls as the pool has threads; a sync tool called next still runs."""
    release = threading.Event()

    @function_tool(timeout=1)
    def stuck(n: int) -> str:
        """Blocks until the test ends.

        Args:
            n: which call.
        """
        ledger_write(ledger, "stuck")
        release.wait(120)
        return "late"

    @function_tool(timeout=5)
    def quick() -> str:
        """Returns at once."""
        ledger_write(ledger, "quick")
        return "quick answer"

    script: list[Step] = [
        [CallTool("stuck", {"n": i}) for i in range(SYNC_TOOL_THREADS)],
        CallTool("quick"),
        Reply("done"),
    ]
    try:
        with ScriptedModelServer(script) as model:
            agent = scripted_agent(
                model,
                client,
                task_queue,
                tools=[stuck, quick],
                max_tool_failures=SYNC_TOOL_THREADS + 1,
            )
            result = await asyncio.wait_for(agent.arun("go"), 90)
            # the hung calls' threads are all still blocked as quick runs
            hung = sum(line.startswith("stuck") for line in ledger_lines(ledger))
    finally:
        release.set()
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    stuck_answers = [e for e in answers if e.name == "stuck"]
    [quick_answer] = [e for e in answers if e.name == "quick"]
    # it ran (it did not "time out" waiting behind the hung calls' threads)
    assert quick_answer.error is None and quick_answer.result == "quick answer", quick_answer
    assert [line for line in ledger_lines(ledger) if line.startswith("quick")]
    assert len(stuck_answers) == SYNC_TOOL_THREADS == hung
    assert all(ABANDONED in (e.error or "") for e in stuck_answers)


async def test_a_sync_tool_answers_and_is_cut_off_at_its_timeout(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A quick call answers; a slow one answers "timed out" at its timeout and runs on."""

    @function_tool(timeout=1)
    def slow(seconds: float) -> str:
        """Sleeps.

        Args:
            seconds: how long.
        """
        ledger_write(ledger, "slow", f"{seconds:g}")
        time.sleep(seconds)
        ledger_write(ledger, "slept", f"{seconds:g}")
        return f"slept {seconds:g}"

    script: list[Step] = [CallTool("slow", {"seconds": 0.1}), CallTool("slow", {"seconds": 4})]
    script.append(Reply("done"))
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[slow])
        run_id = uuid.uuid4().hex
        result = await asyncio.wait_for(agent.arun("go", run_id=run_id), 60)
        # the abandoned thread runs on to its end
        await asyncio.to_thread(wait_until, lambda: _ended(ledger, "4"), "slow(4) to end", 20)
    assert result.status == "completed"
    quick, cut = [e for e in result.events if e.type == "tool_result"]
    assert quick.error is None and quick.result == "slept 0.1"
    assert cut.error == f"slow timed out after 1 s; {ABANDONED} (it may still have effects; " + (
        "its result will be discarded)"
    )
    assert cut.started_at is not None and cut.ended_at is not None
    took = cut.ended_at - cut.started_at
    assert 0.9 < took < 3.0, took


def _ended(ledger: str, seconds: str) -> bool:
    """Whether the ledger has slow(seconds)'s end (its line ends with the seconds)."""
    return any(
        line.split()[0] == "slept" and line.split()[-1] == seconds for line in ledger_lines(ledger)
    )
