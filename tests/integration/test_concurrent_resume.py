"""Two resumers of one unfinished run: it executes once and both get the same result."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import Fail, ScriptedModelServer
from agentor_temporal.workflows.policies import WORKFLOW_TASK_TIMEOUT
from agentor_temporal.workflows.projection import Segment

from helpers import (
    ANSWER,
    PROMPT,
    finish,
    ledger_lines,
    scripted_agent,
    spawn,
    stop_process,
    wait_line,
)

pytestmark = pytest.mark.slow


async def test_two_processes_resume_the_same_failed_run_at_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """Two processes resuming one failed run at the same moment: one execution, one result."""
    runs, go = tmp_path / "runs", tmp_path / "go"
    run_id = uuid.uuid4().hex
    with ScriptedModelServer([Fail(400, "Invalid request")]) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_STORE": str(runs),
            "AGENT_LEDGER": ledger,
        }
        failed = finish(spawn(["run", "--run-id", run_id], env))
        assert failed["status"] == "failed" and model.request_count == 1

        resumers = [spawn(["resume", "--run-id", run_id, "--go-file", str(go)], env) for _ in "ab"]
        try:
            for proc in resumers:
                wait_line(proc, "waiting")
            go.touch()  # both call resume() now
            results = [finish(proc) for proc in resumers]
        finally:
            for proc in resumers:
                stop_process(proc)

        assert results[0] == results[1]
        assert results[0]["status"] == "completed" and results[0]["final_output"] == ANSWER
        assert model.request_count == 3, "the continued segment ran more than once"
    assert len(ledger_lines(ledger)) == 1
    segments = await TemporalStore(client).segments(run_id)
    assert [s.status for s in segments] == ["completed", "completed"]
    assert [e.to_dict() for e in FileStore(runs).load(run_id)] == results[0]["events"]


async def test_a_resumer_that_read_before_another_finished_does_not_run_it_again(
    client: Client, task_queue: str, tmp_path: Path, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumer whose view predates another's finished continuation attaches, not re-runs.

    The interleaving two processes can hit: B reads the run as failed, A
    continues it to completion, then B starts its continuation from what it
    read. Here B's read is made stale on purpose.
    """
    with ScriptedModelServer([Fail(400, "Invalid request")]) as model:
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path), ledger=ledger)
        failed = await agent.arun(PROMPT)
        stale = await TemporalStore(client).segments(failed.run_id)
        first = await agent.aresume(failed.run_id)  # A
        assert first.status == "completed" and model.request_count == 3

        real = TemporalStore.segments
        calls = {"n": 0}

        async def stale_once(self: TemporalStore, run_id: str) -> list[Segment]:
            calls["n"] += 1
            return stale if calls["n"] == 1 else await real(self, run_id)

        monkeypatch.setattr(TemporalStore, "segments", stale_once)
        second = await agent.aresume(failed.run_id)  # B, acting on its old read
        monkeypatch.undo()

        assert model.request_count == 3, "the run was executed a second time"
    assert len(ledger_lines(ledger)) == 1
    assert second.status == "completed" and second.final_output == ANSWER
    assert [e.to_dict() for e in second.events] == [e.to_dict() for e in first.events]
    assert len(await TemporalStore(client).segments(failed.run_id)) == 2
    # the deduplicated start keeps what the SDK's start would have set
    desc = await client.get_workflow_handle(failed.run_id).describe()
    assert await desc.static_summary() == f"Weather Agent: {PROMPT}"
    assert "**Tools** get_weather" in (await desc.static_details() or "")
    timeout = desc.raw_description.execution_config.default_workflow_task_timeout
    assert timeout.ToTimedelta() == WORKFLOW_TASK_TIMEOUT
