"""Streamed runs: live events and text deltas that survive the client and the worker."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import Event, FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import (
    ANSWER,
    PROMPT,
    SEED_EVENT_TYPES,
    ledger_lines,
    spawn,
    wait_until,
    weather_agent,
)

EVENT_TYPES = SEED_EVENT_TYPES


def split(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """(recorded events, live-only deltas and retry markers)."""
    live = [e for e in events if e.type in ("text_delta", "error")]
    return [e for e in events if e.type not in ("text_delta", "error")], live


async def test_stream_equals_the_record_and_deltas_spell_the_answer(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """Streamed events equal history and the JSONL mirror; the deltas concatenate to the answer."""
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=client, store=FileStore(tmp_path)
    )
    run_id = uuid.uuid4().hex
    received = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
    events, live = split(received)
    assert [e.type for e in events] == EVENT_TYPES
    projected = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in events] == [e.to_dict() for e in projected]
    assert [e.to_dict() for e in events] == [e.to_dict() for e in FileStore(tmp_path).load(run_id)]
    assert live and all(e.type == "text_delta" and e.turn == 2 for e in live)
    assert "".join(e.text or "" for e in live) == ANSWER
    # deltas arrive before the generation they belong to is recorded
    assert received.index(live[-1]) < received.index(events[4])


async def test_abandoned_stream_completes_and_reattach_gets_the_rest(
    client: Client, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """A client leaving after the first tool_call loses nothing; after=N gets the rest."""
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=client, ledger=ledger
    )
    run_id = uuid.uuid4().hex
    seen: list[Event] = []
    async for event in agent.stream_chat(PROMPT, run_id=run_id):
        seen.append(event)
        if event.type == "tool_call":
            break
    assert [e.type for e in seen] == EVENT_TYPES[:3]

    rest = [e async for e in agent.stream(run_id, after=len(seen))]
    assert [e.type for e in rest] == EVENT_TYPES[3:]
    projected = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in seen + rest] == [e.to_dict() for e in projected]
    result = await agent.aresume(run_id)
    assert result.final_output == ANSWER and len(ledger_lines(ledger)) == 1
    # a finished run streams from history, from any offset
    assert [e.type for e in [e async for e in agent.stream(run_id, after=5)]] == EVENT_TYPES[5:]


async def test_stream_after_n_while_live_has_no_duplicates_or_gaps(
    client: Client, task_queue: str
) -> None:
    """Reattaching mid-run with after=N yields exactly events N.. as they are recorded."""
    with ScriptedModelServer(latency=0.3) as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        run_id = uuid.uuid4().hex
        first: list[Event] = []
        async for event in agent.stream_chat(PROMPT, run_id=run_id):
            first.append(event)
            if len(first) == 2:
                break
        tail = [e async for e in agent.stream(run_id, after=2)]
    assert [e.type for e in first + tail] == EVENT_TYPES


async def test_killed_streaming_client_does_not_stop_the_run(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    ledger: str,
) -> None:
    """SIGKILL of the process that streams a run: the worker still completes it."""
    env = {
        "TEMPORAL_ADDRESS": temporal_address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
    }
    worker = spawn(["worker"], env)
    run_id = uuid.uuid4().hex
    streamer = spawn(["stream", "--run-id", run_id], {**env, "EMBEDDED_WORKER": "0"})
    try:
        assert streamer.stdout is not None
        first = json.loads(streamer.stdout.readline())
        assert first["type"] == "run_start"
        streamer.send_signal(signal.SIGKILL)
        streamer.wait(10)
        outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    finally:
        for proc in (streamer, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert outcome["status"] == "completed" and outcome["final_output"] == ANSWER
    assert len(ledger_lines(ledger)) == 1


async def test_worker_killed_mid_stream_hands_over_without_duplicates(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """A worker SIGKILLed while streaming text: another takes over; events stay exact."""
    with ScriptedModelServer(chunk_delay=0.15) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
        }
        agent = weather_agent(
            base_url=model.base_url, task_queue=task_queue, temporal=client, embedded_worker=False
        )
        first_worker = spawn(["worker"], env)
        second_worker = None
        received: list[Event] = []
        run_id = uuid.uuid4().hex
        try:
            async for event in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True):
                received.append(event)
                deltas = [e for e in received if e.type == "text_delta"]
                if len(deltas) == 3 and second_worker is None:
                    first_worker.send_signal(signal.SIGKILL)
                    first_worker.wait(10)
                    second_worker = spawn(["worker"], env)
        finally:
            for proc in (first_worker, second_worker):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
    events, live = split(received)
    assert [e.type for e in events] == EVENT_TYPES
    projected = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in events] == [e.to_dict() for e in projected]
    markers = [i for i, e in enumerate(live) if e.type == "error"]
    assert markers, "the retried attempt was not announced"
    after_reset = live[markers[-1] + 1 :]
    assert "".join(e.text or "" for e in after_reset) == ANSWER


async def test_fifty_concurrent_streams_on_one_worker(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """50 streams at once on one embedded worker all finish with complete, ordered events."""
    agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)

    async def one(i: int) -> list[Event]:
        return [e async for e in agent.stream_chat(f"What is the weather in City{i}?")]

    results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(50))), 240)
    for i, events in enumerate(results):
        assert [e.type for e in events] == EVENT_TYPES
        assert events[-1].text == f"Answer based on tool: The weather in City{i} is sunny and 22C."
    wait_until(lambda: model.request_count == 100, "every model request", timeout=5)
