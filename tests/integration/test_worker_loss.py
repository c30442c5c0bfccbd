"""Worker loss: a worker process SIGKILLed at each point of a run, another one finishes it.

Each test kills the process running the run (its embedded worker holds the
workflow and runs its activities) at one exact point, then serves the same
task queue and store with another worker (the test's own, in its process: a
worker process more would only cost its imports), and checks the promise:
the run completes, a completed tool call never runs again (an in-flight one
runs again with the same idempotency key), and the JSONL mirror has every
event once and equals `TemporalStore.load`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import Hang, ScriptedModelServer, tool_then_answer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import (
    ANSWER,
    ledger_lines,
    spawn,
    stop_process,
    wait_until,
    weather_agent,
    weather_tool,
)

pytestmark = pytest.mark.slow

SEVEN = ["run_start", "generation", "tool_call", "tool_result", "generation", "message", "run_end"]


@dataclass
class KillPoint:
    """Where in the run the first process dies, and how the test knows it is there."""

    #: extra environment for the killed process
    env: dict[str, str] = field(default_factory=dict)
    #: the first model request hangs, so the generation is in flight
    hang_first_request: bool = False
    #: how many times the tool starts in all (2 when it was in flight)
    tool_starts: int = 1
    #: model requests in all (3 when the first one was in flight)
    requests: int = 2
    #: the worker that finishes the run asks the model locally
    second_local: bool = False


LOCAL = {"LOCAL_MODEL_CALLS": "1"}

KILL_POINTS = {
    # the generate activity is awaiting the model
    "during_generation": KillPoint(hang_first_request=True, requests=3),
    # the tool started (its ledger line is on disk) and is still running
    "during_tool_call": KillPoint(env={"TOOL_DELAY": "60"}, tool_starts=2),
    # the tool's result is recorded and mirrored; the next generation is not scheduled
    "after_tool_result": KillPoint(env={"BLOCK_AFTER": "tool_result"}),
    # mid-mirror: `generation` is in the JSONL file, the `tool_call` of the same
    # journal step is not
    "during_mirror": KillPoint(env={"BLOCK_AFTER": "generation"}),
    # mid-mirror of the last step: `message` written, `run_end` not
    "during_final_mirror": KillPoint(env={"BLOCK_AFTER": "message"}),
    # the same with `local_model_calls=True`: the request is a local activity
    # inside the dead worker's workflow task, which times out (5 s)
    "local_during_generation": KillPoint(
        env=LOCAL, hang_first_request=True, requests=3, second_local=True
    ),
    # the run recorded the option: a worker built without it follows the run
    "local_during_tool_call": KillPoint(env={**LOCAL, "TOOL_DELAY": "60"}, tool_starts=2),
    # the generation's event goes into history with the tool call here
    "local_during_mirror": KillPoint(env={**LOCAL, "BLOCK_AFTER": "generation"}, second_local=True),
}


def _env(
    address: str, model: ScriptedModelServer, queue: str, runs: Path, ledger: str
) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_STORE": str(runs),
        "AGENT_LEDGER": ledger,
    }


def _agent(
    client: Client, model: ScriptedModelServer, queue: str, runs: Path, ledger: str, local: bool
) -> Any:
    """The agent `tests/procs/agent_proc.py` builds from `_env`'s settings, in this process,
    served by the test's own worker (`build_worker`)."""
    return weather_agent(
        base_url=model.base_url,
        task_queue=queue,
        temporal=client,
        store=FileStore(runs),
        tools=[weather_tool(ledger)],
        embedded_worker=False,
        local_model_calls=local,
    )


def _killed_at(proc: subprocess.Popen[str], ready: Callable[[], object], what: str) -> None:
    try:
        wait_until(ready, what, timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", list(KILL_POINTS))
async def test_run_survives_a_sigkill(
    point: str,
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """Whatever point a worker is killed at, another finishes the run: tools once, log exact."""
    kill = KILL_POINTS[point]
    runs, marker = tmp_path / "runs", tmp_path / "blocked"
    run_id = uuid.uuid4().hex
    env = _env(temporal_address, model, task_queue, runs, ledger)
    if kill.hang_first_request:
        model.set_script([Hang(60)])
    first = spawn(["run", "--run-id", run_id], {**env, **kill.env, "BLOCK_MARKER": str(marker)})
    try:
        if kill.hang_first_request:
            _killed_at(first, lambda: model.request_count >= 1, "the first model request")
        elif "TOOL_DELAY" in kill.env:
            _killed_at(first, lambda: ledger_lines(ledger), "the tool to start")
        else:
            _killed_at(first, marker.exists, f"{kill.env['BLOCK_AFTER']} to reach the JSONL file")

        # another worker (this process's) on the same task queue and store finishes the run
        agent = _agent(client, model, task_queue, runs, ledger, kill.second_local)
        async with build_worker(client, [agent], task_queue=task_queue):
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 150)
        pids = [f"pid={first.pid}", f"pid={os.getpid()}"]
    finally:
        stop_process(first)

    assert outcome["status"] == "completed" and outcome["final_output"] == ANSWER
    assert model.request_count == kill.requests
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    local = "LOCAL_MODEL_CALLS" in kill.env
    assert ("generate" in scheduled) != local, scheduled
    projected = await TemporalStore(client).aload(run_id)
    call_id = next(e.call_id for e in projected if e.type == "tool_call")
    # "get_weather <run_id>:<call_id> pid=<pid> attempt=<n> London", one line per start
    starts = [line.split() for line in ledger_lines(ledger)]
    assert [s[1] for s in starts] == [f"{run_id}:{call_id}"] * kill.tool_starts
    if kill.tool_starts == 2:
        # the in-flight call ran again on the next worker, with the same key
        assert [s[2:4] for s in starts] == [[pids[0], "attempt=1"], [pids[1], "attempt=2"]]
    mirrored = FileStore(runs).load(run_id)
    assert [e.type for e in mirrored] == SEVEN
    assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in projected]
    # and the file holds exactly those lines: nothing torn, nothing twice
    assert len((runs / f"{run_id}.jsonl").read_text().splitlines()) == len(SEVEN)


@pytest.mark.parametrize("runs_for", [0, 3], ids=["at_once", "after_heartbeats"])
async def test_a_tool_that_kills_its_process_is_started_three_times_then_answered(
    runs_for: int,
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A tool whose every start kills its worker does not crash a fleet for ever.

    Each time a worker dies another is started, as a supervisor would. The
    call runs on three of them (the first start, and two more lost with their
    worker), then the model is answered that it never finished and the run
    completes: before, the call was started again on every new worker. A tool
    that runs `runs_for` seconds first has heartbeats go out meanwhile; they
    must not erase the count.
    """
    run_id = uuid.uuid4().hex
    env = _env(temporal_address, model, task_queue, tmp_path / "runs", ledger)
    env.update(TOOL_EXITS="1", TOOL_DELAY=str(runs_for))
    procs = [spawn(["run", "--run-id", run_id], env, stderr=subprocess.DEVNULL)]
    starts = 1 + policies.LOST_TOOL_STARTS
    result: asyncio.Future[Any] | None = None
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool's first start")
        result = asyncio.ensure_future(client.get_workflow_handle(run_id).result())
        while not result.done():
            if len(ledger_lines(ledger)) > starts:
                raise AssertionError(f"the tool started again: {ledger_lines(ledger)}")
            if procs[-1].poll() is not None:
                assert procs[-1].returncode == 3  # the tool's own exit
                assert len(procs) <= starts, "a worker died after the call was answered"
                procs.append(spawn(["worker"], env, stderr=subprocess.DEVNULL))
            await asyncio.wait([result], timeout=0.2)
        outcome = result.result()
    finally:
        if result is not None:
            result.cancel()
        for proc in procs:
            stop_process(proc)

    assert outcome["status"] == "completed", outcome
    # the scripted model repeats the tool's answer
    assert "Error: get_weather was started 3 times" in outcome["final_output"]
    assert len(ledger_lines(ledger)) == starts
    [result_event] = [
        e for e in await TemporalStore(client).aload(run_id) if e.type == "tool_result"
    ]
    assert result_event.error is not None and "never finished" in result_event.error
    assert model.request_count == 2


async def _beaten(client: Client, run_id: str, local_send: bool, tasks_before: int) -> bool:
    """Whether the send in flight has outlived a heartbeat: a local one, its workflow task's
    (a workflow task completed since it began, at 80% of the task timeout); an activity,
    its own (recorded after the attempt started, HEARTBEAT_INTERVAL in)."""
    handle = client.get_workflow_handle(run_id)
    if local_send:
        return await _tasks_completed(client, run_id) > tasks_before
    pending = (await handle.describe()).raw_description.pending_activities
    return any(
        a.HasField("last_heartbeat_time")
        and a.HasField("last_started_time")
        and a.last_heartbeat_time.ToDatetime() > a.last_started_time.ToDatetime()
        for a in pending
    )


async def _tasks_completed(client: Client, run_id: str) -> int:
    events = (await client.get_workflow_handle(run_id).fetch_history()).events
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events)


@pytest.mark.parametrize(
    ("local", "after_heartbeats"),
    [(False, False), (True, False), (True, True)],
    ids=["activity", "local_at_once", "local_after_task_heartbeats"],
)
async def test_a_model_request_that_kills_its_worker_is_sent_three_times_then_fails_the_run(
    local: bool,
    after_heartbeats: bool,
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A model request whose every send loses its worker (killed mid-request, as for its
    memory on a huge body) is sent by three of them, then the run fails saying so, and
    resume continues it: before, every worker of a fleet sent it again, each a paid request.
    A local request (`local_model_calls=True`) too, counted by its workflow tasks lost in
    history; one that outlasted its workflow task (completed meanwhile) is late on the next
    worker, so is sent as an activity from then on: one local send, then three."""
    model.set_script(lambda request: Hang(60))
    run_id = uuid.uuid4().hex
    env = _env(temporal_address, model, task_queue, tmp_path / "runs", ledger)
    if local:
        env.update(LOCAL)
    # each send's count of completed workflow tasks when it was seen
    tasks_at: list[int] = []
    procs = [spawn(["run", "--run-id", run_id], env, stderr=subprocess.DEVNULL)]
    sends = 1 + policies.LOST_MODEL_STARTS + (1 if after_heartbeats else 0)
    result: asyncio.Future[Any] | None = None
    try:
        wait_until(lambda: model.request_count, "the first send")
        result = asyncio.ensure_future(client.get_workflow_handle(run_id).result())
        deadline = asyncio.get_running_loop().time() + 120
        while not result.done():
            assert asyncio.get_running_loop().time() < deadline, "the run did not end"
            assert model.request_count <= sends, f"sent {model.request_count} times"
            in_flight = model.request_count == len(procs) <= sends
            if in_flight and len(tasks_at) < len(procs):
                tasks_at.append(await _tasks_completed(client, run_id))
            if in_flight and (
                not after_heartbeats
                or await _beaten(client, run_id, local and len(procs) == 1, tasks_at[-1])
            ):
                # the worker sending it dies mid-request; a supervisor starts another
                procs[-1].send_signal(signal.SIGKILL)
                procs[-1].communicate(timeout=10)
                procs.append(spawn(["worker"], env, stderr=subprocess.DEVNULL))
            await asyncio.wait([result], timeout=0.2)
        outcome = result.result()
        assert outcome["status"] == "failed", outcome
        sent = 1 + policies.LOST_MODEL_STARTS  # by the path that refused: the activity's
        assert f"was sent {sent} times and never answered" in outcome["error"]
        assert "resume(run_id)" in outcome["error"]
        assert model.request_count == sends
        # the cause found, resume continues the run from that turn (the last worker serves it;
        # the caller is this process, with no worker of its own)
        model.set_script(tool_then_answer)
        caller = _agent(client, model, task_queue, tmp_path / "runs", ledger, local)
        resumed = await asyncio.wait_for(caller.aresume(run_id), 120)
    finally:
        if result is not None:
            result.cancel()
        for proc in procs:
            stop_process(proc)
    assert resumed.status == "completed", resumed.error
    assert model.request_count == sends + 2
