"""Scripts whose streams are unusual still finish their calls once, and end cleanly.

Their stderr: the lines a signal's handler or the exit hook says ("SIGTERM: finishing the
calls ...") are written mid-drain. A script started with its stderr closed (`python
script.py 2>&-`, a service manager's or cron's choice: Python then sets `sys.stderr` to None)
raised AttributeError from there, which ended the drain: the call in flight was cut off, and
the next worker ran it again (a transfer made twice); the script ended with exit status 1.

A run's event stream followed by a thread of the script's (`stream_chat()` on the thread's own
loop) as the main thread returns: the exit hook did not wait for that thread as it waits for
one in `run()`, stopped the worker under the run, and the thread waited for ever on the run's
next event: the script hung at exit. Real processes, a real dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
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


def script_env(
    address: str, model: ScriptedModelServer, queue: str, tmp_path: Path
) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_STORE": str(tmp_path / "runs"),
        "AGENT_LEDGER": str(tmp_path / "ledger.txt"),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
    }


def read_until(proc: subprocess.Popen[str], text: str, timeout: float = 60.0) -> str:
    """What `proc` wrote on stderr up to and including `text` (read raw, so the deadline holds)."""
    assert proc.stderr is not None
    fd, seen = proc.stderr.fileno(), b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        assert chunk, f"no {text!r} on stderr in {timeout} s: {seen[-2000:]!r}"
        seen += chunk
    return seen.decode()


async def test_a_thread_following_a_stream_as_the_script_ends_sees_the_run_through(
    temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A non-daemon thread follows `stream_chat()` while the main thread returns mid-tool: the
    exit hook waits for it as for a thread in `run()`, the run ends, and the script exits 0
    with nothing on stderr. Before, the hook stopped the worker under the run: the run was
    left open and the thread waited for ever (the script never exited)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **script_env(temporal_address, model, task_queue, tmp_path),
            "AGENT_TOOL_SECONDS": "2",
        }
        run_id = uuid.uuid4().hex
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(PROCS / "plain_script.py"), "stream_thread", run_id],
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the script still ran after 90 s (hung at exit): {exc.stderr!r}")
    assert done.returncode == 0 and done.stderr == "", (done.returncode, done.stderr[-3000:])
    assert json.loads(done.stdout.splitlines()[-1])["events"][-1] == "run_end", done.stdout
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


async def test_a_sigterm_while_exit_waits_for_a_streaming_thread_ends_the_script(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """SIGTERM while the exit hook waits for a thread following a stream: the tool call in
    flight finishes, recorded, the thread's stream is cut off with one line (as a thread's
    `run()` is), and the script ends by SIGTERM. Before, the stream's thread waited for ever
    on the stopped runtime: the script never exited, and only SIGKILL ended it."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **script_env(temporal_address, model, task_queue, tmp_path),
            # in flight until the signal's line is out, however slow the machine
            "AGENT_TOOL_SECONDS": "60",
            "AGENT_TOOL_GATE": str(tmp_path / "gate"),
        }
        run_id = uuid.uuid4().hex
        running = subprocess.Popen(
            [sys.executable, str(PROCS / "plain_script.py"), "stream_thread", run_id],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            await until(lambda: ledger_lines(ledger), "the tool to start")
            # the main thread returned and the exit hook, its handler on, waits for the thread
            await until(lambda: catches(running.pid, signal.SIGTERM), "the exit hook's handler", 30)
            running.terminate()
            first = await asyncio.to_thread(read_until, running, "SIGTERM: finishing")
            (tmp_path / "gate").touch()
            try:
                _, rest = await asyncio.to_thread(running.communicate, None, 60)
            except subprocess.TimeoutExpired:
                pytest.fail("the script still ran 60 s after its tool call finished (hung)")
        finally:
            running.kill()
        stderr = first + rest
        assert running.returncode == -signal.SIGTERM, stderr
        assert "was in an agent call; the call was cut off" in stderr, stderr
        assert "Traceback" not in stderr, stderr
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
