"""Plain scripts end cleanly, and what their embedded worker held is never lost.

A script builds an agent, makes one call (run, approve, deny, resume, stream)
and ends; its embedded worker is still polling as the interpreter shuts down.
The runtime stops that worker at the very start of shutdown, before thread
pools refuse work: a task it already holds finishes (or goes back to
Temporal), and a failure of our own machinery is never recorded as the
tool's result. Every script exits 0 with nothing on stderr. Real processes,
no `os._exit`: `procs/plain_script.py` ends as a user's script does.
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
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal._embedded_worker import WORKER_LINGER
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import (
    PROCS,
    ROOT,
    here_agent,
    ledger_lines,
    plain_agent,
    resume_here,
    until,
    weather_or_transfer,
)

pytestmark = pytest.mark.slow


def with_checkout(env: dict[str, str]) -> dict[str, str]:
    """`env` over this process's, running this checkout's package, not the one installed
    (a worktree's differs)."""
    return {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}


def launch(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """Start `plain_script.py` with `args`, its output piped."""
    return subprocess.Popen(
        [sys.executable, str(PROCS / "plain_script.py"), *args],
        env=with_checkout(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ended(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run `plain_script.py` with `args` to its end (two minutes at most), whatever its exit."""
    return subprocess.run(
        [sys.executable, str(PROCS / "plain_script.py"), *args],
        env=with_checkout(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def script(env: dict[str, str], *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run `plain_script.py` to its end; fail naming its exit code and stderr unless clean."""
    try:
        proc = subprocess.run(
            [sys.executable, str(PROCS / "plain_script.py"), *args],
            env=with_checkout(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr or b""
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        pytest.fail(f"{args[0]} still running after {timeout:g} s; its stderr:\n{stderr[-3000:]}")
    assert proc.returncode == 0 and proc.stderr == "", (
        f"{args[0]} exited {proc.returncode} with stderr:\n{proc.stderr[-3000:]}"
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def env_for(
    address: str, model: ScriptedModelServer, queue: str, tmp_path: Path, ledger: str
) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_STORE": str(tmp_path / "runs"),
        "AGENT_LEDGER": ledger,
    }


def gated(tmp_path: Path) -> dict[str, str]:
    """A get_weather that runs until the file `tmp_path / "gate"` exists (60 s at most): the
    test opens it once what must happen mid-call did, instead of a fixed wait that a loaded
    machine outruns (and a quiet one waits out)."""
    return {"AGENT_TOOL_SECONDS": "60", "AGENT_TOOL_GATE": str(tmp_path / "gate")}


async def start_paused(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    run_id: str,
) -> str:
    """Start `run_id` (a transfer) on a worker of the test's own process, stopped once the run
    waits for approval: the approving script's worker is then the only one polling. The call
    id of the pending transfer."""
    agent = here_agent(ledger, model, task_queue, client, tmp_path / "runs")
    async with build_worker(client, [agent], task_queue=task_queue):
        paused = await asyncio.wait_for(agent.arun("Send 5 to bob", run_id=run_id), 60)
    assert paused.status == "awaiting_approval", paused.status
    return paused.pending_approvals[0].call_id


async def test_a_decision_then_exit_never_loses_the_tool_call(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Approve and exit, four times: each approved tool runs once and answers with its result.

    Four approving scripts, one after another, because the loss was a race at exit that one
    script did not always hit. The runs are started here, not by scripts: a starting script's
    exit is `test_short_scripts_exit_cleanly_under_load`'s subject, and the worker here is
    stopped before the first approval, so each approving script's worker is alone."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        agent = plain_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=None,
            ledger=ledger,
            embedded_worker=False,
        )
        run_ids = [uuid.uuid4().hex for _ in range(4)]
        async with build_worker(client, [agent], task_queue=task_queue):
            started = await asyncio.gather(
                *(agent.arun("Send 5 to bob", run_id=r) for r in run_ids)
            )
        for run_id, paused in zip(run_ids, started, strict=True):
            assert paused.status == "awaiting_approval"
            # the approving script's embedded worker is the only one polling
            # as it exits: the tool call is scheduled for it right then
            await asyncio.to_thread(
                script, env, "approve", run_id, paused.pending_approvals[0].call_id
            )
        async with build_worker(client, [agent], task_queue=task_queue):
            outcomes = [await client.get_workflow_handle(r).result() for r in run_ids]

    assert [o["status"] for o in outcomes] == ["completed"] * 4
    transfers = [line.split()[1] for line in ledger_lines(ledger) if line.startswith("transfer")]
    for run_id in run_ids:
        events = await TemporalStore(client).aload(run_id)
        [result] = [e for e in events if e.type == "tool_result"]
        assert result.error is None and result.result == "Sent 5 to bob.", result.result
        assert [k for k in transfers if k.startswith(run_id)] == [f"{run_id}:{result.call_id}"]


# each script is a whole process (imports, a connection, a worker) beside a busy worker:
# 50 s on a quiet 2-core machine, past 180 s once in CI on a slower one
@pytest.mark.timeout(420)
async def test_short_scripts_exit_cleanly_under_load(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Scripts (run, approve, deny, resume, stream) beside a busy worker: exit 0, stderr empty."""
    cycles = int(os.environ.get("EXIT_SCRIPT_CYCLES", "1"))  # each: one approve, one deny
    with ScriptedModelServer(weather_or_transfer, latency=0.05) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        agent = plain_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path / "runs"),
            ledger=ledger,
            embedded_worker=False,
        )
        stop = asyncio.Event()

        async def load() -> None:
            # a steady stream of weather runs on the concurrent worker
            while not stop.is_set():
                await asyncio.gather(
                    *(agent.arun("What is the weather in Oslo?") for _ in range(3))
                )

        async with build_worker(client, [agent], task_queue=task_queue):
            busy = asyncio.create_task(load())
            try:
                count = 0
                for _ in range(cycles):

                    async def decided(decision: str) -> None:
                        run_id = uuid.uuid4().hex
                        started = await asyncio.to_thread(script, env, "run", run_id)
                        if started["status"] == "awaiting_approval":
                            await asyncio.to_thread(
                                script, env, decision, run_id, started["pending"][0]
                            )
                        resumed = await asyncio.to_thread(script, env, "resume", run_id)
                        assert resumed["status"] == "completed"

                    # the approving and the denying scripts side by side, a streaming script
                    # beside each: more load, not less (one after the other, the scripts'
                    # starts made this test 50 s on a quiet 2-core machine)
                    _, _, *streamed = await asyncio.gather(
                        decided("approve"),
                        decided("deny"),
                        *(
                            asyncio.to_thread(script, env, "stream", uuid.uuid4().hex)
                            for _ in range(2)
                        ),
                    )
                    assert [s["events"][-1] for s in streamed] == ["run_end"] * 2
                    count += 8
            finally:
                stop.set()
                await busy
    assert count == 8 * cycles
    # every approved transfer ran once
    keys = [line.split()[1] for line in ledger_lines(ledger) if line.startswith("transfer")]
    assert len(keys) == len(set(keys)) == cycles


# SIGHUP: the same handler as SIGTERM's, ending the process by SIGHUP (tests/unit/
# test_hangup_signal.py); sent to a real script in test_a_signal_after_a_decision_...
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_terminated_script_finishes_the_tool_call_it_runs(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    signum: signal.Signals,
) -> None:
    """SIGTERM (or SIGHUP: its terminal closed; or Ctrl+C) to a script mid-tool: one line says
    its embedded worker finishes the call, and another signal would abandon it; the script ends
    as the signal ends it (Ctrl+C: a KeyboardInterrupt out of `run()`, its traceback the
    script's), and resuming from another process does not run the tool again (SIGHUP's default
    cut the call off, and it ran twice; Ctrl+C's showed a traceback from the wait's locks, then
    finished the call silently at exit)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            # in flight until the signal's line is out, however slow the machine
            **gated(tmp_path),
        }
        run_id = uuid.uuid4().hex
        running = launch(env, "run", run_id, "Weather in Paris?")
        try:
            await until(lambda: ledger_lines(ledger), "the tool to start")
            running.send_signal(signum)
            first = await asyncio.to_thread(read_until, running, f"{signum.name}: finishing")
            (tmp_path / "gate").touch()
            _, rest = await asyncio.to_thread(running.communicate, None, 60)
        finally:
            running.kill()
        stderr = first + rest
        assert running.returncode == -signum, stderr
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "The weather in Paris is sunny and 22C.", result.result
    [line] = [line for line in stderr.splitlines() if f"{signum.name}: finishing" in line]
    assert "again to abandon them" in line, stderr
    # the run is left open, nobody's once the process ends: named once, with how to go on
    left = [line for line in stderr.splitlines() if f"run {run_id} is still open" in line]
    assert len(left) == 1 and f"agent.resume({run_id!r})" in left[0], stderr
    if signum == signal.SIGINT:
        # Python's KeyboardInterrupt reaches the script, its traceback ending in the facade
        frames = [line for line in stderr.splitlines() if line.startswith("  File ")]
        assert frames and "plain_script.py" in frames[0], stderr
        assert all(
            any(name in frame for name in ("plain_script.py", "agent.py", "_runtime.py"))
            for frame in frames
        ), stderr
        # Python's traceback first, then the exit names the run
        assert stderr.index("KeyboardInterrupt") < stderr.index(left[0]), stderr
        assert "ignored" not in stderr, stderr
    else:
        assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize("command", ["arun", "stream", "run_in_loop"])
async def test_ctrl_c_under_asyncio_run_finishes_the_tool_call_first_and_says_so(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    command: str,
) -> None:
    """Ctrl+C to `asyncio.run(agent.arun(...))` or a streaming loop mid-tool: as for `run()`,
    one line says the embedded worker finishes the call, it does, and then asyncio's own
    handler has its way (the main task cancelled, KeyboardInterrupt out of `asyncio.run`,
    exit status 130). Before, asyncio's handler took it alone: a traceback, then a silent wait
    while the exit hook finished the call, and only the second Ctrl+C got the line, saying a
    third would abandon the call. A sync `run()` inside a coroutine (`run_in_loop`, a notebook
    cell's way) blocks the loop, so asyncio's handler could not cancel it: the script waited
    for ever after the drain; it gets Python's KeyboardInterrupt out of `run()` instead."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            # in flight until the signal's line is out, however slow the machine
            **gated(tmp_path),
        }
        run_id = uuid.uuid4().hex
        running = launch(env, command, run_id)
        try:
            await until(lambda: ledger_lines(ledger), "the tool to start")
            running.send_signal(signal.SIGINT)
            first = await asyncio.to_thread(read_until, running, "SIGINT: finishing")
            (tmp_path / "gate").touch()
            _, rest = await asyncio.to_thread(running.communicate, None, 60)
        finally:
            running.kill()
        stderr = first + rest
        assert running.returncode == -signal.SIGINT, stderr
        # the call finished and was recorded before asyncio's KeyboardInterrupt: the line
        # comes first, and the traceback ends the output
        [line] = [line for line in stderr.splitlines() if "SIGINT: finishing" in line]
        assert "then stopping; press Ctrl+C again to abandon them" in line, stderr
        assert stderr.index(line) < stderr.index("Traceback"), stderr
        # a run whose caller was interrupted is nobody's to wait on: the exit names it as
        # still open (the next worker finishes it), once, after the traceback
        traceback, _, left = stderr.rstrip().partition(f"\nrun {run_id} is still open")
        assert traceback.endswith("KeyboardInterrupt") and "ignored" not in stderr, stderr
        assert left and f"run {run_id}" not in left, stderr
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "The weather in Paris is sunny and 22C.", result.result


async def test_sigterm_handler_is_installed_only_over_the_default_and_restored(
    client: Client, task_queue: str, ledger: str
) -> None:
    """The drain-on-SIGTERM handler is set only while a call runs and SIGTERM had the
    default handler, and stays after it while the embedded worker is up (Ctrl+C's handler comes
    back at once); an application's own is kept, during the call and after."""
    seen: list[Any] = []

    def users_handler(signum: int, frame: Any) -> None:
        pass

    def observe(request: dict[str, Any]) -> Any:
        seen.append(signal.getsignal(signal.SIGTERM))
        return weather_or_transfer(request)

    with ScriptedModelServer(observe) as model:
        agent = plain_agent(
            ledger, base_url=model.base_url, task_queue=task_queue, temporal=client, store=None
        )
        # an earlier test's call may have left ours on (its worker still up then)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        interrupt = signal.getsignal(signal.SIGINT)
        await agent.arun("Weather in Oslo?")
        assert seen and all(h not in (signal.SIG_DFL, None) for h in seen), seen
        # the worker is up a while after the call: a SIGTERM now lets its calls finish
        assert signal.getsignal(signal.SIGTERM) is seen[0]
        assert signal.getsignal(signal.SIGINT) is interrupt
        seen.clear()
        signal.signal(signal.SIGTERM, users_handler)
        try:
            await agent.arun("Weather in Rome?")
            assert signal.getsignal(signal.SIGTERM) is users_handler
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert seen and all(h is users_handler for h in seen), seen


async def test_a_thread_running_the_agent_finishes_after_the_main_thread_returns(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A non-daemon thread's `run()` in flight as the main thread returns: the process waits
    for it (as Python waits for such threads), and the run completes there, its tool run once."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        finished = await asyncio.to_thread(script, env, "thread", run_id)
    assert finished == {"status": "completed"}
    outcome = await client.get_workflow_handle(run_id).result()
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


async def test_a_pool_thread_running_the_agent_finishes_its_call_and_the_script_exits(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`ThreadPoolExecutor().submit(agent.run, ...)`, the pool never shut down, mid-call as the
    main thread returns: the exit waits for the call, not for the pool's thread, which idles
    until the pool's own exit hook (after ours). Before, the script hung at exit for ever."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        finished = await asyncio.to_thread(script, env, "pool", run_id)
    assert finished == {"status": "completed"}
    outcome = await client.get_workflow_handle(run_id).result()
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


async def test_an_agent_call_from_an_atexit_handler_is_refused_at_once(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`agent.run()` in an `atexit` handler: the thread pools refuse work by then, so the
    call is refused, saying why, before a run starts; before, the embedded worker failed the
    run's first workflow task over and over, and the script never exited."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        refused = await asyncio.to_thread(script, env, "atexit", run_id)
    assert "while the interpreter exits" in refused["refused"], refused
    assert "before the script ends" in refused["refused"], refused
    with pytest.raises(RPCError):
        await client.get_workflow_handle(run_id).describe()


def catches(pid: int, signum: signal.Signals) -> bool:
    """Whether process `pid` has a handler on `signum` now (Linux: /proc's SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_sigterm_while_exit_waits_for_a_thread_finishes_its_tool_call_once(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """SIGTERM while the exit hook waits for a thread's `run()`: the tool call it runs finishes,
    recorded, and the script says so in a line; before, the default handler killed the process
    mid-call, and the next worker ran the tool again."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            **gated(tmp_path),
            # the drain's limit is the workers' graceful shutdown
            "AGENTOR_GRACEFUL_SHUTDOWN": "90",
        }
        run_id = uuid.uuid4().hex
        running = launch(env, "thread", run_id)
        try:
            await until(lambda: ledger_lines(ledger), "the tool to start")
            # the main thread returns at once and the exit hook waits for the
            # thread, its handler on (without one, the signal goes in anyway)
            with contextlib.suppress(AssertionError):
                await until(lambda: catches(running.pid, signal.SIGTERM), "a handler", timeout=3)
            assert running.poll() is None, "the script ended before the tool did"
            running.terminate()
            first = await asyncio.to_thread(read_until, running, "SIGTERM: finishing")
            (tmp_path / "gate").touch()
            _, rest = await asyncio.to_thread(running.communicate, None, 60)
        finally:
            running.kill()
        stderr = first + rest
        # ended as SIGTERM ends a process (143), not 0: the thread's run was cut off
        assert running.returncode == -signal.SIGTERM, stderr
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "The weather in Paris is sunny and 22C.", result.result
    assert "SIGTERM: finishing the calls this process's worker runs (up to 90 s)" in stderr
    assert "Traceback" not in stderr, stderr


async def test_a_daemon_thread_cut_off_at_exit_says_so_in_one_line(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A daemon thread still in `run()` as the interpreter exits (a `ThreadingHTTPServer`'s
    request) is cut off with one line on stderr saying so, not a CancelledError traceback, and
    one more names its run, still open, and how to go on (before, its id was said nowhere);
    the call in flight finishes, once, and the next worker completes the run."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        proc = await asyncio.to_thread(ended, env, "daemon", run_id)
        assert proc.returncode == 0 and json.loads(proc.stdout) == {"started": True}
        lines = proc.stderr.splitlines()
        assert len(lines) == 2, proc.stderr
        left, line = lines
        assert left.startswith(f"run {run_id} is still open"), proc.stderr
        assert f"agent.resume({run_id!r})" in left, proc.stderr
        assert "daemon thread" in line and "cut off" in line and "resume" in line, proc.stderr
        # the next worker runs the call handed back, and the run completes
        agent = plain_agent(ledger, base_url=model.base_url, task_queue=task_queue, temporal=client)
        async with build_worker(client, [agent], task_queue=task_queue):
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


async def test_a_forked_child_runs_only_if_forked_before_the_parents_first_call(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A child forked (multiprocessing, fork) before the parent's first call runs its own run
    and exits. One forked once the parent's worker is up is refused with a clear error at
    its first call, its run never started, and exits at once; the parent carries on.
    Temporal's core is not fork-safe: such a child with a core of its own died of SIGSEGV
    or "free(): invalid pointer" about 1 time in 7 under load (the parent's parked core
    threads stay in the core's process-wide table, and glibc frees their memory when the
    child's threads reuse their stacks)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        outcome = await asyncio.to_thread(script, env, "fork", run_id)
    # 3: refused with FORKED_AFTER_CORE (see child_run)
    assert outcome == {"parent": ["completed", "completed"], "children": [0, 3], "stuck": False}
    keys = [line.split()[1] for line in ledger_lines(ledger)]
    assert sorted(k.split(":")[0] for k in keys) == sorted([run_id, f"{run_id}-e", f"{run_id}-p"])
    with pytest.raises(RPCError):  # the refused child's run was never started
        await client.get_workflow_handle(f"{run_id}-c").describe()


# SIGHUP at exit: the same handler as SIGTERM's, ending the process by SIGHUP (tests/unit/
# test_hangup_signal.py); sent to a real script in test_a_signal_after_a_decision_...
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_an_interrupt_while_a_script_finishes_its_approved_call_at_exit_is_noted(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    signum: signal.Signals,
) -> None:
    """A script approves and ends; as it exits, its worker runs the approved transfer. A first
    Ctrl+C or SIGTERM then is noted and the transfer finishes, recorded; before, it cut the
    transfer off, and the next worker (here the resuming script's) made it again. The script
    then ends as the signal ends a process (it exited 0, as if never interrupted)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            "AGENT_TRANSFER_SECONDS": "3",
        }
        run_id = uuid.uuid4().hex
        call_id = await start_paused(client, model, task_queue, tmp_path, ledger, run_id)
        argv = ["approve", run_id, call_id]
        approving = launch(env, *argv)
        try:
            assert approving.stdout is not None
            decided = await asyncio.to_thread(approving.stdout.readline)  # printed as it ends
            assert json.loads(decided)["decided"] == call_id
            await until(lambda: ledger_lines(ledger), "the transfer to start")
            approving.send_signal(signum)
            _, stderr = await asyncio.to_thread(approving.communicate, None, 60)
        finally:
            approving.kill()
        # ended as the signal ends a process (128 + signum), once the transfer finished
        assert approving.returncode == -signum, stderr
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "Sent 5 to bob.", result.result
    assert f"{signum.name}: finishing the calls" in stderr, stderr
    assert "Traceback" not in stderr, stderr


async def test_a_script_that_starts_a_run_and_returns_says_the_run_waits_for_a_worker(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`astart()`, then the script returns: its worker stops as it exits, so the run waits
    for another worker of its queue. One line says so (the run id, the queue, how to go
    on); before, nothing did. The next worker finishes the run, each tool call once."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        proc = await asyncio.to_thread(ended, env, "start", run_id)
        assert proc.returncode == 0 and json.loads(proc.stdout) == {"started": run_id}
        described = await client.get_workflow_handle(run_id).describe()
        if described.status is not None and described.status.name == "RUNNING":
            [line] = proc.stderr.splitlines()
            assert run_id in line and repr(task_queue) in line and "resume" in line, line
        else:  # its worker finished it before the script's end: nothing to say
            assert proc.stderr == "", proc.stderr
        agent = plain_agent(ledger, base_url=model.base_url, task_queue=task_queue, temporal=client)
        async with build_worker(client, [agent], task_queue=task_queue):
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


async def test_a_script_that_stops_following_a_stream_says_the_run_waits_for_a_worker(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A `stream_chat` loop left at the first tool call, then the script returns: the call in
    flight finishes once, the script exits promptly, and one line names the run left open
    (as after `astart()`); the next worker finishes it, each tool call once."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = env_for(temporal_address, model, task_queue, tmp_path, ledger)
        run_id = uuid.uuid4().hex
        started = time.monotonic()
        proc = await asyncio.to_thread(ended, env, "stream_break", run_id)
        took = time.monotonic() - started
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["events"][-1] == "tool_call"
        assert took < 30, f"the script took {took:.0f} s to exit"
        described = await client.get_workflow_handle(run_id).describe()
        if described.status is not None and described.status.name == "RUNNING":
            [line] = proc.stderr.splitlines()
            assert run_id in line and repr(task_queue) in line and "resume" in line, line
        else:  # its worker finished it before the script's end: nothing to say
            assert proc.stderr == "", proc.stderr
        agent = plain_agent(ledger, base_url=model.base_url, task_queue=task_queue, temporal=client)
        async with build_worker(client, [agent], task_queue=task_queue):
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


@pytest.mark.parametrize("command", ["arun_timeout", "arun_raises"])
async def test_a_script_that_stops_waiting_on_arun_says_the_run_waits_for_a_worker(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    command: str,
) -> None:
    """The script's own `asyncio.wait_for` around `arun` runs out mid-tool, or its own code
    raises while `arun` runs on another task (`asyncio.run` cancels it): the call in flight
    finishes once at exit, and one line names the run left open, once, with how to go on (as
    after `astart()`; before, nothing did, and the run waited for another worker in silence);
    the next worker finishes it."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            # in flight until the exit names the run, however slow the machine
            **gated(tmp_path),
        }
        run_id = uuid.uuid4().hex
        running = launch(env, command, run_id)
        try:
            # the exit hook names the run left open, then drains the call in flight
            first = await asyncio.to_thread(read_until, running, "is still open", 60)
            (tmp_path / "gate").touch()
            out, rest = await asyncio.to_thread(running.communicate, None, 60)
        finally:
            running.kill()
        proc = subprocess.CompletedProcess(running.args, running.returncode, out, first + rest)
        if command == "arun_timeout":
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout) == {"status": "timed out"}
        else:  # the script's traceback, then the line
            assert proc.returncode == 1, proc.stderr
            assert "RuntimeError: the script's own bug" in proc.stderr, proc.stderr
        assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
        described = await client.get_workflow_handle(run_id).describe()
        assert described.status is not None and described.status.name == "RUNNING"
        [line] = [line for line in proc.stderr.splitlines() if run_id in line]
        assert "is still open" in line and repr(task_queue) in line, proc.stderr
        assert f"agent.resume({run_id!r})" in line, proc.stderr
        if command == "arun_timeout":
            assert proc.stderr == f"{line}\n", proc.stderr
        agent = plain_agent(ledger, base_url=model.base_url, task_queue=task_queue, temporal=client)
        async with build_worker(client, [agent], task_queue=task_queue):
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


@pytest.mark.parametrize(
    ("signum", "late"),
    [(signal.SIGTERM, False), (signal.SIGHUP, True)],
    ids=["SIGTERM", "SIGHUP-as-the-idle-worker-stops"],
)
async def test_a_signal_after_a_decision_while_the_script_works_on_finishes_the_call_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    signum: signal.Signals,
    late: bool,
) -> None:
    """A script approves, then goes on with its own work while its embedded worker (up a while
    after the call) runs the approved transfer. SIGTERM or SIGHUP then, even once the worker,
    idle past `WORKER_LINGER`, is stopping, lets the transfer finish, recorded, says so, and
    ends the process by that signal; before, the default cut the transfer off and the next
    worker made it again."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            "AGENT_TRANSFER_SECONDS": "5",
        }
        run_id = uuid.uuid4().hex
        call_id = await start_paused(client, model, task_queue, tmp_path, ledger, run_id)
        argv = ["approve_then_work", run_id, call_id]
        approving = launch(env, *argv)
        try:
            assert approving.stdout is not None
            decided = await asyncio.to_thread(approving.stdout.readline)
            decided_at = time.monotonic()
            assert json.loads(decided)["decided"] == call_id
            await until(lambda: ledger_lines(ledger), "the transfer to start")
            if late:  # the worker's idle time after the call has run out: it is stopping
                await until(
                    lambda: time.monotonic() - decided_at > WORKER_LINGER + 0.5, "the linger"
                )
                assert time.monotonic() - decided_at < 4.5, "the transfer ended meanwhile"
            approving.send_signal(signum)
            _, stderr = await asyncio.to_thread(approving.communicate, None, 60)
        finally:
            approving.kill()
        assert approving.returncode == -signum, stderr
        resumed = await resume_here(client, model, task_queue, tmp_path, ledger, run_id)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "Sent 5 to bob.", result.result
    assert f"{signum.name}: finishing the calls" in stderr, stderr
    assert "Traceback" not in stderr, stderr


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


@pytest.mark.parametrize("command", ["run", "thread"], ids=["in-run", "at-exit"])
async def test_ctrl_c_then_sigterm_finishes_the_tool_call_once_then_ends_by_sigterm(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    command: str,
) -> None:
    """Ctrl+C mid-tool, then SIGTERM while the call is being finished (a Jupyter kernel's
    restart or shutdown interrupts the kernel, then terminates it; a supervisor escalating):
    the SIGTERM is noted too, in a line, the call finishes, recorded, and the process then ends
    by SIGTERM. Only the same signal again abandons the calls, as the first line says ("press
    Ctrl+C again"). Before, the first signal put every default back, so the SIGTERM killed the
    process mid-call and the next worker ran the tool again (seen: a notebook's restart)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            **env_for(temporal_address, model, task_queue, tmp_path, ledger),
            # the call is finished only once the SIGTERM's line is out: with a tool of a
            # fixed 2 s, then 5 s, under a clean-clone run's load the drain once ended
            # first, and the SIGTERM then met a process already exiting (no line)
            "AGENT_TOOL_SECONDS": "60",
            "AGENT_TOOL_GATE": str(tmp_path / "gate"),
        }
        run_id = uuid.uuid4().hex
        argv = [command, run_id, "Weather in Paris?"]
        running = launch(env, *argv)
        try:
            await until(lambda: ledger_lines(ledger), "the tool to start")
            if command == "thread":  # the main thread has returned: the exit hook waits
                with contextlib.suppress(AssertionError):
                    await until(lambda: catches(running.pid, signal.SIGTERM), "a handler", 3)
            running.send_signal(signal.SIGINT)
            first = await asyncio.to_thread(read_until, running, "SIGINT: finishing")
            running.send_signal(signal.SIGTERM)
            second = await asyncio.to_thread(read_until, running, "SIGTERM:")
            (tmp_path / "gate").touch()
            _, rest = await asyncio.to_thread(running.communicate, None, 60)
        finally:
            running.kill()
        stderr = first + second + rest
        assert running.returncode == -signal.SIGTERM, stderr
        [line] = [line for line in stderr.splitlines() if line.startswith("SIGTERM:")]
        assert "finishing the calls" in line and "send it again to abandon them" in line, stderr
        assert "Traceback" not in stderr, stderr
        left = [line for line in stderr.splitlines() if f"run {run_id} is still open" in line]
        assert len(left) == 1, stderr
        # the next worker goes on from the call's result
        agent = plain_agent(ledger, base_url=model.base_url, task_queue=task_queue, temporal=client)
        async with build_worker(client, [agent], task_queue=task_queue):
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    assert outcome["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    [result] = [e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"]
    assert result.result == "The weather in Paris is sunny and 22C.", result.result
