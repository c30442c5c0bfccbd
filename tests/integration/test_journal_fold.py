"""New events reach history and the store with the next activity, not a journal step before it.

A run records each step's events before taking the next step. They used to go
through a `journal` local activity before every model request and every
turn's tools (an extra activation of the workflow each time, about a quarter
of a short run's worker CPU); now they travel in the input of the `generate`
or the turn's first `call_tool` activity, which history holds, and that
activity's worker mirrors them before it asks the model or runs the tool.
Only the run's end (and approvals, continuing as new, a store that fell
behind) still takes a journal step.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore, function_tool
from agentor_temporal.activities.conversations import CACHE
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, tool_then_answer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import (
    ANSWER,
    PROMPT,
    SEED_EVENT_TYPES,
    scripted_agent,
    transfer_tool,
    unwedged_history,
)


async def _journals(client: Client, run_id: str) -> tuple[int, dict[str, list[str]]]:
    """(journal local activities, event types each activity's input carries) of a run."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    journals, carried = 0, {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details
            if "data" in details and b'"activity_type":"journal"' in details["data"].payloads[
                0
            ].data.replace(b" ", b""):
                journals += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            data = json.loads(attrs.input.payloads[0].data)
            folded = data.get("journal") or {}
            carried[attrs.activity_id] = [e["type"] for e in folded.get("events") or []]
    return journals, carried


async def test_each_step_carries_the_events_before_it(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """The seed's run: one journal step (its end); the rest ride in the activities' inputs."""
    store = FileStore(tmp_path)
    agent = scripted_agent(model, client, task_queue, store=store)
    result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == ANSWER

    journals, carried = await _journals(client, result.run_id)
    assert carried == {
        "generate-1": ["run_start"],
        "tool-1-0": ["generation", "tool_call"],
        "generate-2": ["tool_result"],
    }
    assert journals == 1  # the run's end: generation, message, run_end
    projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert [e["type"] for e in projected] == SEED_EVENT_TYPES
    # the generation's request is in history once (generate-1's input), and whole here
    assert projected[1]["messages"] == projected[0]["messages"]
    assert [e.to_dict() for e in store.load(result.run_id)] == projected
    assert [e.to_dict() for e in result.events] == projected


async def test_a_tool_finds_its_call_in_the_store_before_it_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """As in Agentor, the log has the model's request for a tool before the tool runs."""
    store = FileStore(tmp_path)
    seen: list[list[str]] = []

    @function_tool
    def peek(city: str) -> str:
        """Look at the run's log.

        Args:
            city: Any city.
        """
        (run_id,) = store.list_runs()
        seen.append([e.type for e in store.load(run_id)])
        return "looked"

    with ScriptedModelServer(tool_then_answer) as model:
        agent = scripted_agent(model, client, task_queue, store=store, tools=[peek])
        result = await agent.arun(PROMPT)
    assert result.status == "completed"
    assert seen == [["run_start", "generation", "tool_call"]]


async def test_a_worker_without_the_request_reads_it_from_history(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tool's worker does not hold the generation's request: the mirror still gets it whole."""

    def forgetful(request: dict[str, Any]) -> Any:
        # as if another worker had sent the request: this one holds nothing
        CACHE.clear()
        return tool_then_answer(request)

    store = FileStore(tmp_path)
    with ScriptedModelServer(forgetful) as model:
        agent = scripted_agent(model, client, task_queue, store=store)
        with caplog.at_level(logging.INFO, logger="agentor_temporal.activities.conversations"):
            result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == ANSWER
    assert f"Rebuilt the conversation of run {result.run_id} from history" in caplog.text
    stored = [e.to_dict() for e in store.load(result.run_id)]
    assert stored == [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert stored[1]["messages"] == [
        {"role": "system", "content": agent.instructions},
        {"role": "user", "content": PROMPT},
    ]


async def test_a_turn_too_large_to_ride_along_takes_a_journal_step(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Results past MAX_FOLD_BYTES are journaled on their own: no input nears the 2 MB limit."""

    @function_tool
    def dump(part: int) -> str:
        """Return 200 kB of text.

        Args:
            part: Which part.
        """
        return str(part) * 200_000

    script = [[CallTool("dump", {"part": 1}), CallTool("dump", {"part": 2})], Reply("Dumped.")]
    store = FileStore(tmp_path)
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, store=store, tools=[dump])
        result = await agent.arun("Dump two parts.")
    assert result.status == "completed" and result.final_output == "Dumped."
    journals, carried = await _journals(client, result.run_id)
    assert carried["generate-2"] == []  # 400 kB of results: a journal step of their own
    assert carried["tool-1-0"] == ["generation", "tool_call", "tool_call"]
    assert journals == 2
    projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert [e["type"] for e in projected].count("tool_result") == 2
    assert [e.to_dict() for e in store.load(result.run_id)] == projected


async def test_a_turn_of_many_denials_goes_into_history_in_steps(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """200 calls denied with 4,000-character reasons: their events take several journal steps.

    Nothing else carries a denial's events into history (no tool runs), so
    they waited for one step at the turn's end: 2.3 MB (3.5 MB for 300), which Temporal
    refuses, and every workflow task failed from then on. The denials come ten at a time,
    as several people deciding at once would send them.
    """
    calls = 200
    script = [
        [CallTool("transfer", {"amount": n, "to": "bob"}, id=f"call_{n}") for n in range(calls)],
        Reply("Nothing paid."),
    ]
    reason = "r" * policies.MAX_DECISION_TEXT
    store = FileStore(tmp_path)
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, embedded_worker=False, store=store, tools=[transfer_tool()]
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob 300 times."), 60)
            assert paused.status == "awaiting_approval"
            assert len(paused.pending_approvals) == calls
            run_id = str(paused.run_id)
            pending = list(paused.pending_approvals)
            for first in range(0, calls, 10):
                await asyncio.gather(
                    *(
                        agent.adeny(run_id, one, reason=reason, by="r" * 4_000)
                        for one in pending[first : first + 10]
                    )
                )
            await unwedged_history(client, run_id, timeout=60)
        result = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert result.status == "completed" and result.final_output == "Nothing paid."
    denials = [e for e in result.events if e.type == "approval_decision"]
    assert len(denials) == calls and all(e.text == reason for e in denials)
    journals, _ = await _journals(client, run_id)
    assert journals >= 3  # 2.3 MB of events, at most 1 MB a step
    assert [e.to_dict() for e in store.load(run_id)] == [e.to_dict() for e in result.events]
