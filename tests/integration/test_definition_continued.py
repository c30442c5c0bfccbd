"""A run continued as new is still the run its segment began: a changed worker leaves it too.

Each execution a run continues as new in was described again, checking the
worker's agent against the run's fingerprint in a local activity, which fails
the run at once when they differ (a local activity cannot leave its task for
another worker). So in a deploy, a run whose continued execution's first task
came to a new-build worker failed for good, mid-run, though a worker built as
the run was could go on with it. A continued execution takes its segment's
spec from what it carries; its steps are left to a worker with the run's
definition as any other's are (`activities/_definition.py`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from late_results import executions, replay_late
from temporalio.client import Client

from agentor_temporal import TemporalStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import chunk_tool, coder, ledger_lines, tool_results, transfer_tool

pytestmark = pytest.mark.slow

#: a history budget the results of the paused turn alone pass
PAUSE_BUDGET = 20_000


def respond(request: dict[str, Any]) -> Any:
    """Four 8 KB results in one turn with a transfer (it waits), then an answer."""
    messages = request.get("messages") or []
    if tool_results(request) == 0:
        return [
            *(CallTool("read_chunk", {"n": n}, id=f"call_{n}") for n in range(1, 5)),
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
        ]
    assert messages[-1]["role"] == "tool"
    return Reply("Read, and did not pay.")


async def refusal(client: Client, run_id: str) -> str | None:
    desc = await client.get_workflow_handle(run_id).describe()
    for act in desc.raw_description.pending_activities:
        if act.last_failure.message:
            return str(act.last_failure.message)
    return None


@pytest.mark.parametrize("change", ["instructions", "renamed"])
async def test_a_run_continued_as_new_on_a_changed_worker_waits_for_one_built_as_it_was(
    change: str,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(PAUSE_BUDGET))
    old_ledger, new_ledger = str(tmp_path / "old"), str(tmp_path / "new")
    with ScriptedModelServer(respond) as model:
        old_tools = [chunk_tool(old_ledger, 8000), transfer_tool(old_ledger)]
        old = coder(model, client, task_queue, tools=old_tools)
        new = coder(
            model,
            client,
            task_queue,
            tools=[chunk_tool(new_ledger, 8000), transfer_tool(new_ledger)],
        )
        if change == "instructions":
            new.definition.instructions = "You are a fast coding agent."
            refused = "instructions differ"
        else:  # the agent renamed: this worker has no agent of the run's name
            new.definition.name = "Short Coder"
            refused = "Unknown agent 'Long Coder'"
        old_client = await Client.connect(temporal_address)
        async with build_worker(old_client, [old], task_queue=task_queue):
            paused = await asyncio.wait_for(old.arun("Read and pay.", max_turns=10), 120)
        assert paused.status == "awaiting_approval", paused.error
        run_id = paused.run_id
        assert run_id is not None
        handle = client.get_workflow_handle(run_id)
        first = (await handle.describe()).run_id
        new_client = await Client.connect(temporal_address)
        async with build_worker(new_client, [new], task_queue=task_queue):
            # the decision is taken here (no step runs for a denied call), and the
            # run, past its history budget, continues as new
            await old.adeny(run_id, "call_pay", reason="not today", by="carol")
            message = None
            deadline = time.monotonic() + 60
            while message is None:
                assert time.monotonic() < deadline, "the changed worker did not leave the run"
                desc = await handle.describe()
                assert desc.status is not None and desc.status.name == "RUNNING", (
                    desc.status,
                    await handle.result(),
                )
                if desc.run_id != first:
                    message = await refusal(client, run_id)
                await asyncio.sleep(0.2)
            assert refused in message, message
        # a worker built as the run was comes back: it goes on with the run
        async with build_worker(old_client, [old], task_queue=task_queue):
            done = await asyncio.wait_for(old.aresume(run_id), 120)
    assert done.status == "completed", done.error
    assert done.final_output == "Read, and did not pay."
    assert len(await TemporalStore(client).segments(run_id)) >= 2
    assert len(ledger_lines(old_ledger)) == 4 and ledger_lines(new_ledger) == []
    # the continued execution took its carried spec after its refused describe step (a
    # local activity): it replays with that step's result a task late too
    for history in await executions(client, run_id):
        await replay_late(history)
