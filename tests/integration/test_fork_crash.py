"""Forking a run whose process was SIGKILLed, from another process.

The parent's process dies mid-run; a second interpreter forks the run by id.
The fork runs on its own task queue here, where no worker of the parent's
queue is: on a shared queue the forking process's worker would also pick up
the parent (Temporal keeps a running run going wherever a worker is, which
is the point of it), and the test could not tell that apart from the fork
touching the parent. The parent's record must stay exactly as the crash left
it; the fork must finish without running a completed tool call again.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step

from helpers import ANSWER, PROMPT, finish, ledger_lines, spawn, wait_until

pytestmark = pytest.mark.slow

BOTH = "London and Paris are sunny."


def _two_cities(request: dict[str, Any]) -> Step:
    """Weather in London, then in Paris, then the answer."""
    last = (request.get("messages") or [{}])[-1]
    content = str(last.get("content") or "")
    if last.get("role") != "tool":
        return CallTool("get_weather", {"city": "London"})
    if "London" in content:
        return CallTool("get_weather", {"city": "Paris"})
    return Reply(BOTH)


def _env(
    address: str,
    model: ScriptedModelServer,
    task_queue: str,
    store: Path,
    ledger: str,
    **extra: str,
) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_STORE": str(store),
        "AGENT_LEDGER": ledger,
        **extra,
    }


def _kill(child: Any) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert child.returncode == -signal.SIGKILL


async def test_fork_of_a_run_killed_mid_tool_reruns_only_the_open_call(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Killed while turn 2's tool ran: the fork rewinds that call only; turn 1's is not rerun."""
    runs, run_id = tmp_path / "runs", uuid.uuid4().hex
    with ScriptedModelServer(_two_cities) as model:
        env = _env(temporal_address, model, task_queue, runs, ledger)
        child = spawn(
            ["run", "--run-id", run_id], {**env, "TOOL_DELAY": "600", "TOOL_DELAY_CITY": "Paris"}
        )
        try:
            wait_until(
                lambda: any("Paris" in line for line in ledger_lines(ledger)),
                "the Paris call to be in flight",
                timeout=60,
            )
            _kill(child)
        finally:
            if child.poll() is None:
                child.kill()
        parent_before = await TemporalStore(client).aload(run_id)
        assert [e.type for e in parent_before] == [
            "run_start",
            "generation",
            "tool_call",
            "tool_result",
            "generation",
            "tool_call",
        ]
        mirror_before = (runs / f"{run_id}.jsonl").read_text()
        requests = model.request_count

        forker_queue = f"{task_queue}-forks"
        fork = finish(
            spawn(["fork", "--run-id", run_id], {**env, "AGENT_TASK_QUEUE": forker_queue})
        )

    assert fork["status"] == "completed" and fork["final_output"] == BOTH
    cities = [line.split()[-1] for line in ledger_lines(ledger)]
    assert cities == ["London", "Paris", "Paris"], "turn 1's completed call ran again"
    assert model.request_count == requests + 2
    # rewound: the fork asked again with the request that produced the open call
    assert model.requests[requests]["messages"] == parent_before[4].messages
    types = [e["type"] for e in fork["events"]]
    assert types == [
        *(e.type for e in parent_before),
        "fork",
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "generation",
        "message",
        "run_end",
    ]
    assert fork["events"][:6] == [e.to_dict() for e in parent_before]
    assert fork["events"][6]["forked_from"] == run_id
    mirrored = [e.to_dict() for e in FileStore(runs).load(fork["run_id"])]
    projected = [e.to_dict() for e in await TemporalStore(client).aload(fork["run_id"])]
    assert fork["events"] == mirrored == projected
    # the parent is as the crash left it
    assert (runs / f"{run_id}.jsonl").read_text() == mirror_before
    after = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in after] == [e.to_dict() for e in parent_before]
    parent = await client.get_workflow_handle(run_id).describe()
    assert parent.status == WorkflowExecutionStatus.RUNNING


async def test_fork_of_a_run_killed_while_mirroring_its_tool_result_keeps_the_result(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """Killed after the tool answered, before the next model request: the fork runs no tool."""
    runs, marker, run_id = tmp_path / "runs", tmp_path / "blocked", uuid.uuid4().hex
    env = _env(temporal_address, model, task_queue, runs, ledger)
    child = spawn(
        ["run", "--run-id", run_id],
        {**env, "BLOCK_AFTER": "tool_result", "BLOCK_MARKER": str(marker)},
    )
    try:
        wait_until(marker.exists, "the tool_result to reach the JSONL file", timeout=60)
        _kill(child)
    finally:
        if child.poll() is None:
            child.kill()
    # the result went into history with the next request, whose worker died
    # mirroring it, before it asked the model
    journaled = await TemporalStore(client).aload(run_id)
    assert [e.type for e in journaled] == ["run_start", "generation", "tool_call", "tool_result"]
    stored = FileStore(runs).load(run_id)
    assert [e.type for e in stored] == ["run_start", "generation", "tool_call", "tool_result"]
    assert model.request_count == 1 and len(ledger_lines(ledger)) == 1

    fork = finish(
        spawn(["fork", "--run-id", run_id], {**env, "AGENT_TASK_QUEUE": f"{task_queue}-forks"})
    )

    assert fork["status"] == "completed" and fork["final_output"] == ANSWER
    assert len(ledger_lines(ledger)) == 1, "the completed tool call ran again"
    assert model.request_count == 2
    assert model.requests[1]["messages"][-1]["role"] == "tool"
    types = [e["type"] for e in fork["events"]]
    assert types == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "fork",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    # the copied result is the one the parent's tool returned (as its mirror has it)
    assert fork["events"][:4] == [e.to_dict() for e in stored]
    mirrored = [e.to_dict() for e in FileStore(runs).load(fork["run_id"])]
    projected = [e.to_dict() for e in await TemporalStore(client).aload(fork["run_id"])]
    assert fork["events"] == mirrored == projected
    after = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in after] == [e.to_dict() for e in journaled]
    assert [e.to_dict() for e in FileStore(runs).load(run_id)] == [e.to_dict() for e in stored]
    assert PROMPT in str(fork["events"][0]["messages"])
