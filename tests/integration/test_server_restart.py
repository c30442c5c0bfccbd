"""The Temporal server itself SIGKILLed mid-run and restarted on the same database file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import forkserver
import httpx
import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal._runs import decide_by_signal
from agentor_temporal.cli import execute
from agentor_temporal.serve import create_app
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import Decision, policies

from helpers import (
    ANSWER,
    PROMPT,
    ROOT,
    SEED_EVENT_TYPES,
    DevServerProcess,
    connected_to,
    error_line,
    finish,
    ledger_lines,
    spawn,
    stop_process,
    transfer_tool,
    until,
    wait_until,
    weather_agent,
    weather_or_transfer,
    weather_tool,
)
from serve_http import TOKEN, Server

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


#: longer than the client SDK's own retries of a call (~10 s), which a caller
#: waiting in `run()` outlived no more: it exited with "tcp connect error"
OUTAGE = 12.0


async def test_a_waiting_caller_rides_out_a_server_outage(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`agent.run()` in a plain script waits through a 12 s outage, saying so once, and returns;
    the HTTP server's GET /runs/{id} asked during the outage rides it out as the writes do (it
    answered 503 after the SDK's 10 s of retries)."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "1",
    }
    served = Server(
        {
            **os.environ,
            **env,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "AGENTOR_SERVE_TOKEN": TOKEN,
        },
        tmp_path,
        server.address,
    )
    served.start()
    proc = spawn(["run", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        server.kill()
        down = time.monotonic()
        with served.client() as http, ThreadPoolExecutor(1) as pool:
            # a thread of its own: wait_until below blocks this loop
            read = pool.submit(lambda: http.get(f"/runs/{run_id}", timeout=120))
            # the caller is still waiting when the server comes back
            wait_until(
                lambda: time.monotonic() - down > OUTAGE or proc.poll() is not None, "outage"
            )
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert not read.done(), read.result().text  # the read, too, still waits
            server.start()
            out, err = proc.communicate(timeout=60)
            answer = read.result(60)
    finally:
        stop_process(proc)
        served.kill()
        server.stop()

    assert answer.status_code == 200, answer.text
    assert answer.json()["run_id"] == run_id

    assert proc.returncode == 0, err[-4000:]
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert result["status"] == "completed" and result["final_output"] == ANSWER
    # said once, naming the address, not a silent hang
    said = [line for line in err.splitlines() if "is unreachable" in line]
    assert len(said) == 1 and server.address in said[0], err[-4000:]
    # the core's retry warnings of the outage go through logging, not into the script's
    # stdout (a line each second, in the middle of what it prints)
    assert [line for line in out.splitlines() if not line.startswith("{")] == [], out[-4000:]


async def test_a_stream_follower_rides_out_a_server_outage(
    model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`stream_chat` goes on through a 12 s outage and ends with the run's `run_end`."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "1",
    }
    proc = spawn(["stream", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        server.kill()
        down = time.monotonic()
        wait_until(lambda: time.monotonic() - down > OUTAGE or proc.poll() is not None, "outage")
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        server.start()
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
        server.stop()

    assert proc.returncode == 0, err[-4000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    events = [e for e in lines if e["type"] != "text_delta"]
    assert [e["type"] for e in events] == SEED_EVENT_TYPES
    assert events[-1]["status"] == "completed"


#: longer than the decisions' patience in the test below, so that it would run out
DOWN = 20.0


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """`agentor-temporal ARGS` in its own process, its output kept."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    full.update(env, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return forkserver.ForkedPopen(
        [sys.executable, "-m", "agentor_temporal", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _embedded_serving(task_queue: str) -> bool:
    """Whether this process's embedded worker still serves (or is stopping on) `task_queue`."""
    from agentor_temporal._runtime import Runtime

    runtime = Runtime._instance
    workers = list(runtime._workers.values()) if runtime is not None else []
    return any(w.task_queue == task_queue and (w.worker or w.stopping) for w in workers)


async def test_decisions_and_forks_ride_out_an_outage_and_give_ups_say_how_to_re_attach(
    task_queue: str, tmp_path: Path, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One 20 s outage serves eight callers.

    `aapprove`, a decision by signal, `afork` and `arun` sent while the server
    is down go through once it is back (the decision's bound on a worker,
    shorter than the outage, does not count it; the fork and the run start
    once), and so does `approve --wait 8` from the CLI (no `--agent`), whose
    bound is shorter than the SDK's own retries before the outage shows; a
    script's `run()`, a stream follower and a CLI command whose patience is
    2 s give up, each clearly: where, and how that entry point re-attaches.
    """
    # shorter than the outage (DOWN): only the time the server answers counts against
    # it; longer than the client's own retries (~10 s), which show the server gone
    monkeypatch.setattr(policies, "DECISION_PATIENCE", timedelta(seconds=15))
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    ran, streamed, commanded = (uuid.uuid4().hex for _ in range(3))
    run_ledger, stream_ledger = str(tmp_path / "run.ledger"), str(tmp_path / "stream.ledger")
    gate = tmp_path / "gate"
    procs: list[subprocess.Popen[str]] = []
    approving: subprocess.Popen[str] | None = None
    try:
        with ScriptedModelServer(weather_or_transfer) as model:
            agent = weather_agent(
                base_url=model.base_url,
                task_queue=task_queue,
                temporal=server.address,
                tools=[weather_tool(ledger), transfer_tool(ledger)],
            )
            paused, by_signal, by_cli = [await agent.arun("Pay bob 5") for _ in range(3)]
            assert paused.status == by_signal.status == by_cli.status == "awaiting_approval"
            (pending,), (signalled,) = paused.pending_approvals, by_signal.pending_approvals
            (asked,) = by_cli.pending_approvals
            parent = await agent.arun(PROMPT)
            assert parent.status == "completed"

            def env(name: str, **more: str) -> dict[str, str]:
                # a queue each: one process's worker would take another's tool (the
                # CLI's waits at its gate, and its ledger is not theirs)
                return {
                    "TEMPORAL_ADDRESS": server.address,
                    "MODEL_BASE_URL": model.base_url,
                    "AGENT_TASK_QUEUE": f"{task_queue}-{name}",
                    "AGENTOR_OUTAGE_PATIENCE": "2",
                    **more,
                }

            # their tools outlast all that comes before the kill, however loaded the
            # machine: with 9 s, a run once ended before the outage began
            procs = [
                spawn(
                    ["run", "--run-id", ran], env("run", AGENT_LEDGER=run_ledger, TOOL_DELAY="40")
                ),
                spawn(
                    ["stream", "--run-id", streamed],
                    env("stream", AGENT_LEDGER=stream_ledger, TOOL_DELAY="40"),
                ),
                _cli(
                    ["run", "--agent", "procs.cli_agents:agent", "--run-id", commanded, PROMPT],
                    env("cli", AGENT_GATE=str(gate)),
                ),
            ]
            client = await Client.connect(server.address)
            store = TemporalStore(client)
            wait_until(
                lambda: ledger_lines(run_ledger) and ledger_lines(stream_ledger),
                "the script's runs' tools",
                timeout=60,
            )
            async with asyncio.timeout(60):  # the command's run at its (gated) tool
                while "tool_call" not in [e.type for e in await store.aload(commanded)]:
                    await asyncio.sleep(0.1)
            # sent before the outage by a caller with no worker: it waits for one when
            # the server dies, and the run's next worker takes it once the server is back
            decider = weather_agent(
                base_url=model.base_url,
                task_queue=task_queue,
                temporal=server.address,
                tools=[weather_tool(ledger), transfer_tool(ledger)],
                embedded_worker=False,
            )
            # the runs' own embedded worker (this process's) lingers after their calls: it
            # must be gone first, or it takes the decision at once (the script processes'
            # tools, forked, can be running within its linger)
            await until(
                lambda: not _embedded_serving(task_queue), "the embedded worker to stop", 60
            )
            decided = asyncio.ensure_future(decider.aapprove(paused.run_id, pending.call_id))
            await asyncio.wait({decided}, timeout=2)
            assert not decided.done(), decided.exception()
            # a bound on the worker (8 s) shorter than the SDK's own retries (~10 s), which
            # fail first when the server dies: it ran out in them ("no worker took it"). 5 s
            # ran out under load (2 cores, load 16) before the worker started below, once the
            # server is back, took the decision
            approving = _cli(
                ["approve", by_cli.run_id, asked.call_id, "--wait", "8", "--by", "dave"],
                {"TEMPORAL_ADDRESS": server.address},
            )
            await until(lambda: connected_to(approving.pid, server.port), "the CLI to connect")
            server.kill()
            down = time.monotonic()
            gate.touch()  # the command's tool finishes (its outcome waits for the server)
            forked = asyncio.ensure_future(agent.afork(parent.run_id, "Weather in Oslo?"))
            new_id = uuid.uuid4().hex
            started = asyncio.ensure_future(agent.arun(PROMPT, run_id=new_id))
            # as sent when Temporal takes no more updates from a run
            denial = Decision(signalled.call_id, False, "not today", "carol")
            denied = asyncio.ensure_future(decide_by_signal(client, by_signal.run_id, denial))
            await until(
                lambda: (
                    time.monotonic() - down > DOWN
                    and all(proc.poll() is not None for proc in procs)
                ),
                "the outage, and the impatient callers to give up",
                timeout=90,
            )
            outputs = [proc.communicate(timeout=10) for proc in procs]
            for task in (decided, forked, denied, started):
                assert not task.done(), task.exception()
            assert approving.poll() is None, approving.communicate()[1][-4000:]
            server.start()
            # a worker for the signalled run (the others' calls serve theirs)
            async with build_worker(client, [agent], task_queue=task_queue):
                await asyncio.wait_for(asyncio.gather(decided, denied), 60)
                approved_out, approved_err = await asyncio.to_thread(approving.communicate, 60)
            fork = await asyncio.wait_for(forked, 60)
            begun = await asyncio.wait_for(started, 60)
            result = await asyncio.wait_for(agent.aresume(paused.run_id), 60)
            refused = await asyncio.wait_for(agent.aresume(by_signal.run_id), 60)
            by_cli_result = await asyncio.wait_for(agent.aresume(by_cli.run_id), 60)
            fork_segments = await TemporalStore(client).segments(fork.run_id)
            new_segments = await TemporalStore(client).segments(new_id)
    finally:
        for proc in [*procs, approving]:
            stop_process(proc)
        server.stop()

    assert approving is not None and approving.returncode == 0, approved_err[-4000:]
    decisions = [e for e in by_cli_result.events if e.type == "approval_decision"]
    assert [(e.status, e.result) for e in decisions] == [("approved", "dave")], approved_out
    assert result.status == "completed" and result.final_output.startswith("Done: Sent")
    decisions = [e for e in result.events if e.type == "approval_decision"]
    assert [e.status for e in decisions] == ["approved"]
    assert refused.status == "completed"
    decisions = [e for e in refused.events if e.type == "approval_decision"]
    assert [(e.status, e.result) for e in decisions] == [("denied", "carol")]
    assert fork.status == "completed" and fork.run_id != parent.run_id
    assert len(fork_segments) == 1  # started once
    assert begun.status == "completed" and begun.final_output.startswith("Done: The weather")
    assert len(new_segments) == 1
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == [
        "get_weather",
        "get_weather",
        "get_weather",
        "transfer",
        "transfer",
    ]
    # each gave up saying where, and how its own entry point picks the run up
    (_, run_err), (_, stream_err), (_, cli_err) = outputs

    run_said = error_line(run_err)
    assert procs[0].returncode != 0 and "ConnectionFailed" in run_said, run_err[-4000:]
    assert server.address in run_said and "AGENTOR_OUTAGE_PATIENCE" in run_said, run_said
    assert f"resume({ran!r})" in run_said, run_said
    stream_said = error_line(stream_err)
    assert procs[1].returncode != 0 and server.address in stream_said, stream_err[-4000:]
    assert f"stream({streamed!r}, after=" in stream_said, stream_said
    assert "resume(" not in stream_said, stream_said
    cli_said = error_line(cli_err)
    assert procs[2].returncode != 0 and server.address in cli_said, cli_err[-4000:]
    again = f"agentor-temporal resume {commanded} --agent procs.cli_agents:agent"
    assert again in cli_said and "Traceback" not in cli_err, cli_err[-4000:]


async def _executed(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    """The CLI's exit status running `args` in this process, and what it wrote to stderr."""
    capsys.readouterr()
    code = await asyncio.wait_for(asyncio.to_thread(execute, args), 60)
    return code, capsys.readouterr().err


async def test_a_server_back_empty_says_the_run_is_gone_and_whether_its_mirror_has_it(
    task_queue: str, tmp_path: Path, ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server restarted without its database (an in-memory dev server, a lost disk).

    A caller waiting in `arun`, a follower of that run and one of a run
    waiting for approval, and a decision sent then, each end in a `KeyError`
    saying the run is gone from the server and that its JSONL mirror has it
    (before: the SDK's raw `workflow not found` traceback from `run()`, a
    stream that ended quietly as if done, a paused run's follower that waited
    for ever). `aresume` then continues each from the mirror, the paused one
    from the answer it waits on, the model not asked again (it was: a new call).
    """
    db = tmp_path / "temporal.db"
    server = DevServerProcess(db, tmp_path / "server.log").start()
    mirror = FileStore(tmp_path / "runs")
    running, paused_id = uuid.uuid4().hex, uuid.uuid4().hex
    command: subprocess.Popen[str] | None = None

    async def followed(run_id: str) -> list[str]:
        return [e.type async for e in agent.stream(run_id)]

    try:
        with ScriptedModelServer(weather_or_transfer) as model:
            agent = weather_agent(
                base_url=model.base_url,
                task_queue=task_queue,
                temporal=server.address,
                store=mirror,
                tools=[weather_tool(ledger, delay=3), transfer_tool(ledger)],
            )
            # the CLI's `run`, at its (gated) tool: it printed a KeyError's traceback
            commanded = uuid.uuid4().hex
            command = _cli(
                ["run", "--agent", "procs.cli_agents:agent", "--run-id", commanded, PROMPT],
                {
                    "TEMPORAL_ADDRESS": server.address,
                    "MODEL_BASE_URL": model.base_url,
                    "AGENT_TASK_QUEUE": f"{task_queue}-cli",
                    "AGENT_GATE": str(tmp_path / "gate"),
                },
            )
            store = TemporalStore(await Client.connect(server.address))
            async with asyncio.timeout(60):
                while "tool_call" not in [e.type for e in await store.aload(commanded)]:
                    await asyncio.sleep(0.1)
            paused = await agent.arun("Pay bob 5", run_id=paused_id)
            assert paused.status == "awaiting_approval"
            waiting = asyncio.ensure_future(agent.arun(PROMPT, run_id=running))
            forked = asyncio.ensure_future(agent.afork(paused_id, "Weather in Oslo?"))
            await until(lambda: len(ledger_lines(ledger)) == 2, "the weather tools to start")
            followers = [asyncio.ensure_future(followed(r)) for r in (running, paused_id)]
            await asyncio.wait(followers, timeout=1)
            assert not any(f.done() for f in followers)
            server.kill()
            db.unlink()
            server.start()
            (tmp_path / "gate").touch()
            _, command_err = await asyncio.to_thread(command.communicate, timeout=60)
            outcomes = await asyncio.wait_for(
                asyncio.gather(waiting, *followers, return_exceptions=True), 60
            )
            with pytest.raises(KeyError) as fork_gone:
                await asyncio.wait_for(forked, 60)
            (call,) = paused.pending_approvals
            with pytest.raises(KeyError) as refused:
                await asyncio.wait_for(agent.aapprove(paused_id, call), 60)
            outcomes.append(refused.value)
            # the CLI's show and export of it said only 'no run with id ...' (run in this
            # process: one of their own only added its imports; a traceback raises here)
            address = ["--temporal", server.address]
            shown_code, shown_err = await _executed(capsys, ["show", running, *address])
            exported_code, exported_err = await _executed(
                capsys, ["export", running, "--store", str(tmp_path / "runs"), *address]
            )
            # serve's routes: a run only the mirror holds was 'no run with id', and its
            # resume refused so (the facade's resume continues it)
            transport = httpx.ASGITransport(app=create_app([agent]))
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as http:
                read = await http.get(f"/runs/{running}")
                resumed = await asyncio.wait_for(http.post(f"/runs/{running}/resume"), 60)
            assert read.status_code == 404, read.text
            said = read.json()["error"]
            assert f"Run {running!r} is gone from Temporal at {server.address}" in said, said
            assert f"POST /runs/{running}/resume continues it from its mirror" in said, said
            assert resumed.status_code == 200, resumed.text
            restored = resumed.json()
            asked = model.request_count
            paused_again = await asyncio.wait_for(agent.aresume(paused_id), 60)
            # it goes on from the answer its mirror holds: the model is not asked
            # (and paid) again for the call it waits on (it was, a new call id)
            assert model.request_count == asked
    finally:
        stop_process(command)
        server.stop()

    for (run_id, events), outcome in zip(
        [(running, 3), (running, 3), (paused_id, 4), (paused_id, 4)], outcomes, strict=True
    ):
        assert isinstance(outcome, KeyError), outcome
        said = str(outcome.args[0])
        assert f"Run {run_id!r} is gone from Temporal at {server.address}" in said, said
        assert f"its first {events} events: `resume({run_id!r})`" in said, said
        # the shell's way on is one that runs: resume wants the agent (it was left out)
        assert f"`agentor-temporal resume {run_id} --agent MODULE:ATTR`" in said, said
    assert shown_code == 1 and "Traceback" not in shown_err, shown_err[-4000:]
    assert f"no run with id {running!r} in Temporal at {server.address}. If the server" in (
        shown_err
    )
    assert f"`agentor-temporal show {running} --store DIR` shows it from there" in shown_err
    assert f"`agentor-temporal resume {running} --agent MODULE:ATTR`" in shown_err
    assert exported_code == 1 and "Traceback" not in exported_err, exported_err[-4000:]
    said = error_line(exported_err)
    assert f"Run {running!r} is gone from Temporal at {server.address}" in said, said
    assert f"its first 3 events: `resume({running!r})`" in said, said
    assert f"`agentor-temporal resume {running} --agent MODULE:ATTR`" in said, said
    said = str(fork_gone.value.args[0])
    assert "is gone from Temporal" in said and "`resume(" in said, said
    assert command.returncode != 0 and "Traceback" not in command_err, command_err[-4000:]
    said = error_line(command_err)
    assert f"Run {commanded!r} is gone from Temporal at {server.address}" in said, said
    assert restored["status"] == "completed", restored
    assert restored["final_output"].startswith("Done: The weat"), restored
    assert paused_again.status == "awaiting_approval"
    assert [p.tool for p in paused_again.pending_approvals] == ["transfer"]
    assert [p.call_id for p in paused_again.pending_approvals] == [call.call_id]
