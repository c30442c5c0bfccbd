"""`agent.serve()` in a single script: the server process also runs the agent.

No worker process and no token: the embedded worker serves the agent for the
server's life, and SIGTERM stops the server gracefully.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import forkserver
import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from agentor_temporal.worker import build_worker

from helpers import ANSWER, PROMPT, free_port, ledger_lines, weather_agent, weather_tool
from serve_http import AGENTS, settle, wait_until

SCRIPT = """
import os
from procs.serve_agents import weather
weather.temporal = os.environ["TEMPORAL_ADDRESS"]
weather.task_queue = os.environ["ONLY_HERE_QUEUE"]
weather.serve(port=int(os.environ["PORT"]), log_level="warning")
print("served", flush=True)
"""


async def _paused(client: Client, run_id: str) -> bool:
    """Whether the run waits for a person's decision."""
    state = await client.get_workflow_handle(run_id).query("state")
    return isinstance(state, dict) and state.get("status") == "awaiting_approval"


async def _tool_running(client: Client, run_id: str) -> bool:
    """Whether a worker has started the run's tool call."""
    desc = await client.get_workflow_handle(run_id).describe()
    return any(
        a.activity_type.name == "call_tool" and a.last_worker_identity
        for a in desc.raw_description.pending_activities
    )


def outward_address() -> str | None:
    """This machine's address on its network (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it picks a route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_agent_serve_runs_the_agent_in_the_same_process(
    serve_env: dict[str, str], tmp_path: Path
) -> None:
    """agent.serve(): loopback only, runs complete with no worker process, SIGTERM stops it."""
    port = free_port()
    env = {k: v for k, v in serve_env.items() if k != "AGENTOR_SERVE_TOKEN"}
    env.update({"PORT": str(port), "ONLY_HERE_QUEUE": f"single-{uuid.uuid4().hex[:8]}"})
    log = (tmp_path / "single.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, (tmp_path / "single.log").read_text()
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, "agent.serve() to answer", 30)
        with httpx.Client(base_url=url, timeout=30) as http:
            run_id = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
            assert settle(http, run_id, "completed")["final_output"] == ANSWER
            assert http.get("/docs").status_code == 200  # no token: the docs are there
        outward = outward_address()
        if outward is not None:  # bound to 127.0.0.1 unless told otherwise
            try:
                httpx.get(f"http://{outward}:{port}/health", timeout=2)
                raise AssertionError(f"agent.serve() answered on {outward}")
            except httpx.TransportError:
                pass
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert "served" in (tmp_path / "single.log").read_text()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


SLOW_SCRIPT = """
import os
from helpers import weather_agent, weather_tool
agent = weather_agent(
    base_url=os.environ["MODEL_BASE_URL"],
    task_queue=os.environ["ONLY_HERE_QUEUE"],
    temporal=os.environ["TEMPORAL_ADDRESS"],
    tools=[weather_tool(os.environ["SLOW_LEDGER"], delay=2)],
)
agent.serve(port=int(os.environ["PORT"]), log_level="warning")
print("served", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_agent_serve_stopped_mid_tool_finishes_the_call_once(
    signum: int, serve_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    """SIGTERM or SIGHUP (its terminal closed) while agent.serve()'s embedded worker runs a
    tool: the tool finishes and is recorded, the server exits 0, and the worker that finishes
    the run does not run the tool again."""
    port, queue, ledger = free_port(), f"single-{uuid.uuid4().hex[:8]}", str(tmp_path / "ledger")
    env = {k: v for k, v in serve_env.items() if k != "AGENTOR_SERVE_TOKEN"}
    env.update({"PORT": str(port), "ONLY_HERE_QUEUE": queue, "SLOW_LEDGER": ledger})
    log = tmp_path / "single.log"
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_SCRIPT],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        await asyncio.to_thread(wait_until, healthy, "agent.serve() to answer", 30)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            run_id = (await http.post("/runs", json={"input": PROMPT})).json()["run_id"]
        await asyncio.to_thread(wait_until, lambda: ledger_lines(ledger), "the tool to start", 30)
        process.send_signal(signum)
        code = await asyncio.to_thread(process.wait, 20)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
    assert code == 0 and "served" in log.read_text(), log.read_text()
    agent = weather_agent(
        base_url=serve_env["MODEL_BASE_URL"],
        task_queue=queue,
        temporal=client,
        tools=[weather_tool(ledger)],
        embedded_worker=False,
    )
    async with build_worker(client, [agent], task_queue=queue):
        outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 30)
    assert outcome["status"] == "completed"
    assert len(ledger_lines(ledger)) == 1, ledger_lines(ledger)


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_serve_worker_interrupted_says_so_once_and_a_second_interrupt_abandons(
    serve_env: dict[str, str], client: Client, tmp_path: Path, first: signal.Signals
) -> None:
    """`agentor-temporal serve --worker` sent SIGTERM while its worker runs a tool: one line
    says the calls finish and that a second signal abandons them; a second does, at once.
    Before, the first was silent, the second only got that line, and it took a third.
    Ctrl+C first (the line says "press Ctrl+C again"), then SIGTERM (a supervisor
    escalating): the SIGTERM is noted too, in a line, and only a third, a SIGTERM again,
    abandons the calls; before, the SIGTERM cut them off."""
    port, queue, gates = free_port(), f"single-{uuid.uuid4().hex[:8]}", tmp_path / "gates"
    gates.mkdir()
    run_id = uuid.uuid4().hex
    (gates / run_id).touch()  # holds the tool until the file goes (or 60 s)
    env = {k: v for k, v in serve_env.items() if k != "AGENTOR_SERVE_TOKEN"}
    env.update({"AGENT_TASK_QUEUE": queue, "SERVE_GATES": str(gates)})
    argv = ["serve", "--agents", "procs.serve_agents:weather", "--worker", "--port", str(port)]
    process = forkserver.ForkedPopen(
        [sys.executable, "-m", "agentor_temporal", *argv, "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, "serve exited early"
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    async def tool_running() -> bool:
        desc = await client.get_workflow_handle(run_id).describe()
        return any(
            a.activity_type.name == "call_tool" and a.last_worker_identity
            for a in desc.raw_description.pending_activities
        )

    try:
        await asyncio.to_thread(wait_until, healthy, "serve to answer", 30)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await http.post("/runs", json={"input": PROMPT, "run_id": run_id})
        deadline = asyncio.get_running_loop().time() + 30
        while not await tool_running():
            assert asyncio.get_running_loop().time() < deadline, "the tool never started"
            await asyncio.sleep(0.05)
        assert process.stderr is not None
        process.send_signal(first)
        line = await asyncio.to_thread(process.stderr.readline)
        if first == signal.SIGINT:
            process.send_signal(signal.SIGTERM)
            escalated = await asyncio.to_thread(process.stderr.readline)
            assert escalated.startswith("SIGTERM: finishing the calls"), line + escalated
            assert process.poll() is None, "a SIGTERM after Ctrl+C abandoned the calls"
        process.send_signal(signal.SIGTERM)
        start = asyncio.get_running_loop().time()
        code = await asyncio.to_thread(process.wait, 20)
        took = asyncio.get_running_loop().time() - start
        rest = await asyncio.to_thread(process.stderr.read)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
    assert f"{first.name}: finishing the calls this process's worker runs" in line, line + rest
    assert "again to abandon them" in line, line
    # the tool (held for 60 s) was abandoned: the process ended by the second signal, at once
    assert code == -signal.SIGTERM and took < 10, (code, took, rest)
    assert "finishing the calls" not in rest and "Traceback" not in rest, rest


async def test_serve_worker_stopping_ends_open_streams_telling_their_clients(
    serve_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    """`agentor-temporal serve --worker` sent SIGTERM while a streamed `/chat`, a
    `GET /runs/{id}/events` and an A2A `tasks/resubscribe` follow a run whose tool runs: the
    streams end at once with a last message saying the server stops and where the run goes on,
    the tool finishes once, the log has no traceback, and the exit names the run left open
    (another, waiting for a person).
    Before, uvicorn cancelled the streams after its 3 s: each client read a body cut
    mid-transfer ('incomplete chunked read'), the log a traceback per stream; and the run
    waited for another worker, unsaid."""
    port, queue, gates = free_port(), f"single-{uuid.uuid4().hex[:8]}", tmp_path / "gates"
    gates.mkdir()
    ledger, gate = str(tmp_path / "ledger"), gates / "London"
    gate.touch()  # holds the tool (the scripted model asks London's weather) until it goes
    env = {k: v for k, v in serve_env.items() if k != "AGENTOR_SERVE_TOKEN"}
    env.update({"AGENT_TASK_QUEUE": queue, "SERVE_GATES": str(gates), "AGENT_LEDGER": ledger})
    argv = ["serve", "--agents", AGENTS, "--worker", "--port", str(port)]
    process = forkserver.ForkedPopen(
        [sys.executable, "-m", "agentor_temporal", *argv, "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, "serve exited early"
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    async def read(method: str, path: str, **kwargs: Any) -> str:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            async with http.stream(method, path, **kwargs) as response:
                return "".join([chunk async for chunk in response.aiter_text()])

    try:
        await asyncio.to_thread(wait_until, healthy, "serve to answer", 30)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            # a run left waiting for a person as the server stops: nobody follows it
            paying = {"input": "Pay bob", "agent": "Treasurer"}
            waiting = (await http.post("/runs", json=paying)).json()["run_id"]
        chat = asyncio.ensure_future(read("POST", "/chat", json={"input": PROMPT, "stream": True}))
        deadline = asyncio.get_running_loop().time() + 30
        run_ids: list[str] = []
        while not run_ids:
            assert asyncio.get_running_loop().time() < deadline, "the chat's run never started"
            listed = client.list_workflows(f"TaskQueue = '{queue}'")
            run_ids = [w.id async for w in listed if w.id != waiting]
            await asyncio.sleep(0.05)
        [chat_run] = run_ids
        events = asyncio.ensure_future(read("GET", f"/runs/{chat_run}/events"))
        resubscribe = {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe"}
        a2a = asyncio.ensure_future(
            read("POST", "/", json={**resubscribe, "params": {"id": chat_run}})
        )
        while not await _tool_running(client, chat_run) or not await _paused(client, waiting):
            assert asyncio.get_running_loop().time() < deadline, "the tool never started"
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        # the streams end themselves, the tool still held: cut off at uvicorn's graceful 3 s
        # instead, they would lack their last message (asserted below); the bound here is
        # only against a hang, for a loaded machine
        bodies = await asyncio.wait_for(asyncio.gather(chat, events, a2a), 20)
        chat_body, events_body, a2a_body = bodies
        assert gate.exists() and not ledger_lines(ledger)
        gate.unlink()
        code = await asyncio.to_thread(process.wait, 30)
        assert process.stderr is not None
        stderr = await asyncio.to_thread(process.stderr.read)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
    note = f"The server is stopping; run {chat_run} goes on in Temporal"
    assert note in json.loads(chat_body.split("\n}\n")[-2] + "\n}")["message"], chat_body
    assert events_body.endswith("\n\n") and "event: server_stopping" in events_body, events_body
    assert note in events_body.rsplit("data: ", 1)[-1], events_body
    # A2A: a status update that is not final (the task goes on; resubscribe elsewhere)
    last = json.loads(a2a_body.rsplit("data: ", 1)[-1])["result"]
    assert last["final"] is False and last["status"]["state"] == "working", a2a_body
    assert note in last["status"]["message"]["parts"][0]["text"], a2a_body
    assert code == 0 and "Traceback" not in stderr and "ERROR" not in stderr, stderr
    # the run waiting for a person waits for another worker: the exit says so and how to go
    # on; the followed run too if it is still open (its tool was finished by the drain; its
    # last step, the model's answer, only if the worker took it before it stopped)
    chat_open = (
        await client.get_workflow_handle(chat_run).describe()
    ).status == WorkflowExecutionStatus.RUNNING
    left = sorted(line for line in stderr.splitlines() if "is still open" in line)
    named = sorted([waiting, *([chat_run] if chat_open else [])])
    assert [line.split()[1] for line in left] == named, stderr
    assert all(f"task queue {queue!r}" in line for line in left), stderr
    agent = weather_agent(
        base_url=serve_env["MODEL_BASE_URL"],
        task_queue=queue,
        temporal=client,
        tools=[weather_tool(ledger)],
        embedded_worker=False,
    )
    async with build_worker(client, [agent], task_queue=queue):
        outcome = await asyncio.wait_for(client.get_workflow_handle(chat_run).result(), 30)
    assert outcome["status"] == "completed"
    assert len(ledger_lines(ledger)) == 1, ledger_lines(ledger)
