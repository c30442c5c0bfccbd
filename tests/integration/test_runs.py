"""Runs and resumes through the facade, on a real dev server and real `openai` client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RawValue

from agentor_temporal import Event, FileStore, MemoryStore, TemporalStore, function_tool
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer

from helpers import (
    ANSWER,
    PROMPT,
    SEED_EVENT_TYPES,
    ledger_lines,
    scripted_agent,
    weather_agent,
    weather_tool,
)


async def test_run_records_the_documented_events(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A run completes with the seed's seven events, mirrored and projected identically."""
    agent = scripted_agent(
        model, client, task_queue, store=FileStore(tmp_path / "runs"), ledger=ledger
    )
    result = await agent.arun(PROMPT)

    assert result.status == "completed"
    assert result.final_output == ANSWER
    assert result.error is None
    assert [e.type for e in result.events] == SEED_EVENT_TYPES
    assert (result.usage.input_tokens, result.usage.output_tokens) == (20, 10)
    assert result.messages[-1] == {"role": "assistant", "content": ANSWER}
    assert len(ledger_lines(ledger)) == 1

    mirrored = FileStore(tmp_path / "runs").load(result.run_id)
    projected = await TemporalStore(client).aload(result.run_id)
    assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in projected]
    assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in result.events]
    # one JSON object per line, exactly the events
    lines = (tmp_path / "runs" / f"{result.run_id}.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [e.to_dict() for e in mirrored]


async def test_completed_run_is_returned_without_model_or_tool(
    client: Client, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """Resuming a completed run asks the model nothing and runs no tool."""
    agent = scripted_agent(model, client, task_queue, ledger=ledger)
    first = await agent.arun(PROMPT)
    requests, executions = model.request_count, len(ledger_lines(ledger))

    again = await agent.aresume(first.run_id)

    assert again.status == "completed" and again.final_output == ANSWER
    assert [e.to_dict() for e in again.events] == [e.to_dict() for e in first.events]
    assert model.request_count == requests
    assert len(ledger_lines(ledger)) == executions


async def test_run_without_store_still_gets_a_resumable_run_id(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """No store: the run still has a run_id and resumes from Temporal alone."""
    agent = scripted_agent(model, client, task_queue)
    result = await agent.arun(PROMPT)
    assert result.run_id and result.status == "completed"
    other = scripted_agent(model, client, task_queue)
    resumed = await other.aresume(result.run_id)
    assert resumed.final_output == ANSWER


async def test_plain_client_start_is_returned_by_resume(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """A run started by workflow type and JSON input (no facade) resumes by id."""
    agent = scripted_agent(model, client, task_queue)
    from agentor_temporal.worker import build_worker

    async with build_worker(client, [agent], task_queue=task_queue):
        handle = await client.start_workflow(
            "AgentRun",
            {"agent": "Weather Agent", "input": PROMPT},
            id="plain-" + task_queue,
            task_queue=task_queue,
        )
        raw = await handle.result()
    assert raw == {
        "run_id": "plain-" + task_queue,
        "status": "completed",
        "final_output": ANSWER,
        "usage": {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30},
        "error": None,
    }
    requests = model.request_count
    result = await agent.aresume("plain-" + task_queue)
    assert result.status == "completed" and result.final_output == ANSWER
    assert len(result.events) == 7
    assert model.request_count == requests


async def test_caller_chosen_run_id_is_idempotent(
    client: Client, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """Starting again with a finished run's id attaches to it instead of re-running."""
    agent = scripted_agent(model, client, task_queue, ledger=ledger)
    first = await agent.arun(PROMPT, run_id=f"order-{task_queue}")
    second = await agent.arun("something else entirely", run_id=f"order-{task_queue}")
    assert second.run_id == first.run_id
    assert second.final_output == first.final_output
    assert model.request_count == 2 and len(ledger_lines(ledger)) == 1


async def test_an_id_another_workflow_holds_is_refused_naming_it(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """A run id the namespace's own workflows use (an app's `order-1234`) is no agent run.

    run()/astart()/stream_chat() with it attached to that workflow: a running one was
    waited on for ever (its end never comes as a run's), a closed one answered as a
    run with no events; resume() and stream() of it waited for ever too, and approve()
    said "Update handler for 'decide' expected but not found".
    """
    agent = scripted_agent(model, client, task_queue)
    running, closed = f"order-{task_queue}", f"order-closed-{task_queue}"
    # a type no worker here runs: it stays running until terminated
    for workflow_id in (running, closed):
        await client.start_workflow("OrderWorkflow", "x", id=workflow_id, task_queue="orders")
    await client.get_workflow_handle(closed).terminate("done with it")

    async def collected(stream: Any) -> list[Event]:
        return [event async for event in stream]

    try:
        for run_id in (running, closed):
            calls = {
                "run": lambda run_id=run_id: agent.arun(PROMPT, run_id=run_id),
                "astart": lambda run_id=run_id: agent.astart(PROMPT, run_id=run_id),
                "stream_chat": lambda run_id=run_id: collected(
                    agent.stream_chat(PROMPT, run_id=run_id)
                ),
                "resume": lambda run_id=run_id: agent.aresume(run_id),
                "stream": lambda run_id=run_id: collected(agent.stream(run_id)),
                "fork": lambda run_id=run_id: agent.afork(run_id, "and then?"),
                "approve": lambda run_id=run_id: agent.aapprove(run_id, "call_1"),
            }
            for how, call in calls.items():
                with pytest.raises(ValueError) as info:
                    await asyncio.wait_for(call(), 10)
                said = str(info.value)
                assert f"{run_id!r} is a workflow of type 'OrderWorkflow'" in said, (how, said)
                assert "not an agent run" in said and "another run id" in said, (how, said)
        # a plain client's fork naming that workflow as its parent: read without one
        from agentor_temporal.worker import build_worker

        execution = (await client.get_workflow_handle(running).describe()).run_id
        fork = {"run_id": running, "at": 1, "execution": execution}
        inp = {"agent": "Weather Agent", "input": PROMPT, "event_offset": 1, "fork": fork}
        plain = f"{task_queue}-plain"  # the agent's embedded worker serves its own
        async with build_worker(client, [agent], task_queue=plain):
            handle = await client.start_workflow(
                "AgentRun", inp, id=f"fork-{running}", task_queue=plain
            )
            await asyncio.wait_for(handle.result(), 20)
        events = await TemporalStore(client).aload(f"fork-{running}")
        assert [e.type for e in events][:2] == ["fork", "run_start"], events
    finally:
        await client.get_workflow_handle(running).terminate("test over")
    assert model.request_count == 2


async def test_an_id_another_agent_holds_is_refused_naming_it(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """run()/astart()/stream_chat() with a run id another agent's run holds name that agent.

    They attached to it: a closed one's result was returned as this agent's answer
    to this prompt, and a running one of an agent no worker here knows was waited on
    for ever. Only resume() checked who owns the run.
    """
    support = scripted_agent(model, client, task_queue, name="Support Agent")
    weather = scripted_agent(model, client, task_queue)
    closed = f"order-{task_queue}"
    await support.arun(PROMPT, run_id=closed)
    running = f"order-running-{task_queue}"  # an agent no worker serves: it stays running
    await client.start_workflow(
        "AgentRun", {"agent": "Billing Agent", "input": PROMPT}, id=running, task_queue="nobody"
    )
    requests = model.request_count

    async def collected(stream: Any) -> list[Event]:
        return [event async for event in stream]

    try:
        for run_id, owner in ((closed, "Support Agent"), (running, "Billing Agent")):
            calls = {
                "run": lambda run_id=run_id: weather.arun(PROMPT, run_id=run_id),
                "astart": lambda run_id=run_id: weather.astart(PROMPT, run_id=run_id),
                "stream_chat": lambda run_id=run_id: collected(
                    weather.stream_chat(PROMPT, run_id=run_id)
                ),
            }
            for how, call in calls.items():
                with pytest.raises(ValueError) as info:
                    await asyncio.wait_for(call(), 10)
                said = str(info.value)
                assert f"Run {run_id!r} belongs to agent {owner!r}" in said, (how, said)
                assert "another run id" in said, (how, said)
    finally:
        await client.get_workflow_handle(running).terminate("test over")
    assert model.request_count == requests
    # its own agent still attaches to it, as before
    assert (await support.arun("again", run_id=closed)).status == "completed"


async def test_unknown_run_id_raises_key_error(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """resume() of an id Temporal and the store do not know raises KeyError naming it."""
    agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path))
    with pytest.raises(KeyError, match="no-such-run"):
        await agent.aresume("no-such-run")


@pytest.mark.parametrize("run_id", ["../x", "/tmp/x", "a\\b", "C:x", ".hidden", ""])
async def test_hostile_run_ids_are_refused(
    client: Client, model: ScriptedModelServer, task_queue: str, run_id: str
) -> None:
    """Ids that could escape a runs directory are refused before anything starts."""
    agent = scripted_agent(model, client, task_queue)
    with pytest.raises(ValueError, match="Invalid run id"):
        await agent.arun(PROMPT, run_id=run_id)
    with pytest.raises(ValueError, match="Invalid run id"):
        await agent.aresume(run_id)
    assert model.request_count == 0


@pytest.mark.parametrize("run_id", ["../escape", "/tmp/x", "a\\b", "C:x", ".hidden", "x'y"])
async def test_hostile_workflow_ids_from_a_plain_client_fail_the_run(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, run_id: str
) -> None:
    """A run started by any client under an id the facade refuses fails at once, naming it."""
    agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path / "runs"))
    from agentor_temporal.worker import build_worker

    async with build_worker(client, [agent], task_queue=task_queue):
        handle = await client.start_workflow(
            "AgentRun",
            {"agent": "Weather Agent", "input": PROMPT},
            id=run_id,
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
    from agentor_temporal.workflows.formatting import failure_message

    assert failure_message(info.value).startswith(f"Invalid run id {run_id!r}")
    assert model.request_count == 0
    # nothing written, inside the runs directory or out of it
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*")] == [Path("runs")]


@pytest.mark.parametrize(
    "status, message",
    [
        (400, "Invalid 'messages': bad request for this model"),
        (401, "Incorrect API key provided: sk-...abcd"),
        (404, "The model `gpt-4o-mini` does not exist or you do not have access to it"),
    ],
)
async def test_failed_run_continues_as_a_new_segment(
    client: Client, task_queue: str, tmp_path: Path, ledger: str, status: int, message: str
) -> None:
    """A non-retryable model error fails the run at once; resume continues it under the same id."""
    with ScriptedModelServer([Fail(status, message)]) as model:
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path), ledger=ledger)
        failed = await agent.arun(PROMPT)
        assert failed.status == "failed"
        assert failed.error == f"Model request failed with {status}: {message}"
        assert failed.events[-1].type == "run_end" and failed.events[-1].status == "failed"
        assert failed.events[-1].error == failed.error
        assert model.request_count == 1  # not retried

        resumed = await agent.aresume(failed.run_id)  # the cause is fixed: the script moved on
    assert resumed.status == "completed" and resumed.final_output == ANSWER
    assert resumed.run_id == failed.run_id
    types = [e.type for e in resumed.events]
    assert types == [
        "run_start",
        "run_end",
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "generation",
        "message",
        "run_end",
    ]
    assert [e.to_dict() for e in FileStore(tmp_path).load(failed.run_id)] == [
        e.to_dict() for e in resumed.events
    ]
    assert [e.to_dict() for e in await TemporalStore(client).aload(failed.run_id)] == [
        e.to_dict() for e in resumed.events
    ]
    assert len(ledger_lines(ledger)) == 1


async def test_max_turns_ends_with_status_max_turns(client: Client, task_queue: str) -> None:
    """A model that never stops asking for tools ends the run at max_turns."""
    with ScriptedModelServer(lambda req: CallTool("get_weather", {"city": "Oslo"})) as model:
        agent = scripted_agent(model, client, task_queue, max_turns=3)
        result = await agent.arun(PROMPT)
    assert result.status == "max_turns"
    assert result.error == "Reached max_turns (3) without a final answer."
    assert model.request_count == 3
    assert [e.type for e in result.events].count("generation") == 3


async def test_failing_tool_is_disabled_after_max_tool_failures(
    client: Client, task_queue: str
) -> None:
    """A tool that keeps raising is withdrawn after max_tool_failures and the model is told."""
    attempts: list[str] = []

    @function_tool
    def broken_tool(city: str) -> str:
        """Always fails."""
        attempts.append(city)
        raise RuntimeError("backend unavailable")

    script = [
        CallTool("broken_tool", {"city": "Paris"}),
        CallTool("broken_tool", {"city": "Paris"}),
        CallTool("broken_tool", {"city": "Paris"}),
        Reply("I could not get the weather."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[broken_tool], max_tool_failures=2)
        result = await agent.arun("What is the weather in Paris?")
        requests = list(model.requests)
    assert result.status == "completed"
    results = [e for e in result.events if e.type == "tool_result"]
    assert [r.error for r in results] == [
        "RuntimeError: backend unavailable",
        "RuntimeError: backend unavailable",
        "tool disabled",
    ]
    assert results[0].result == "Error: RuntimeError: backend unavailable"
    assert len(attempts) == 2  # the third call never reached the tool
    assert "tools" not in requests[2]  # withdrawn from the offer
    notice = requests[2]["messages"][-1]
    assert notice["role"] == "user" and "broken_tool" in notice["content"]


async def test_custom_store_and_memory_store_receive_every_event(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """Any three-method store, and MemoryStore, get every event exactly once."""

    class ListStore:
        def __init__(self) -> None:
            self.appended: list[tuple[str, Event]] = []

        def append(self, run_id: str, event: Event) -> None:
            self.appended.append((run_id, event))

        def load(self, run_id: str) -> list[Event]:
            return [e for r, e in self.appended if r == run_id]

        def list_runs(self) -> list[str]:
            return sorted({r for r, _ in self.appended})

    custom, memory = ListStore(), MemoryStore()
    a = scripted_agent(model, client, task_queue, store=custom)
    b = weather_agent(
        base_url=model.base_url, task_queue=task_queue + "-m", temporal=client, store=memory
    )
    ra, rb = await a.arun(PROMPT), await b.arun(PROMPT)
    assert [e.to_dict() for e in custom.load(ra.run_id)] == [e.to_dict() for e in ra.events]
    assert custom.list_runs() == [ra.run_id]
    assert [e.to_dict() for e in memory.load(rb.run_id)] == [e.to_dict() for e in rb.events]
    assert memory.list_runs() == [rb.run_id]


async def test_unknown_agent_fails_the_workflow_clearly(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """An unregistered agent fails the workflow, non-retryably, naming the known ones."""
    agent = scripted_agent(model, client, task_queue)
    from agentor_temporal.worker import build_worker

    async with build_worker(client, [agent], task_queue=task_queue):
        handle = await client.start_workflow(
            "AgentRun",
            {"agent": "Nobody", "input": "hi"},
            id="nobody-" + task_queue,
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    from agentor_temporal.workflows.formatting import failure_message

    message = failure_message(info.value)
    assert "Unknown agent 'Nobody'" in message and "'Weather Agent'" in message


@pytest.mark.parametrize("ending", ["unknown-agent", "timed-out"])
async def test_a_run_that_ended_before_its_run_start_begins_again_on_resume(
    client: Client, model: ScriptedModelServer, task_queue: str, ending: str
) -> None:
    """A run closed before it recorded an event resumes from the input it was started with."""
    from datetime import timedelta

    from agentor_temporal.worker import build_worker

    agent = scripted_agent(model, client, task_queue, embedded_worker=False)
    other = scripted_agent(model, client, task_queue, name="Other")
    run_id = f"{ending}-{task_queue}"
    if ending == "unknown-agent":
        # the fleet does not run the agent yet: the run fails at once, saying so
        async with build_worker(client, [other], task_queue=task_queue):
            await agent.astart(PROMPT, run_id=run_id, max_turns=3)
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 20)
    else:
        # no worker came before the run's timeout
        await client.start_workflow(
            "AgentRun",
            {"agent": agent.name, "input": PROMPT, "max_turns": 3},
            id=run_id,
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=1),
        )
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 20)
    assert await TemporalStore(client).aload(run_id) == []
    assert model.request_count == 0

    with pytest.raises(ValueError, match="belongs to agent 'Weather Agent', not 'Other'"):
        await other.aresume(run_id)
    served = scripted_agent(model, client, task_queue)
    result = await asyncio.wait_for(served.aresume(run_id), 30)

    assert result.status == "completed" and result.final_output == ANSWER, result.error
    assert [e.type for e in result.events] == SEED_EVENT_TYPES
    assert model.requests[0]["messages"][-1] == {"role": "user", "content": PROMPT}
    assert [e.to_dict() for e in await TemporalStore(client).aload(run_id)] == [
        e.to_dict() for e in result.events
    ]
    # and the id is done: run() with it attaches to the finished run
    again = await served.arun(PROMPT, run_id=run_id)
    assert again.final_output == ANSWER and model.request_count == 2


def _raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    """A workflow argument sent as these exact bytes."""
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


#: start the workflow with no argument at all
NO_INPUT = object()


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ("just a string", "input is str"),
        ({"input": "hi"}, '"agent" must be a non-empty string'),
        ({"agent": "Weather Agent"}, '"input" must be a string or a list'),
        (
            {"agent": "Weather Agent", "input": "hi", "max_turns": 0},
            '"max_turns" must be a positive',
        ),
        ({"agent": "Weather Agent", "input": "hi", "bogus": 1}, "unknown input field"),
        # bytes that are not JSON at all, as any client in any language can send
        (_raw(b'{"agent": "Weather Agent", "inp'), "(Unterminated string starting at"),
        (_raw(b"\xff\xfe not utf-8"), "(Expecting value: line 1 column 1"),
        (_raw(b"{}", encoding=b"binary/protobuf"), "Invalid AgentRun input"),
        (NO_INPUT, "input is NoneType"),
    ],
    ids=[
        "string",
        "no-agent",
        "no-input",
        "max-turns-0",
        "unknown-field",
        "truncated-json",
        "not-utf8",
        "unknown-encoding",
        "no-arguments",
    ],
)
async def test_malformed_workflow_input_fails_clearly(
    client: Client, model: ScriptedModelServer, task_queue: str, raw: object, fragment: str
) -> None:
    """Malformed input fails the workflow (never an endless workflow-task retry)."""
    agent = scripted_agent(model, client, task_queue)
    from agentor_temporal.worker import build_worker

    run_id = "bad-" + task_queue
    async with build_worker(client, [agent], task_queue=task_queue):
        args = [] if raw is NO_INPUT else [raw]
        handle = await client.start_workflow(
            "AgentRun", args=args, id=run_id, task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as info:
            # a wedged workflow task would wait forever; 20 s is ample to fail
            await asyncio.wait_for(handle.result(), 20)
    from agentor_temporal.workflows.formatting import failure_message

    assert fragment in failure_message(info.value)
    assert model.request_count == 0
    # the failed run reads back, and resuming it is a clear error, not a decode crash
    assert await TemporalStore(client).aload(run_id) == []
    with pytest.raises(ValueError, match="no recoverable messages"):
        await agent.aresume(run_id)


async def test_resume_refuses_an_agent_built_differently(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Resuming with other tools or instructions than the run started with is a clear error."""
    with ScriptedModelServer([Fail(400, "nope")]) as model:
        agent = scripted_agent(model, client, task_queue)
        failed = await agent.arun(PROMPT)
        assert failed.status == "failed"

        @function_tool
        def get_time(city: str) -> str:
            """Local time."""
            return "noon"

        other = scripted_agent(
            model, client, task_queue, tools=[weather_tool(), get_time], instructions="Be terse."
        )
        with pytest.raises(ValueError, match="built differently") as info:
            await other.aresume(failed.run_id)
        assert "instructions differ" in str(info.value) and "get_time" in str(info.value)
        # and how to go on with the new build: a fork, which takes it
        assert f"agent.fork({failed.run_id!r})" in str(info.value), info.value
        assert f"agentor-temporal fork {failed.run_id} --agent" in str(info.value)
        stranger = scripted_agent(model, client, task_queue, name="Other Agent")
        with pytest.raises(ValueError, match="belongs to agent 'Weather Agent'"):
            await stranger.aresume(failed.run_id)
        assert model.request_count == 1

    # a finished run is refused to another agent too: it was returned as that agent's,
    # and written into that agent's store under its name
    with ScriptedModelServer() as model:
        done = await scripted_agent(model, client, task_queue).arun(PROMPT)
        assert done.status == "completed" and done.run_id is not None
        store = FileStore(tmp_path / "other")
        stranger = scripted_agent(model, client, task_queue, name="Other Agent", store=store)
        with pytest.raises(ValueError, match="belongs to agent 'Weather Agent'"):
            await stranger.aresume(done.run_id)
        assert store.load(done.run_id) == []
        # a rebuilt agent of the run's own name still gets the finished run
        rebuilt = scripted_agent(model, client, task_queue, instructions="Be terse.")
        assert (await rebuilt.aresume(done.run_id)).final_output == done.final_output
