"""Run ids are checked by one rule at every entry point, including a plain client's start.

The rule (see tests/unit/test_run_ids.py): at most 200 bytes of UTF-8, not
only whitespace, no Unicode control, format or separator characters. A run a
plain client starts under such an id fails at once naming the rule, with
nothing written; the CLI refuses it with exit code 2; an id at the limit
works end to end (mirrored, loaded, resumed). A run under a refused id hides
no other run from `list` or `pending`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import forkserver
import pytest
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal._inspect import list_runs, render_table
from agentor_temporal._runs import waiting_calls
from agentor_temporal.codec import new_key, parse_keys
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows.formatting import failure_message

from helpers import ANSWER, PROMPT, ROOT, scripted_agent

REFUSED = {
    "200 emoji": "\U0001f600" * 200,
    "whitespace": "   ",
    "C1 next-line": "run\u0085id",
    "bidi override": "invoice\u202egpj.exe",
    "zero-width space": "run\u200bid",
}


@pytest.mark.parametrize("run_id", list(REFUSED.values()), ids=list(REFUSED))
async def test_a_plain_client_start_under_a_refused_id_fails_the_run(
    run_id: str, client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path / "runs"))
    async with build_worker(client, [agent], task_queue=task_queue):
        handle = await client.start_workflow(
            "AgentRun",
            {"agent": "Weather Agent", "input": PROMPT},
            id=run_id,
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
    assert failure_message(info.value).startswith("Invalid run id ")
    assert model.request_count == 0
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("run_id", list(REFUSED.values()), ids=list(REFUSED))
def test_the_cli_refuses_them(run_id: str, temporal_address: str, tmp_path: Path) -> None:
    # the package as this interpreter has it installed, not the checkout's
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    out = forkserver.run(
        [sys.executable, "-m", "agentor_temporal", "show", run_id, "--temporal", temporal_address],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "Invalid run id" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


async def test_an_id_at_the_limit_works_end_to_end(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """50 four-byte characters (200 bytes): mirrored, loaded, and its file set aside on damage."""
    run_id = "\U0001f600" * 50
    store = FileStore(tmp_path)
    agent = scripted_agent(model, client, task_queue, store=store)
    result = await agent.arun(PROMPT, run_id=run_id)
    assert result.status == "completed" and result.final_output == ANSWER
    projected = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in store.load(run_id)] == [e.to_dict() for e in projected]
    path = tmp_path / f"{run_id}.jsonl"
    path.write_text(path.read_text().replace("run_start", "run_stop", 1))
    again = await agent.aresume(run_id)
    assert again.status == "completed"
    assert len(list(tmp_path.glob("*.damaged-*"))) == 1
    assert [e.to_dict() for e in store.load(run_id)] == [e.to_dict() for e in projected]


async def test_a_run_under_a_refused_id_hides_no_other_run_from_list_or_pending(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """`list` and `pending` show every other run when a plain client started one under a
    refused id (failed at its start, or still waiting for a worker): before, both died on it."""
    agent = scripted_agent(model, client, task_queue, embedded_worker=False)
    bad = {"\x1b[2Jwiped\u200b" + uuid.uuid4().hex: task_queue, "a/" + uuid.uuid4().hex: ""}
    async with build_worker(client, [agent], task_queue=task_queue):
        good = await agent.arun(PROMPT, run_id=uuid.uuid4().hex)
        for run_id, queue in bad.items():
            handle = await client.start_workflow(
                "AgentRun",
                {"agent": "Weather Agent", "input": PROMPT},
                id=run_id,
                # the second waits, running, on a queue no worker polls
                task_queue=queue or f"{task_queue}-nobody",
            )
            if queue:
                with pytest.raises(WorkflowFailureError):
                    await asyncio.wait_for(handle.result(), 20)
    # and one encrypted by another app's client, read here without the codec: the SDK's
    # converter knows no `binary/encrypted` (seen: `list` died with its KeyError)
    sealing = scripted_agent(
        model,
        client,
        f"{task_queue}-sealed",
        encryption_keys=parse_keys(f"A:{new_key()}"),
    )
    sealed = await sealing.arun(PROMPT, run_id=uuid.uuid4().hex)
    try:
        rows = {s.run_id: s for s in await list_runs(client, agent=None, status=None, limit=500)}
        assert rows[good.run_id].status == "completed"
        assert rows[sealed.run_id].status == "unreadable"
        assert "encrypted" in (rows[sealed.run_id].error or ""), rows[sealed.run_id].error
        for run_id in bad:
            assert rows[run_id].status == "unreadable"
            assert (rows[run_id].error or "").startswith("Invalid run id ")
        table = "\n".join(render_table(list(rows.values())))
        assert "\x1b" not in table and "\\x1b[2Jwiped\\u200b" in table
        assert all(w.run_id not in bad for w in await waiting_calls(client))
    finally:
        for run_id, queue in bad.items():
            if not queue:
                await client.get_workflow_handle(run_id).terminate("test: done")
