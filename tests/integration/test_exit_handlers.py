"""Exits through a script's own signal handlers, and a worker stopped while it starts.

Real processes, as `test_exit_scripts.py`: `procs/plain_script.py` ends as a
user's script does, `worker.py` is the CLI a container runs.
"""

from __future__ import annotations

import asyncio
import functools
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

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import (
    PROCS,
    ROOT,
    ledger_lines,
    resume_here,
    until,
    weather_or_transfer,
)

pytestmark = pytest.mark.slow


def _env(
    address: str, model: ScriptedModelServer, queue: str, tmp_path: Path, ledger: str
) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_STORE": str(tmp_path / "runs"),
        "AGENT_LEDGER": ledger,
        # get_weather runs until the test opens this gate (60 s at most), once the signal was
        # noted: in flight then however slow the machine, and no fixed wait on a quiet one
        "AGENT_TOOL_SECONDS": "60",
        "AGENT_TOOL_GATE": str(tmp_path / "gate"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    }


async def test_a_sigterm_handler_of_the_scripts_own_does_not_cut_the_exit_drain_short(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`signal.signal(SIGTERM, lambda *_: sys.exit(0))`, then SIGTERM while the exit hook
    finishes the call the embedded worker runs: the SystemExit is noted in one line and the
    call finishes; a new process resumes the run, the tool having run once, and the JSONL
    mirror holds every event. Before, the SystemExit ended the hook ("Exception ignored"
    and a traceback), the interpreter cut the call off, and the resume ran the tool again."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = _env(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        errors = tmp_path / "stderr.txt"
        with errors.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, str(PROCS / "plain_script.py"), "own_handler_daemon", run_id],
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        try:
            # the exit hook names the run still open before it drains the worker
            await until(lambda: f"run {run_id} is still open" in errors.read_text(), "the exit")
            proc.send_signal(signal.SIGTERM)
            await until(lambda: "again to abandon" in errors.read_text(), "the SIGTERM's line")
            (tmp_path / "gate").touch()
            out, _ = await asyncio.to_thread(proc.communicate, None, 90)
        finally:
            proc.kill()
        stderr = errors.read_text()
        assert proc.returncode == 0, stderr
        assert json.loads(out) == {"started": True}
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
        [noted] = [line for line in stderr.splitlines() if "SystemExit(0)" in line]
        assert "finishing the calls" in noted and "again to abandon" in noted, noted
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
        assert resumed.status == "completed", resumed.error
    # the call finished in the exiting process, once
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    assert "attempt=1" in ledger_lines(ledger)[0]
    mirrored = [e.to_dict() for e in FileStore(tmp_path / "runs").load(run_id)]
    assert mirrored == [e.to_dict() for e in await TemporalStore(client).aload(run_id)]
    assert [e["type"] for e in mirrored][-1] == "run_end"


@pytest.mark.parametrize("own", [True, False], ids=["own handler", "default handler"])
async def test_a_handlers_exception_outside_the_exit_hooks_waits_is_noted_too(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str, own: bool
) -> None:
    """The script's own `sys.exit(0)` SIGTERM handler, the signal coming while the exit hook
    is between its waits (here: writing its line naming the open run to a stderr pipe nobody
    reads yet): noted as in a wait, the call finishes once, a resume runs no tool again.
    Before, the SystemExit ended the hook ("Exception ignored"), the interpreter cut the
    call off, and the resume ran the tool a second time."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = _env(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        proc = subprocess.Popen(
            [
                sys.executable,
                str(PROCS / "plain_script.py"),
                "own_handler_full_stderr" if own else "full_stderr",
                run_id,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            await until(lambda: _writing_stderr(proc.pid), "the exit hook's blocked line")
            proc.send_signal(signal.SIGTERM)
            # reading stderr unblocks the hook; the call runs on until its line is out
            first = await asyncio.to_thread(_read_until, proc, "finishing the calls")
            (tmp_path / "gate").touch()
            out, err = await asyncio.to_thread(proc.communicate, None, 90)
        finally:
            proc.kill()
        stderr = (first + err).decode().lstrip(".")
        # the default's SIGTERM ends the process by it once the calls are done
        assert proc.returncode == (0 if own else -signal.SIGTERM), stderr
        assert json.loads(out) == {"started": True}
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
        [noted] = [
            line for line in stderr.splitlines() if ("SystemExit(0)" if own else "SIGTERM") in line
        ]
        assert "finishing the calls" in noted, noted
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
        assert resumed.status == "completed", resumed.error
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    mirrored = [e.to_dict() for e in FileStore(tmp_path / "runs").load(run_id)]
    assert mirrored == [e.to_dict() for e in await TemporalStore(client).aload(run_id)]
    assert [e["type"] for e in mirrored][-1] == "run_end"


def _read_until(proc: subprocess.Popen[bytes], text: str, timeout: float = 60.0) -> bytes:
    """What `proc` wrote on stderr up to and including a line with `text` (read raw, so the
    deadline holds); `communicate` reads the rest."""
    assert proc.stderr is not None
    fd, seen = proc.stderr.fileno(), b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen or b"\n" not in seen.partition(text.encode())[2]:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        assert chunk, f"no {text!r} on stderr in {timeout} s: {seen[-2000:]!r}"
        seen += chunk
    return seen


def _writing_stderr(pid: int) -> bool:
    """Whether the process's main thread is blocked writing to a full stderr pipe."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        call = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return "pipe_write" in wchan and call[:2] == ["1", "0x2"]


@pytest.mark.parametrize("cli", [False, True], ids=["worker.py", "agentor-temporal worker"])
async def test_a_worker_stopped_while_it_starts_says_so_in_one_line(
    temporal_address: str, task_queue: str, tmp_path: Path, cli: bool
) -> None:
    """SIGTERM to a worker still importing its agents (a container stopped as it started):
    it took no work, so it ends at once, exit 0, with one line saying so. Before, the
    default handler killed it silently (exit status 143: a crash, for a supervisor)."""
    gate = tmp_path / "gate"
    command = (
        [sys.executable, "-m", "agentor_temporal", "worker"]
        if cli
        else [sys.executable, str(ROOT / "worker.py")]
    )
    proc = subprocess.Popen(
        [
            *command,
            "--agents",
            "slow_import_agent:agent",
            "--temporal",
            temporal_address,
            "--task-queue",
            task_queue,
        ],
        env={
            **os.environ,
            "AGENT_IMPORT_GATE": str(gate),
            "MODEL_BASE_URL": "http://127.0.0.1:9/v1",
            "AGENT_TASK_QUEUE": task_queue,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(PROCS)]),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await until(lambda: Path(f"{gate}.importing").exists(), "the agents' import")
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, None, 60)
    finally:
        gate.touch()
        proc.kill()
    assert proc.returncode == 0, err
    assert "worker ready" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Stopped by SIGTERM while starting, before polling: no work was taken" in lines[0]


@pytest.mark.parametrize(
    ("command", "module", "code", "line"),
    [
        (
            ["worker.py", "--agents", "env_agent:agent"],
            "agentor_temporal.worker",
            0,
            "Stopped by SIGTERM while starting, before polling: no work was taken",
        ),
        (
            ["-m", "agentor_temporal", "worker", "--agents", "env_agent:agent"],
            "agentor_temporal.cli",
            0,
            "Stopped by SIGTERM while starting, before polling: no work was taken",
        ),
        (
            ["-m", "agentor_temporal", "run", "--agent", "env_agent:agent", "hi"],
            "agentor_temporal.cli",
            130,
            "interrupted (SIGTERM) while starting: nothing was done",
        ),
    ],
    ids=["worker.py", "agentor-temporal worker", "agentor-temporal run"],
)
@pytest.mark.parametrize("pid1", [False, True], ids=["", "as PID 1"])
async def test_a_stop_during_the_launchers_own_imports_says_so_in_one_line(
    tmp_path: Path, command: list[str], module: str, code: int, line: str, pid1: bool
) -> None:
    """SIGTERM while the interpreter still imports the package itself (before any handler of
    the worker's or the CLI's could be on): one line saying so, a worker's exit status 0, a
    command's 130 (interrupted). Before, the default handler killed it silently (status 143); as
    a container's first process (PID 1, which the kernel's default never ends) the command
    went on past the line and failed with a traceback."""
    if pid1 and not _pid_namespaces():
        pytest.skip("no user and PID namespaces here (`unshare -Urpf`)")
    gate = tmp_path / "gate"
    first = [str(ROOT / command[0])] if command[0].endswith(".py") else command[:2]
    rest = command[1:] if command[0].endswith(".py") else command[2:]
    proc = subprocess.Popen(
        [*(["unshare", "-Urpf"] if pid1 else []), sys.executable, *first, *rest],
        env={
            **os.environ,
            "LAUNCH_GATE": str(gate),
            "LAUNCH_GATE_MODULE": module,
            "PYTHONPATH": os.pathsep.join(
                [str(PROCS / "launch_gate"), str(ROOT), str(ROOT / "tests"), str(PROCS)]
            ),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await until(lambda: Path(f"{gate}.importing").exists(), "the launcher's import")
        if pid1:  # to the first process of the namespace, not to `unshare` waiting on it
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            os.kill(int(children[0]), signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, None, 60)
    finally:
        gate.touch()
        proc.kill()
    assert proc.returncode == code, err
    assert out == ""
    assert [text for text in err.splitlines() if text.strip()] == [line]


@functools.cache
def _pid_namespaces() -> bool:
    """Whether `unshare -Urpf` runs here (a process as PID 1, as in a container)."""
    try:
        done = subprocess.run(
            ["unshare", "-Urpf", sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "1"
