"""`agentor-temporal` as a user runs it: a real process against a real dev server.

Every command runs as `python -m agentor_temporal ...` in a fresh interpreter
with `--temporal` naming the session's dev server, the agent loaded by path
(`procs.cli_agents:agent`, pointed at this test's scripted model and task
queue). Outputs and exit codes are the contract: 0 done, 1 the operation
failed, 2 usage error, and never a traceback for a user's mistake.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import forkserver
import pytest
from temporalio.client import Client

from agentor_temporal import FileStore
from agentor_temporal._cli_parser import build_parser
from agentor_temporal.connection import stop_dev_server, temporal_binary
from agentor_temporal.testing import Fail, Reply, ScriptedModelServer, tool_then_answer

from helpers import (
    ANSWER,
    PROMPT,
    ROOT,
    SEED_EVENT_TYPES,
    ledger_lines,
    wait_until,
    weather_agent,
)

AGENT = "procs.cli_agents:agent"
FIXTURES = ROOT / "tests" / "fixtures"
DAY = 86400.0


def _env(**extra: str) -> dict[str, str]:
    # the machine's own Temporal settings must not leak into a test
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run the CLI to completion; returns the CompletedProcess."""
    return forkserver.run(
        [sys.executable, "-m", "agentor_temporal", *args],
        env=_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_all(calls: list[tuple[str, ...]], env: dict[str, str] | None = None) -> list[Any]:
    """Run independent CLI commands side by side (each its own process); results in order."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda args: cli(*args, env=env), calls))


def parsed(*args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a command line the CLI's parser alone answers (`--help`,
    a usage error), parsed in this process by the parser `python -m agentor_temporal` uses.

    A fresh interpreter costs ~3 s of CPU in imports: the tests run the real entry point once
    (`cli("--help")`, `cli()`) and the parser's other answers here. A line the parser accepts
    is a test's mistake (it would run a command): it fails.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            build_parser().parse_args(list(args))
        except SystemExit as exc:
            code = exc.code
        else:
            raise AssertionError(f"the parser accepted {args}: it is not a usage error")
    assert isinstance(code, int), code
    return code, out.getvalue(), err.getvalue()


class Running:
    """A CLI process whose output lines are read as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = forkserver.ForkedPopen(
            [sys.executable, "-m", "agentor_temporal", *args],
            env=_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._readers = [
            threading.Thread(target=self._read, args=(name,), daemon=True)
            for name in ("stdout", "stderr")
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, name: str) -> None:
        stream = getattr(self.process, name)
        for line in stream:
            self.lines[name].append(line.rstrip("\n"))

    def wait_for(self, name: str, needle: str, timeout: float = 60) -> str:
        """The first line of stream `name` containing `needle`."""

        def found() -> str | None:
            hits = [line for line in list(self.lines[name]) if needle in line]
            if not hits and self.process.poll() is not None:
                raise AssertionError(f"the CLI exited ({self.process.returncode}): {self.lines}")
            return hits[0] if hits else None

        return str(wait_until(found, f"{needle!r} on {name}", timeout=timeout))

    def finish(self, timeout: float = 120) -> int:
        """Wait for the exit; returns the status."""
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


@pytest.fixture
def agent_env(model: ScriptedModelServer, task_queue: str, ledger: str) -> dict[str, str]:
    """What `procs.cli_agents:agent` reads: this test's model, queue and ledger."""
    return {
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
    }


def _run_json(temporal_address: str, env: dict[str, str], prompt: str = PROMPT) -> Any:
    out = cli("run", "--agent", AGENT, "--temporal", temporal_address, "--json", prompt, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# -- help ------------------------------------------------------------------------------


def test_every_command_explains_itself_with_examples() -> None:
    """`--help` of the CLI and of every command exits 0 and shows examples."""
    top = cli("--help")
    assert top.returncode == 0
    commands = ["dev", "worker", "run", "resume", "fork", "show", "list", "export", "prune"]
    for command in commands:
        assert command in top.stdout
    assert "exit status" in top.stdout
    for command in commands:
        code, stdout, stderr = parsed(command, "--help")
        assert code == 0, stderr
        assert "examples:" in stdout and f"agentor-temporal {command}" in stdout
        if command != "dev":
            assert "--temporal" in stdout


# -- run / resume -------------------------------------------------------------------------


def test_run_prints_its_id_at_once_then_progress_then_the_answer(
    temporal_address: str, agent_env: dict[str, str], ledger: str, tmp_path: Path
) -> None:
    """`run` prints the run id before any work, the tool in flight as it runs, then the answer."""
    gate = tmp_path / "gate"
    run = Running(
        ["run", "--agent", AGENT, "--temporal", temporal_address, PROMPT],
        {**agent_env, "AGENT_GATE": str(gate)},
    )
    try:
        run_id = run.wait_for("stdout", "run_id: ").split()[1]
        run.wait_for("stderr", "turn 1: calling get_weather(city='London')")
        # the tool is held at its gate: the run is in flight, nothing answered yet
        assert run.process.poll() is None and ledger_lines(ledger) == []
        assert run.lines["stdout"] == [f"run_id: {run_id}"]
        shown = cli("show", run_id, "--temporal", temporal_address)
        assert "status   running" in shown.stdout
        gate.touch()
        assert run.finish() == 0
    finally:
        gate.touch()
        run.kill()
    assert run.lines["stdout"] == [f"run_id: {run_id}", ANSWER]
    progress = run.lines["stderr"]
    for line in [
        "  turn 1: asking gpt-4o-mini",
        "  turn 1: gpt-4o-mini asked for get_weather [15 tokens, 15 so far]",
        "  turn 1: calling get_weather(city='London')",
        "  turn 1: get_weather -> The weather in London is sunny and 22C.",
        "  turn 2: asking gpt-4o-mini",
        "  turn 2: gpt-4o-mini answered [15 tokens, 30 so far]",
        "  completed, 30 tokens",
    ]:
        assert line in progress, f"{line!r} not in {progress}"
    assert len(ledger_lines(ledger)) == 1


def test_an_interrupted_run_says_its_worker_finishes_the_call_and_a_second_abandons_it(
    temporal_address: str, agent_env: dict[str, str], ledger: str, tmp_path: Path
) -> None:
    """Ctrl+C to `run` mid-tool: it says it was interrupted, then in one line that its worker
    finishes the call and that another interrupt abandons it; another does, at once (exit
    130). Before, the first said "this one has stopped" and waited silently for the call, a
    second only got that line, and it took a third to abandon the call."""
    gate = tmp_path / "gate"
    run = Running(
        ["run", "--agent", AGENT, "--temporal", temporal_address, PROMPT],
        {**agent_env, "AGENT_GATE": str(gate)},
    )
    try:
        run.wait_for("stderr", "turn 1: calling get_weather(city='London')")
        run.process.send_signal(signal.SIGINT)
        noted = run.wait_for("stderr", "finishing the calls this command's worker runs")
        assert "interrupt again to abandon them" in noted
        # the tool is still held at its gate: the second interrupt abandons it
        run.process.send_signal(signal.SIGINT)
        assert run.finish(30) == 130
    finally:
        gate.touch()
        run.kill()
    assert ledger_lines(ledger) == []
    stderr = run.lines["stderr"]
    [interrupted] = [line for line in stderr if "interrupted: run" in line]
    assert "has stopped" not in interrupted and stderr.index(interrupted) < stderr.index(noted)
    assert not any("Traceback" in line for line in stderr), stderr


async def test_run_with_another_agents_run_id_is_refused_before_narrating_it(
    client: Client, temporal_address: str, agent_env: dict[str, str], task_queue: str
) -> None:
    """`run --run-id X` where X is another agent's finished run narrated that run (its
    prompt, its answer) before the refusal came: refused first, naming its agent."""
    with ScriptedModelServer([Reply("Support's private answer.")]) as model:
        other = weather_agent(
            base_url=model.base_url, task_queue=task_queue, temporal=client, name="Support Agent"
        )
        done = await other.arun("Support's private question")
    assert done.status == "completed" and done.run_id is not None
    out = await asyncio.to_thread(
        cli,
        "run", "--agent", AGENT, "--temporal", temporal_address, "--run-id", done.run_id, PROMPT,
        env=agent_env,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert f"Run {done.run_id!r} belongs to agent 'Support Agent'" in out.stderr, out.stderr
    assert "private" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert "Traceback" not in out.stderr


def test_run_json_prints_the_run_result_and_resume_returns_it_without_work(
    temporal_address: str, agent_env: dict[str, str], model: ScriptedModelServer, ledger: str
) -> None:
    """`run --json` prints RunResult.to_dict(); `resume` of it asks no model and runs no tool."""
    out = cli(
        "run", "--agent", AGENT, "--temporal", temporal_address, "--json", PROMPT, env=agent_env
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == {
        "run_id",
        "status",
        "final_output",
        "error",
        "usage",
        "messages",
        "events",
        "pending_approvals",
    }
    assert result["status"] == "completed" and result["final_output"] == ANSWER
    assert result["usage"] == {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30}
    assert [e["type"] for e in result["events"]][::3] == ["run_start", "tool_result", "run_end"]
    assert out.stderr.splitlines()[0] == f"run_id: {result['run_id']}"
    requests = model.request_count

    again = cli(
        "resume", result["run_id"], "--agent", AGENT, "--temporal", temporal_address, env=agent_env
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"run_id: {result['run_id']}", ANSWER]
    assert "already finished, nothing was run" in again.stderr
    as_json = cli(
        "resume",
        result["run_id"],
        "--agent",
        AGENT,
        "--temporal",
        temporal_address,
        "--json",
        env=agent_env,
    )
    assert json.loads(as_json.stdout)["events"] == result["events"]
    assert model.request_count == requests and len(ledger_lines(ledger)) == 1


def test_a_prompt_or_a_forks_input_is_read_from_stdin_off_the_command_line(
    temporal_address: str, agent_env: dict[str, str]
) -> None:
    """`run ... -` and `fork ... --input -` read the message from stdin: a command line is
    visible to every user of the machine (`ps`), a prompt holding something private is not
    put there."""

    def piped(*args: str, text: str) -> Any:
        return forkserver.run(
            [sys.executable, "-m", "agentor_temporal", *args, "--temporal", temporal_address],
            env=_env(**agent_env),
            input=text,
            capture_output=True,
            text=True,
            timeout=120,
        )

    out = piped("run", "--agent", AGENT, "--json", "-", text=PROMPT + "\n")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["events"][0]["messages"][-1] == {"role": "user", "content": PROMPT}
    assert result["final_output"] == ANSWER
    fork = piped(
        "fork", result["run_id"], "--agent", AGENT, "--json", "--input", "-", text="And Paris?"
    )
    assert fork.returncode == 0, fork.stderr
    assert json.loads(fork.stdout)["final_output"].endswith(
        "The weather in Paris is sunny and 22C."
    )
    empty = piped("run", "--agent", AGENT, "-", text="\n")
    assert empty.returncode == 2 and "error: the prompt is empty" in empty.stderr


def test_failed_run_exits_1_and_resume_continues_it(
    temporal_address: str, agent_env: dict[str, str]
) -> None:
    """A failed run exits 1 with its error; `resume` narrates only the new segment and exits 0."""
    with ScriptedModelServer([Fail(400, "the request was refused")]) as model:
        env = {**agent_env, "MODEL_BASE_URL": model.base_url}
        failed = cli("run", "--agent", AGENT, "--temporal", temporal_address, PROMPT, env=env)
        assert failed.returncode == 1
        run_id = failed.stdout.splitlines()[0].split()[1]
        assert f"error: run {run_id} ended failed:" in failed.stderr
        assert "the request was refused" in failed.stderr
        assert "Traceback" not in failed.stderr

        resumed = cli("resume", run_id, "--agent", AGENT, "--temporal", temporal_address, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == [f"run_id: {run_id}", ANSWER]
    assert "  turn 1: calling get_weather(city='London')" in resumed.stderr.splitlines()
    assert "completed, 30 tokens" in resumed.stderr
    assert "refused" not in resumed.stderr, "the failed segment was narrated again"


# -- show / export / list ----------------------------------------------------------------------


def test_show_reads_a_finished_run_from_history_or_from_its_store(
    temporal_address: str, agent_env: dict[str, str], tmp_path: Path
) -> None:
    """`show` prints a run's events readably and as JSONL from Temporal (no worker) or a store."""
    runs = tmp_path / "runs"
    # the run's process, and with it the only worker, is gone before `show`
    result = _run_json(temporal_address, {**agent_env, "AGENT_STORE": str(runs)})
    run_id = result["run_id"]

    readable = cli("show", run_id, "--temporal", temporal_address)
    assert readable.returncode == 0, readable.stderr
    lines = readable.stdout.splitlines()
    assert lines[0] == f"run      {run_id}"
    assert "agent    Weather Agent (gpt-4o-mini)" in lines
    assert "status   completed" in lines
    assert "usage    2 turns, 30 tokens (20 in, 10 out)" in lines
    assert f"output   {ANSWER}" in lines
    # one line per event: number, turn, type, detail
    kinds = [line[12:24].strip() for line in lines if line[:4].strip().isdigit()]
    assert kinds == SEED_EVENT_TYPES
    assert any("tool_call    get_weather(city='London')" in line for line in lines)

    jsonl = cli("show", run_id, "--temporal", temporal_address, "--jsonl")
    assert [json.loads(line) for line in jsonl.stdout.splitlines()] == result["events"]
    stored = cli("show", run_id, "--store", str(runs), "--jsonl")
    assert [json.loads(line) for line in stored.stdout.splitlines()] == result["events"]
    from_store = cli("show", run_id, "--store", str(runs))
    assert "status   completed" in from_store.stdout and f"the store {runs}" in from_store.stdout


def test_export_writes_the_documented_jsonl_from_history(
    temporal_address: str, agent_env: dict[str, str], tmp_path: Path
) -> None:
    """`export` writes a run that had no store as JSONL that a FileStore loads event for event."""
    result = _run_json(temporal_address, agent_env)
    run_id = result["run_id"]
    target = tmp_path / "runs" / f"{run_id}.jsonl"
    target.parent.mkdir()

    out = cli("export", run_id, "-o", str(target), "--temporal", temporal_address)
    assert out.returncode == 0, out.stderr
    assert f"exported 7 events of run {run_id}" in out.stderr
    assert [e.to_dict() for e in FileStore(target.parent).load(run_id)] == result["events"]
    to_stdout = cli("export", run_id, "--temporal", temporal_address)
    assert to_stdout.stdout == target.read_text()


def test_list_shows_runs_newest_first_filtered_by_agent_and_status(
    temporal_address: str, agent_env: dict[str, str], task_queue: str
) -> None:
    """`list` shows id, agent, status, start, turns and tokens, newest first, filterable."""
    name = f"List Agent {task_queue}"

    def model_script(request: dict[str, Any]) -> Any:
        prompt = str(request["messages"][1].get("content"))
        return Fail(400, "refused") if "refuse" in prompt else tool_then_answer(request)

    with ScriptedModelServer(model_script) as model:
        env = {**agent_env, "MODEL_BASE_URL": model.base_url, "AGENT_NAME": name}
        done = _run_json(temporal_address, env)
        refused = cli("run", "--agent", AGENT, "--temporal", temporal_address, "refuse me", env=env)
    assert refused.returncode == 1
    refused_id = refused.stdout.splitlines()[0].split()[1]

    def listed(*extra: str) -> list[dict[str, Any]]:
        out = cli("list", "--agent", name, "--temporal", temporal_address, "--json", *extra)
        assert out.returncode == 0, out.stderr
        return list(json.loads(out.stdout))

    def both() -> list[dict[str, Any]] | None:
        rows = listed()
        return rows if len(rows) == 2 else None

    # visibility is eventually consistent: waited for in this process first (each poll by
    # `list` is a process, ~3 s of CPU), then by `list` itself
    closed = f"AgentName = '{name}' AND ExecutionStatus != 'Running'"
    asyncio.run(_visible(temporal_address, closed, 2))
    rows = wait_until(both, "both runs to be listed")
    assert [r["run_id"] for r in rows] == [refused_id, done["run_id"]]
    assert [(r["status"], r["turns"], r["usage"]["total_tokens"]) for r in rows] == [
        ("failed", 0, 0),
        ("completed", 2, 30),
    ]
    assert {r["agent"] for r in rows} == {name}
    assert [r["run_id"] for r in listed("--status", "failed")] == [refused_id]
    assert [r["run_id"] for r in listed("--status", "completed")] == [done["run_id"]]
    assert [r["run_id"] for r in listed("--limit", "1")] == [refused_id]

    table = cli("list", "--agent", name, "--temporal", temporal_address).stdout.splitlines()
    assert table[0].split() == ["RUN", "ID", "AGENT", "STATUS", "STARTED", "TURNS", "TOKENS"]
    assert table[1].startswith(refused_id) and table[1].split()[-2:] == ["0", "0"]
    assert table[2].startswith(done["run_id"]) and table[2].split()[-2:] == ["2", "30"]
    assert f"  {name}  completed  " in table[2]


async def _visible(address: str, query: str, count: int, timeout: float = 60) -> None:
    """Wait until Temporal's visibility counts `count` workflows matching `query`."""
    client = await Client.connect(address)
    async with asyncio.timeout(timeout):
        while (await client.count_workflows(query)).count < count:
            await asyncio.sleep(0.1)


# -- prune ---------------------------------------------------------------------------------------


def test_prune_removes_only_old_logs_of_finished_runs(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`prune` removes old finished logs, keeps new, unfinished and running ones, and says why."""
    runs = tmp_path / "runs"
    runs.mkdir()
    running_id = f"running-{task_queue}"
    logs = {
        "old-done": "completed-weather-run.jsonl",
        "new-done": "completed-weather-run.jsonl",
        "old-crashed": "crashed-after-tool.jsonl",
        running_id: "completed-weather-run.jsonl",
    }
    now = time.time()
    for run_id, fixture in logs.items():
        path = runs / f"{run_id}.jsonl"
        shutil.copy(FIXTURES / fixture, path)
        if run_id != "new-done":
            os.utime(path, (now - 40 * DAY, now - 40 * DAY))
    # its log ends with run_end, but Temporal runs it still (no worker serves its queue)
    start = subprocess.run(
        [
            temporal_binary(),
            "workflow",
            "start",
            "--address",
            temporal_address,
            "--type",
            "AgentRun",
            "--task-queue",
            f"{task_queue}-unserved",
            "--workflow-id",
            running_id,
            "--input",
            json.dumps({"agent": "Weather Agent", "input": PROMPT}),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert start.returncode == 0, start.stderr
    try:
        dry = cli(
            "prune",
            "--store",
            str(runs),
            "--older-than",
            "30d",
            "--dry-run",
            "--temporal",
            temporal_address,
        )
        assert dry.returncode == 0, dry.stderr
        assert sorted(p.stem for p in runs.glob("*.jsonl")) == sorted(logs)
        said = dry.stdout.splitlines()
        assert "would remove old-done  finished (completed), last written 40d ago" in said
        assert f"kept         {running_id}  still running in Temporal" in said
        assert "kept         old-crashed  in flight: its last segment has no run_end" in said
        assert "kept         1 log(s) newer than 30d" in said
        assert said[-1].endswith("1 to remove, 3 kept (dry run: nothing was removed)")

        real = cli(
            "prune", "--store", str(runs), "--older-than", "30d", "--temporal", temporal_address
        )
        assert real.returncode == 0, real.stderr
        assert "removed      old-done  finished (completed), last written 40d ago" in real.stdout
        assert sorted(p.stem for p in runs.glob("*.jsonl")) == sorted(
            ["new-done", "old-crashed", running_id]
        )

        # Temporal unreachable: the logs alone decide, and the output says so
        unreachable = f"127.0.0.1:{_free_port()}"
        blind = cli(
            "prune",
            "--store",
            str(runs),
            "--older-than",
            "30d",
            "--dry-run",
            "--temporal",
            unreachable,
        )
        assert blind.returncode == 0, blind.stderr
        assert f"Cannot reach Temporal at {unreachable}" in blind.stderr
        assert "deciding from the logs alone" in blind.stderr
        assert f"would remove {running_id}" in blind.stdout
    finally:
        subprocess.run(
            [
                temporal_binary(),
                "workflow",
                "terminate",
                "--address",
                temporal_address,
                "--workflow-id",
                running_id,
                "--reason",
                "test over",
            ],
            capture_output=True,
            timeout=30,
        )


# -- worker and dev server -----------------------------------------------------------------------


def test_worker_command_serves_runs_until_sigterm(
    temporal_address: str, agent_env: dict[str, str], task_queue: str
) -> None:
    """`worker` serves runs started with --no-worker, then exits 0 on SIGTERM."""
    worker = Running(
        ["worker", "--agents", AGENT, "--task-queue", task_queue, "--temporal", temporal_address],
        agent_env,
    )
    try:
        worker.wait_for("stdout", "worker ready")
        out = cli(
            "run",
            "--agent",
            AGENT,
            "--no-worker",
            "--temporal",
            temporal_address,
            "--json",
            PROMPT,
            env=agent_env,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["final_output"] == ANSWER
        worker.process.send_signal(signal.SIGTERM)
        assert worker.finish(60) == 0
    finally:
        worker.kill()


def test_dev_starts_reports_and_stops_a_server_on_the_ports_given(tmp_path: Path) -> None:
    """`dev` starts a dev server (search attributes, UI) or reports it; `dev stop` stops it."""
    port, ui_port, data = _free_port(), _free_port(), tmp_path / "temporal"
    where = ["--port", str(port), "--ui-port", str(ui_port), "--data-dir", str(data)]
    try:
        started = cli("dev", *where)
        assert started.returncode == 0, started.stderr
        lines = started.stdout.splitlines()
        assert lines[0].startswith("Temporal dev server started (pid ")
        assert lines[1:] == [
            f"  address  localhost:{port}",
            f"  ui       http://localhost:{ui_port}",
            f"  data     {data.resolve()}",
        ]
        attributes = subprocess.run(
            [
                temporal_binary(),
                "operator",
                "search-attribute",
                "list",
                "--address",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "AgentName" in attributes.stdout and "AgentModel" in attributes.stdout

        def ui_up() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/", timeout=2) as page:
                    return bool(page.status == 200)
            except OSError:
                return False

        wait_until(ui_up, "the dev server's UI to answer", timeout=60)

        again = cli("dev", *where)
        assert again.returncode == 0
        assert again.stdout.splitlines()[0].startswith("Temporal dev server already running")
        assert again.stdout.splitlines()[1:] == lines[1:]
        status = cli("dev", "status", *where)
        assert status.returncode == 0 and status.stdout.splitlines()[1:] == lines[1:]

        stopped = cli("dev", "stop", *where)
        assert stopped.returncode == 0, stopped.stderr
        assert "stopped the Temporal dev server" in stopped.stdout
        wait_until(lambda: not _port_open(port), "the dev server to stop", timeout=30)
        gone = cli("dev", "status", *where)
        assert gone.returncode == 1
        assert f"no Temporal server answers on localhost:{port}" in gone.stderr
        assert cli("dev", "stop", *where).returncode == 0
    finally:
        stop_dev_server(data)


# -- mistakes --------------------------------------------------------------------------------------


async def _taken(address: str) -> str:
    """The id of a running workflow of another type (the app's own `order-1234`)."""
    client = await Client.connect(address)
    taken = f"order-{uuid.uuid4().hex[:8]}"
    await client.start_workflow("OrderWorkflow", "x", id=taken, task_queue="nobody")
    return taken


def test_mistakes_are_one_line_errors_with_exit_codes(
    temporal_address: str, tmp_path: Path
) -> None:
    """Unknown runs and unreachable servers exit 1, bad arguments or agent paths 2, untraced.

    An id the app's own workflow (another type) holds printed a traceback.
    """
    unreachable = f"127.0.0.1:{_free_port()}"
    here = ["--temporal", temporal_address]
    taken = asyncio.run(_taken(temporal_address))
    other = f"{taken!r} is a workflow of type 'OrderWorkflow' in Temporal, not an agent run"
    cases: list[tuple[list[str], int, str]] = [
        (["show", taken, *here], 1, other),
        (["approve", taken, "c1", *here], 1, other),
        (["show", "no-such-run", *here], 1, "no run with id 'no-such-run' in Temporal at"),
        (["export", "no-such-run", *here], 1, "no run with id 'no-such-run'"),
        (
            ["export", "no-such-run", "--store", str(tmp_path), *here],
            1,
            f"no run with id 'no-such-run' in Temporal at {here[1]}, nor in the store",
        ),
        (["approve", "no-such-run", "c1", *here], 1, f"'no-such-run' in Temporal at {here[1]}"),
        (
            ["deny", "no-such-run", "c1", "--reason", "no", *here],
            1,
            f"'no-such-run' in Temporal at {here[1]}",
        ),
        (["resume", "no-such-run", "--agent", AGENT, *here], 1, "No run with id 'no-such-run'"),
        (["list", "--temporal", unreachable], 1, f"Cannot reach Temporal at {unreachable}"),
        (["show", "abc", "--temporal", unreachable], 1, f"Cannot reach Temporal at {unreachable}"),
        (
            ["run", "--agent", "no_such_module:agent", *here, "hi"],
            2,
            "cannot import 'no_such_module'",
        ),
        (
            ["run", "--agent", "procs.cli_agents", *here, "hi"],
            2,
            "bad agent path 'procs.cli_agents'",
        ),
        (["run", "--agent", "procs.cli_agents:not_an_agent", *here, "hi"], 2, "not an agent"),
        (["worker", "--agents", "procs.cli_agents:nope", *here], 2, "has no attribute 'nope'"),
        (["show", "../etc/passwd", *here], 2, "Invalid run id '../etc/passwd'"),
        (["prune", "--store", str(tmp_path / "gone"), "--older-than", "30d"], 1, "does not exist"),
        ([], 2, "usage: agentor-temporal"),
    ]
    for (args, code, needle), out in zip(
        cases, cli_all([tuple(args) for args, _, _ in cases]), strict=True
    ):
        assert (out.returncode, needle in out.stderr) == (code, True), (args, out.stderr)
        assert "Traceback" not in out.stderr, (args, out.stderr)
    # the parser's own refusals: parsed here (`[]` above ran the real entry point's)
    for args, needle in [
        (["prune", "--store", str(tmp_path), "--older-than", "soon"], "invalid age 'soon'"),
        (["list", "--status", "done", *here], "invalid choice: 'done'"),
    ]:
        code, _, stderr = parsed(*args)
        assert (code, needle in stderr) == (2, True), (args, stderr)
        assert "Traceback" not in stderr, (args, stderr)
    asyncio.run(_terminate(temporal_address, taken))


async def _terminate(address: str, run_id: str) -> None:
    client = await Client.connect(address)
    await client.get_workflow_handle(run_id).terminate("test over")
