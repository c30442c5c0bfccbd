"""A JSONL mirror that does not match its run is set aside and rewritten, never extended.

Counting by position once made `resume` append events a damaged log already
had (`run_end` twice). Now a copy is compared with Temporal's record before
it is extended whenever this process did not write it as it stands: a
damaged middle line, another run's log copied over it, lines swapped or
repeated, whether the run is finished (caught up by `resume`) or still
running (the next step notices). The copy is kept under a new name with a
warning; the log in its place equals `TemporalStore.load`. A link planted in
the runs directory is never followed.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import (
    ANSWER,
    PROMPT,
    ledger_lines,
    scripted_agent,
    transfer_tool,
    weather_tool,
)


def damage(kind: str, path: Path, other: Path | None = None) -> None:
    lines = path.read_text().splitlines(keepends=True)
    if kind == "corrupt-middle-line":
        lines[2] = lines[2][: len(lines[2]) // 2] + "\n"
    elif kind == "another-runs-log":
        assert other is not None
        lines = other.read_text().splitlines(keepends=True)
    elif kind == "lines-swapped":
        lines[2], lines[3] = lines[3], lines[2]
    elif kind == "line-repeated":
        lines.insert(3, lines[2])
    path.write_text("".join(lines))


KINDS = ["corrupt-middle-line", "another-runs-log", "lines-swapped", "line-repeated"]


async def assert_repaired(client: Client, runs: Path, run_id: str, damaged: bytes) -> None:
    path = runs / f"{run_id}.jsonl"
    projected = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in FileStore(runs).load(run_id)] == [e.to_dict() for e in projected]
    assert len(path.read_text().splitlines()) == len(projected)
    types = [e.type for e in FileStore(runs).load(run_id)]
    assert types.count("run_end") == types.count("run_start")
    [aside] = list(runs.glob(f"{run_id}.jsonl.damaged-*"))
    assert aside.read_bytes() == damaged


@pytest.mark.parametrize("kind", KINDS)
async def test_resume_sets_a_wrong_log_aside_and_writes_the_run_again(
    kind: str,
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = tmp_path / "runs"
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))
    result = await agent.arun(PROMPT)
    other = await agent.arun("What is the weather in Oslo?")
    path = runs / f"{result.run_id}.jsonl"
    damage(kind, path, runs / f"{other.run_id}.jsonl")
    damaged = path.read_bytes()
    requests = model.request_count

    with caplog.at_level(logging.WARNING):
        again = await agent.aresume(result.run_id)

    assert again.status == "completed" and again.final_output == ANSWER
    assert model.request_count == requests  # a finished run: nothing runs again
    await assert_repaired(client, runs, result.run_id, damaged)
    assert f"The log of run {result.run_id}" in caplog.text and "set aside as" in caplog.text


async def test_a_running_runs_log_damaged_meanwhile_is_noticed_at_the_next_step(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """Damaged while the run waits for approval: the next step checks, sets aside, rewrites."""
    runs = tmp_path / "runs"
    agent = scripted_agent(
        model,
        client,
        task_queue,
        store=FileStore(runs),
        tools=[transfer_tool(ledger), weather_tool(ledger)],
    )
    paused = await agent.arun("Send 5 to bob", run_id=uuid.uuid4().hex)
    assert paused.status == "awaiting_approval"
    path = runs / f"{paused.run_id}.jsonl"
    damage("corrupt-middle-line", path)
    damaged = path.read_bytes()
    await agent.aapprove(paused.run_id, paused.pending_approvals[0].call_id)
    done = await agent.aresume(paused.run_id)
    assert done.status == "completed"
    await assert_repaired(client, runs, paused.run_id, damaged)
    assert len(ledger_lines(ledger)) == 1


async def test_a_link_planted_in_the_runs_directory_is_never_followed(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run completes, the file outside is untouched, and the refusal is logged by name."""
    runs, outside = tmp_path / "runs", tmp_path / "bashrc"
    runs.mkdir()
    outside.write_text("export PATH=/usr/bin\n")
    run_id = uuid.uuid4().hex
    (runs / f"{run_id}.jsonl").symlink_to(outside)
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))
    with caplog.at_level(logging.ERROR):
        result = await agent.arun(PROMPT, run_id=run_id)
    assert result.status == "completed" and result.final_output == ANSWER
    assert outside.read_text() == "export PATH=/usr/bin\n"
    assert "it is a symbolic link" in caplog.text


async def test_a_paused_runs_log_missing_only_its_last_newline_keeps_every_event(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A whole last event without its newline is ended, not cut, by the step after approval."""
    runs = tmp_path / "runs"
    tools = [transfer_tool(ledger), weather_tool(ledger)]
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs), tools=tools)
    paused = await agent.arun("Send 5 to bob", run_id=uuid.uuid4().hex)
    assert paused.status == "awaiting_approval" and paused.run_id is not None
    path = runs / f"{paused.run_id}.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # while no worker runs it
    later = scripted_agent(model, client, task_queue, store=FileStore(runs), tools=tools)
    await later.aapprove(paused.run_id, paused.pending_approvals[0].call_id)
    done = await later.aresume(paused.run_id)
    assert done.status == "completed"
    projected = await TemporalStore(client).aload(paused.run_id)
    held = FileStore(runs).load(paused.run_id)
    assert [e.to_dict() for e in held] == [e.to_dict() for e in projected]
    assert sorted(p.name for p in runs.iterdir()) == [path.name]  # nothing set aside
    assert len(ledger_lines(ledger)) == 1
