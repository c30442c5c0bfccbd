"""`local_model_calls=True`: each model request is a local activity inside the run's workflow task.

Fewer round trips to the server per run (no activity task to schedule, poll
and complete for each generation), so the same log, JSONL and result must
come out of it: the request rides in the local activity's result, the one
place history keeps it, and `TemporalStore` reads it from there.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal import FileStore, RunResult, TemporalStore
from agentor_temporal._timeline import read_timeline
from agentor_temporal.testing import (
    CallTool,
    Fail,
    Hang,
    Reply,
    ScriptedModelServer,
)
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.agent_run import CANCELLED

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, failing_once, until, weather_agent


async def _shape(client: Client, run_id: str) -> tuple[list[str], list[str], int]:
    """(scheduled activity types, local activity types, workflow tasks) of a run's history."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled, local, tasks = [], [], 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details
            if "data" in details:
                local.append(json.loads(details["data"].payloads[0].data)["activity_type"])
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            tasks += 1
    return scheduled, local, tasks


async def test_the_seed_run_asks_the_model_in_local_activities(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """Same events, JSONL and result as the default; two workflow tasks fewer."""
    runs = {}
    for local in (False, True):
        store = FileStore(tmp_path / str(local))
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=store,
            name=f"Weather {local}",
            local_model_calls=local,
        )
        result = await agent.arun(PROMPT)
        assert result.status == "completed" and result.final_output == ANSWER
        projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
        assert [e["type"] for e in projected] == SEED_EVENT_TYPES
        # the generations' requests are read back whole, from the markers
        assert projected[1]["messages"] == projected[0]["messages"]
        assert len(projected[4]["messages"]) == 4
        assert [e.to_dict() for e in store.load(result.run_id)] == projected
        assert [e.to_dict() for e in result.events] == projected
        runs[local] = (projected, await _shape(client, result.run_id))

    (default, (scheduled, markers, tasks)), (mine, (l_scheduled, l_markers, l_tasks)) = (
        runs[False],
        runs[True],
    )
    assert scheduled == ["generate", "call_tool", "generate"] and "generate" not in markers
    assert l_scheduled == ["call_tool"] and l_markers.count("generate") == 2
    assert l_tasks == tasks - 2

    def comparable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the scripted model names each call afresh; times and agent names differ
        text = json.dumps(events).replace(str(events[2]["call_id"]), "call")
        skip = {"started_at", "ended_at", "agent"}
        return [{k: v for k, v in e.items() if k not in skip} for e in json.loads(text)]

    assert comparable(mine) == comparable(default)


async def _mode(client: Client, run_id: str) -> tuple[list[str], list[str]]:
    scheduled, local, _ = await _shape(client, run_id)
    return scheduled, local


async def test_a_run_that_lost_no_worker_reads_no_history_for_lost_sends(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local request counts its sends lost with a worker in the run's history (a request to
    the server each): a run that lost none knows it, and its requests read nothing."""
    service = client.workflow_service
    real = service.get_workflow_execution_history_reverse
    reads: list[str] = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        if activity.in_activity():
            reads.append(activity.info().activity_type)
        return await real(*args, **kwargs)

    monkeypatch.setattr(service, "get_workflow_execution_history_reverse", counted)
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=client, local_model_calls=True
    )
    result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == ANSWER
    assert model.request_count == 2
    assert reads == []


async def test_model_faults_in_local_requests(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A 500 is retried and the run completes; a 400 fails the run clearly, as with activities."""
    script: list[Any] = [
        Fail(500, "The server had an error"),
        CallTool("get_weather", {"city": "London"}),
        Reply(ANSWER),
        Fail(400, "Invalid request"),
    ]
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            local_model_calls=True,
        )
        done = await agent.arun(PROMPT)
        assert done.status == "completed" and done.final_output == ANSWER
        assert model.request_count == 3
        _, markers = await _mode(client, done.run_id)
        assert markers.count("generate") == 2

        refused = await agent.arun(PROMPT)
        assert model.request_count == 4  # not retried
        # the same words as from an activity
        model.push(Fail(400, "Invalid request"))
        plain = weather_agent(
            base_url=model.base_url, task_queue=task_queue, temporal=client, name="Plain"
        )
        expected = await plain.arun(PROMPT)
    assert refused.status == expected.status == "failed"
    assert refused.error == expected.error == "Model request failed with 400: Invalid request"
    end = refused.events[-1]
    assert end.type == "run_end" and end.status == "failed" and end.error == refused.error
    for result in (done, refused):
        assert [e.to_dict() for e in FileStore(tmp_path).load(result.run_id)] == [
            e.to_dict() for e in await TemporalStore(client).aload(result.run_id)
        ]


async def test_a_run_cancelled_during_a_local_request_says_so_and_resumes(
    client: Client, task_queue: str
) -> None:
    """Cancelled mid-request: the request's answer is waited for and recorded (behaviour level
    14), its log ends as a cancelled run does, and `resume` finishes it from that answer."""
    # then the default agent (`tool_then_answer`); the cancel reaches the run when its
    # worker renews the workflow task the local request holds (at 8 s)
    with ScriptedModelServer([Hang(12)]) as model:
        agent = weather_agent(
            base_url=model.base_url, task_queue=task_queue, temporal=client, local_model_calls=True
        )
        run_id = await agent.astart(PROMPT)
        await until(lambda: model.request_count >= 1, "the first model request")
        await client.get_workflow_handle(run_id).cancel()
        with pytest.raises(WorkflowFailureError):
            await client.get_workflow_handle(run_id).result()
        events = await TemporalStore(client).aload(run_id)
        assert [e.type for e in events] == ["run_start", "generation", "run_end"]
        assert str(events[-1].error).startswith(CANCELLED)
        resumed = await agent.aresume(run_id)
    assert model.request_count == 2  # the recorded answer's call ran, then the answer
    assert resumed.status == "completed" and resumed.final_output == ANSWER


async def test_streamed_runs_keep_their_text_deltas(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """`stream_text` needs the request's deltas live: such runs ask in activities."""
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=client, local_model_calls=True
    )
    deltas, run_id = [], f"streamed-{task_queue}"
    async for event in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True):
        if event.type == "text_delta":
            deltas.append(event.text)
    assert "".join(str(d) for d in deltas) == ANSWER
    scheduled, markers = await _mode(client, run_id)
    assert scheduled.count("generate") == 2 and "generate" not in markers


async def test_the_timeline_draws_local_requests(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """`show --timeline` reads a local request's bar from its marker, like an activity's."""
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=client, local_model_calls=True
    )
    result = await agent.arun(PROMPT)
    timeline = await read_timeline(client, result.run_id)
    assert timeline is not None
    generations = [b for b in timeline.bars if b.kind == "generation"]
    assert [b.label for b in generations] == ["turn 1 (local)", "turn 2 (local)"]
    recorded = [e for e in result.events if e.type == "generation"]
    assert [(b.start, b.end) for b in generations] == [(e.started_at, e.ended_at) for e in recorded]
    assert [b.kind for b in timeline.bars].count("tool") == 1


async def test_a_request_longer_than_the_workflow_task_timeout_is_asked_once(
    client: Client, task_queue: str
) -> None:
    """A local request outliving the 5 s workflow task timeout is not asked again.

    The SDK keeps the workflow task alive while its local activity runs (it
    completes the task and takes the next one every ~4 s), so a live worker's
    long request is neither timed out nor repeated.
    """
    script: list[Any] = [
        Hang(9, CallTool("get_weather", {"city": "London"})),
        Reply(ANSWER),
    ]
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url, task_queue=task_queue, temporal=client, local_model_calls=True
        )
        result = await agent.arun(PROMPT)
        assert model.request_count == 2
    assert result.status == "completed" and result.final_output == ANSWER
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT not in kinds
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    # the task was kept alive: more than the two a run without waiting takes
    assert kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) >= 4


async def test_a_local_request_that_would_start_late_goes_as_an_activity(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker too busy to ask promptly does not ask inside its workflow task.

    Such a task may time out before the answer is recorded, and the request
    would be made (and paid for) again. The local request refuses before the
    model is asked, and the run asks in an activity: each request made once.
    """
    # every local request counts as late here
    monkeypatch.setattr(policies, "LOCAL_START_LIMIT", timedelta(0))
    store = FileStore(tmp_path)
    result = await _local_seed_run(client, model, task_queue, store)
    assert model.request_count == 2
    scheduled, markers = await _mode(client, result.run_id)
    assert scheduled == ["generate", "call_tool", "generate"]
    assert markers.count("generate") == 2  # the refusals, recorded as failed markers
    projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert [e["type"] for e in projected] == SEED_EVENT_TYPES
    assert [e.to_dict() for e in store.load(result.run_id)] == projected


async def _local_seed_run(
    temporal: Client, model: ScriptedModelServer, task_queue: str, store: FileStore
) -> RunResult:
    """The seed's run with local model calls, mirrored to `store`: completed with its answer."""
    agent = weather_agent(
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=temporal,
        store=store,
        local_model_calls=True,
    )
    result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == ANSWER
    return result


async def test_a_local_answer_whose_workflow_task_failed_is_not_asked_again(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """The worker lives and holds the answer: the rerun task takes it, no second request.

    A local activity's marker is recorded with its workflow task's completion,
    so a task that fails after the answer came could lose it, and the run
    would pay for the request again. The SDK keeps a live worker's answers
    for the task that runs next, which `local_model_calls` relies on; this
    holds it to that. (A task that timed out while its worker was frozen is
    dropped with the run's cache: the rerun task joins the worker's live
    request instead, test_live_retry.)
    """
    # the first tool-calling answer's workflow task fails
    failing, codec = failing_once(client, lambda data: b'"get_weather"' in data)
    store = FileStore(tmp_path)
    result = await _local_seed_run(failing, model, task_queue, store)
    assert codec.failed
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED in kinds, "no task failed: proved nothing"
    assert model.request_count == 2
    _, markers = await _mode(client, result.run_id)
    assert markers.count("generate") == 2
    projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert [e["type"] for e in projected] == SEED_EVENT_TYPES
    assert [e.to_dict() for e in store.load(result.run_id)] == projected
