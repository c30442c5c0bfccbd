"""A new run's caller has its `RunResult` from the close event it waited for.

When one execution holds a run's whole log (a new run, not resumed,
continued or forked), no request went by reference and the worker's payloads
keep their metadata, the run's result payload carries its events
(`policies.RESULT_EVENTS`): `Agentor.run` builds its result from the close
event it waited for instead of reading the run's history after it. Every
other run is read from history as before; both give the same `RunResult`.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal import FileStore, TemporalStore, function_tool
from agentor_temporal._closed import closed
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import failure_message

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, payer, scripted_agent

RESULT_KEYS = {"run_id", "status", "final_output", "usage", "error"}


class HistoryReads:
    """Counts the reads of run histories by `TemporalStore.segments` (and still reads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        read = TemporalStore.segments

        async def counted(store: TemporalStore, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await read(store, *args, **kwargs)

        monkeypatch.setattr(TemporalStore, "segments", counted)


async def close_payload(client: Client, run_id: str) -> Any:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return history.events[-1].workflow_execution_completed_event_attributes.result.payloads[0]


def dicts(events: list[Any]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


@pytest.mark.parametrize("mirror", [False, True], ids=["no-store", "file-store"])
async def test_a_new_runs_result_comes_from_its_close_event(
    client: Client,
    task_queue: str,
    model: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mirror: bool,
) -> None:
    store = FileStore(tmp_path) if mirror else None
    agent = scripted_agent(model, client, task_queue, store=store)
    reads = HistoryReads(monkeypatch)
    result = await agent.arun(PROMPT)
    assert reads.count == 0  # no history read after the run closed
    assert result.status == "completed" and result.final_output == ANSWER
    assert [e.type for e in result.events] == SEED_EVENT_TYPES
    # the same RunResult as one built from history, event for event
    from_history = await TemporalStore(client).aload(result.run_id)
    assert dicts(result.events) == dicts(from_history)
    assert result.messages == (await agent.aresume(result.run_id)).messages
    if store is not None:
        assert dicts(store.load(result.run_id)) == dicts(result.events)
    # what carried them, out of sight of a plain client's result
    assert policies.RESULT_EVENTS in (await close_payload(client, result.run_id)).metadata
    outcome = await client.get_workflow_handle(result.run_id).result()
    assert set(outcome) == RESULT_KEYS and outcome["final_output"] == ANSWER


async def test_a_run_whose_requests_went_by_reference_is_read_from_history(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its generation events do not hold their requests' messages: history rebuilds them."""
    page = "x" * (policies.INLINE_CONVERSATION_BYTES + 1000)

    @function_tool
    def fetch(n: int) -> str:
        """Returns a long page.

        Args:
            n: Which page.
        """
        return page

    with ScriptedModelServer([CallTool("fetch", {"n": 1}), Reply("read")]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[fetch])
        reads = HistoryReads(monkeypatch)
        result = await agent.arun("read page 1")
    assert result.status == "completed" and reads.count >= 1
    assert policies.RESULT_EVENTS not in (await close_payload(client, result.run_id)).metadata
    second = [e for e in result.events if e.type == "generation"][1]
    assert second.messages is not None and any(m.get("content") == page for m in second.messages)
    assert dicts(result.events) == dicts(await TemporalStore(client).aload(result.run_id))


async def test_a_resumed_runs_result_is_its_whole_log(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed segment holds only its own events: the result is read from history."""
    script = [CallTool("get_weather", {"city": "London"}), Reply(ANSWER)]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, max_turns=1)
        first = await agent.arun(PROMPT)
        assert first.status == "max_turns"
        reads = HistoryReads(monkeypatch)
        resumed = await agent.aresume(first.run_id, max_turns=2)
    assert resumed.status == "completed" and reads.count >= 1
    assert resumed.events[: len(first.events)] == first.events
    assert dicts(resumed.events) == dicts(await TemporalStore(client).aload(first.run_id))
    assert policies.RESULT_EVENTS not in (await close_payload(client, first.run_id)).metadata


async def _raised(wait: Any) -> str:
    with pytest.raises(WorkflowFailureError) as info:
        await wait
    return failure_message(info.value)


@pytest.mark.parametrize("ending", ["terminated", "cancelled", "refused"])
async def test_waiting_for_a_close_ends_as_the_sdks_result_does(
    client: Client, task_queue: str, tmp_path: Path, ending: str
) -> None:
    """`closed` is `WorkflowHandle.result()` for runs that do not complete: the same error."""
    with ScriptedModelServer([CallTool("transfer", {"amount": 5, "to": "bob"})]) as model:
        agent = payer(model, client, task_queue, str(tmp_path / "ledger.txt"))
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"{ending}-{uuid.uuid4().hex[:8]}"
            raw: Any = {"agent": agent.name, "input": "Pay bob 5."}
            if ending == "refused":
                raw = {"agent": agent.name, "input": "Pay bob 5.", "max_turns": "many"}
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE, raw, id=run_id, task_queue=task_queue
            )
            if ending != "refused":
                # a run waiting for a person: nothing else ends it meanwhile
                await _paused(handle)
            if ending == "terminated":
                await handle.terminate("stopped by the operator")
            elif ending == "cancelled":
                await handle.cancel()
            theirs = await _raised(handle.result())
            ours = await _raised(closed(client, run_id))
    assert ours == theirs
    expected = {"terminated": "terminated", "cancelled": "cancelled", "refused": "max_turns"}
    assert expected[ending] in ours.lower()


async def _paused(handle: Any, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while await handle.query("paused") is None:
        assert asyncio.get_running_loop().time() < deadline, "the run never waited for approval"
        await asyncio.sleep(0.05)
