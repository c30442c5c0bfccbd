"""A workflow task that runs twice stamps its events as it did the first time.

A task that fails (or times out) after its journal step mirrored the events
is run again, later. Stamped with `workflow.now()`, the start of the task
running, the second attempt's events differed from the ones its first
attempt put in the JSONL mirror, in history and on a follower's stream: a
`run_end` 47 ms apart between the mirror and the run's result, an
`approval_request` 224 ms apart between a stream and history (both seen in
the suite). Events are stamped with times history holds now
(`Journal.now`), so every reader sees one log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal._runs import send_decision
from agentor_temporal.testing import CallTool, Fail, Hang, Reply, ScriptedModelServer
from agentor_temporal.workflows import Decision

from helpers import (
    ANSWER,
    PROMPT,
    failing_once,
    scripted_agent,
    transfer_tool,
    weather_agent,
    weather_tool,
)


def _journal_result_with(marker: bytes) -> Callable[[bytes], bool]:
    """A journal step's result (it says how far the mirror got) holding `marker`."""
    return lambda data: marker in data and b'"mirrored"' in data


async def _one_log(client: Client, run_id: str, store: FileStore, *others: list[Any]) -> None:
    """History, the JSONL mirror and every other reading of the run hold the same events."""
    recorded = [e.to_dict() for e in await TemporalStore(client).aload(run_id)]
    assert [e.to_dict() for e in store.load(run_id)] == recorded
    for other in others:
        assert [e.to_dict() for e in other] == recorded
    history = await client.get_workflow_handle(run_id).fetch_history()
    failed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed, "no workflow task failed: the test proved nothing"


async def test_a_run_end_mirrored_before_its_task_failed_reads_the_same_everywhere(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """The closing journal step's task fails once: the result, history and mirror agree."""
    failing, codec = failing_once(client, _journal_result_with(b'"run_end"'))
    store = FileStore(tmp_path)
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=failing, store=store
    )
    result = await agent.arun(PROMPT)
    assert codec.failed
    assert result.status == "completed" and result.final_output == ANSWER
    streamed = [e async for e in agent.stream(result.run_id)]
    await _one_log(client, result.run_id, store, result.events, streamed)


@pytest.mark.parametrize("decision", ["approved", "expired"])
async def test_an_approval_request_mirrored_before_its_task_failed_reads_the_same_everywhere(
    client: Client, task_queue: str, tmp_path: Path, ledger: str, decision: str
) -> None:
    """The approval step's task fails once: request and decision read the same everywhere.

    The decision is a person's (stamped with their own time, no earlier than
    the request) or the deadline's (the request's time plus the timeout).
    """
    failing, codec = failing_once(client, _journal_result_with(b'"approval_request"'))
    store = FileStore(tmp_path)
    script = [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"), Reply("Done.")]
    timeout = {"approval_timeout": 1.0, "on_approval_timeout": "deny"}
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=failing,
            store=store,
            tools=[
                weather_tool(ledger),
                transfer_tool(ledger, **(timeout if decision == "expired" else {})),
            ],
        )
        paused = await agent.arun("Pay bob 5.")
        assert paused.status == "awaiting_approval" and codec.failed
        if decision == "approved":
            await agent.aapprove(paused.run_id, "call_pay", by="alice")  # type: ignore[attr-defined]
        rest = [e async for e in agent.stream(paused.run_id, after=len(paused.events))]
    await _one_log(client, paused.run_id, store, paused.events + rest)
    request, answer = [e for e in paused.events + rest if e.type.startswith("approval_")]
    assert answer.status == decision and answer.started_at == request.started_at
    assert request.started_at is not None and answer.ended_at is not None
    if decision == "expired":
        assert answer.ended_at == pytest.approx(request.started_at + 1.0)
    else:
        assert answer.ended_at >= request.started_at


@pytest.mark.parametrize("skew", [-86_400.0, 86_400.0])
async def test_a_deciders_clock_far_off_is_kept_between_the_request_and_the_run(
    client: Client, task_queue: str, ledger: str, skew: float
) -> None:
    """A day behind: stamped at the request. A day ahead: no later than the run took it."""
    script = [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"), Reply("Done.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[weather_tool(ledger), transfer_tool(ledger)]
        )
        paused = await agent.arun("Pay bob 5.")
        assert paused.status == "awaiting_approval"
        sent = time.time()
        decision = Decision("call_pay", True, by="skewed", at=sent + skew)
        await send_decision(client, paused.run_id, decision)
        result = await agent.aresume(paused.run_id)  # type: ignore[attr-defined]
    assert result.status == "completed"
    request, answer = [e for e in result.events if e.type.startswith("approval_")]
    assert request.started_at is not None and answer.ended_at is not None
    if skew < 0:
        assert answer.ended_at == request.started_at
    else:
        assert sent - 5 < answer.ended_at < time.time() + 5
    run_end = result.events[-1]
    assert run_end.ended_at is not None and run_end.ended_at < time.time() + 5


async def test_an_end_no_step_recorded_is_stamped_when_it_came(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A run that fails on a refused request, or is cancelled while it waits: not back-dated.

    Nothing in history times such an end, so it takes its workflow task's
    start, after the failing request came back or the cancel was sent; the
    step before it ended earlier.
    """
    with ScriptedModelServer([Hang(0.5, Fail(400, "refused"))]) as model:
        agent = scripted_agent(model, client, task_queue)
        failed = await agent.arun(PROMPT)
    assert failed.status == "failed"
    start, end = failed.events[0], failed.events[-1]
    assert end.type == "run_end" and start.started_at is not None and end.ended_at is not None
    assert end.ended_at >= start.started_at + 0.5

    script = [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"), Reply("Done.")]
    with ScriptedModelServer(script) as model:
        store = FileStore(tmp_path)
        agent = scripted_agent(
            model,
            client,
            task_queue,
            store=store,
            tools=[weather_tool(ledger), transfer_tool(ledger)],
            name="Payer",
        )
        paused = await agent.arun("Pay bob 5.")
        assert paused.status == "awaiting_approval"
        cancelled_at = time.time()
        handle = client.get_workflow_handle(paused.run_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    events = await TemporalStore(client).aload(paused.run_id)
    request = next(e for e in events if e.type == "approval_request")
    end = events[-1]
    assert end.type == "run_end" and "cancelled" in str(end.error) and end.ended_at is not None
    assert request.started_at is not None and request.started_at < cancelled_at <= end.ended_at
    assert [e.to_dict() for e in store.load(paused.run_id)] == [e.to_dict() for e in events]
