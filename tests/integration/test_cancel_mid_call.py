"""A run cancelled while its tools work keeps what they did; `resume` never runs them again.

A cancel (`temporal workflow cancel`, the UI, A2A `tasks/cancel`, a parent
going away) cannot stop a sync tool's thread. Before behaviour level 5 the
run closed at once and dropped what such a call then returned: `resume`
rewound the batch, and the model called the tool again under a new call id
its idempotency key did not know (a payment made twice). Now the run waits
for each call's worker to say how it ended, records the results of the
calls that ran (a call the cancel stopped is answered as stopped), and then
closes as cancelled; `resume` goes on after them. A turn in which no call
ran to its end is rewound as before, unless none of its calls started: then
resume goes on from the turn's answer, not asking the model again.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Worker

from agentor_temporal import AgentorPlugin, FileStore, function_tool
from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import TemporalStore, policies

from helpers import (
    PROMPT,
    cancel_once_asked,
    history_shows,
    ledger_lines,
    ledger_write,
    scripted_agent,
    spawn,
    stop_process,
    transfer_tool,
    wait_until,
)

CANCELLED_WHILE_RUNNING = "Error: the run was cancelled while this call ran"


def gated_weather(ledger: str, gate: threading.Event, started: threading.Event) -> Any:
    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        started.set()
        gate.wait(60)
        ledger_write(ledger, "get_weather", city)
        return f"The weather in {city} is sunny and 22C."

    return get_weather


def endless_lookup(started: threading.Event) -> Any:
    @function_tool
    async def lookup(topic: str) -> str:
        """Look a topic up (it never finishes on its own; a cancel stops it).

        Args:
            topic: What to look up.
        """
        started.set()
        await asyncio.sleep(60)
        return "found"

    return lookup


async def beating_past_the_heartbeat_timeout(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the cancelled call has beaten for longer than the heartbeat timeout."""
    asked = next(
        e.event_time.ToDatetime().timestamp()
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
    )
    past = asked + policies.TOOL_HEARTBEAT_TIMEOUT.total_seconds() + 1
    async with asyncio.timeout(30):
        while time.time() < past:  # the dev server shares this machine's clock
            await asyncio.sleep(0.2)
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    [call] = described.raw_description.pending_activities
    assert call.attempt == 1  # not timed out and retried
    assert call.last_heartbeat_time.ToDatetime().timestamp() > asked + 1


async def closed_cancelled(handle: WorkflowHandle[Any, Any]) -> None:
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 30)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m.get("role") == "tool"]


@pytest.mark.parametrize("late", [False, True], ids=["at-once", "past-the-heartbeat-timeout"])
async def test_a_sync_call_finishing_after_its_run_was_cancelled_is_recorded_not_run_again(
    late: bool, client: Client, task_queue: str, ledger: str, tmp_path: Any
) -> None:
    """The tool finishes after the cancel; its result is in the log; resume asks the model
    once more, with that result, and runs nothing again.

    `late`: it finishes more than the heartbeat timeout after the cancel (a slow
    payment): the call still beats, so the server does not give up on it.
    """
    gate, started = threading.Event(), threading.Event()
    store = FileStore(str(tmp_path / "runs"))
    with ScriptedModelServer() as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            store=store,
            tools=[gated_weather(ledger, gate, started)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart(PROMPT)
            assert await asyncio.to_thread(started.wait, 30)
            try:
                handle = await cancel_once_asked(client, run_id)
                # the run waits for the call: it cannot be stopped, and it is not dropped
                # (before, the run closed in the workflow task that asked the call to stop)
                assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
                if late:
                    await beating_past_the_heartbeat_timeout(handle)
            finally:
                gate.set()
            await closed_cancelled(handle)
            events = await TemporalStore(client).aload(run_id)
            assert [e.type for e in events][-3:] == ["tool_call", "tool_result", "run_end"]
            assert events[-2].result == "The weather in London is sunny and 22C."
            assert events[-1].error is not None and "cancelled" in events[-1].error
            mirrored = await asyncio.to_thread(store.load, run_id)
            assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in events]
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    assert len(ledger_lines(ledger)) == 1
    assert model.request_count == 2  # the first generation, then the reply after resume
    assert tool_messages(model.requests[-1]) == ["The weather in London is sunny and 22C."]


async def test_a_turn_cancelled_with_one_call_done_and_one_stopped_keeps_both_answers(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A sync call that finishes is kept; an async call the cancel stopped is answered as
    stopped; the model, after resume, reads both and the sync tool never runs again."""
    gate, weather_started, lookup_started = threading.Event(), threading.Event(), threading.Event()
    script = [
        [
            CallTool("get_weather", {"city": "London"}, id="call_w"),
            CallTool("lookup", {"topic": "umbrellas"}, id="call_l"),
        ],
        Reply("Sunny; the lookup did not finish."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[gated_weather(ledger, gate, weather_started), endless_lookup(lookup_started)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart(PROMPT)
            assert await asyncio.to_thread(weather_started.wait, 30)
            assert await asyncio.to_thread(lookup_started.wait, 30)
            handle = await cancel_once_asked(client, run_id)
            gate.set()
            await closed_cancelled(handle)
            events = await TemporalStore(client).aload(run_id)
            results = {e.call_id: e for e in events if e.type == "tool_result"}
            assert results["call_w"].result == "The weather in London is sunny and 22C."
            assert results["call_l"].error == "cancelled"
            assert str(results["call_l"].result).startswith(CANCELLED_WHILE_RUNNING)
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    assert len(ledger_lines(ledger)) == 1
    assert model.request_count == 2
    answers = tool_messages(model.requests[-1])
    assert answers[0] == "The weather in London is sunny and 22C."
    assert answers[1].startswith(CANCELLED_WHILE_RUNNING)


async def test_a_call_that_finished_as_the_cancel_came_keeps_its_result(
    client: Client, task_queue: str, ledger: str
) -> None:
    """The cancel and a call's completion reach the run in one workflow task (its worker
    was busy or away): the call's result stands, beside the stopped call's answer. Before
    behaviour level 13 the turn's calls were cancelled before the finished one's result
    was read, so it read as not run, the turn was rewound, and resume ran it again."""
    gate, weather_started, lookup_started = threading.Event(), threading.Event(), threading.Event()
    script = [
        [
            CallTool("get_weather", {"city": "London"}, id="call_w"),
            CallTool("lookup", {"topic": "umbrellas"}, id="call_l"),
        ],
        Reply("Sunny; the lookup did not finish."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[gated_weather(ledger, gate, weather_started), endless_lookup(lookup_started)],
            embedded_worker=False,
        )
        # the calls run on a worker of their own, so that the run's workflow tasks can
        # wait while the cancel and the call's completion both reach history
        calls = Worker(
            client, task_queue=task_queue, activities=AgentorPlugin([agent]).bundle.all()
        )
        async with calls:
            async with build_worker(
                client, [agent], task_queue=task_queue, no_remote_activities=True
            ):
                run_id = await agent.astart(PROMPT)
                assert await asyncio.to_thread(weather_started.wait, 30)
                assert await asyncio.to_thread(lookup_started.wait, 30)
            handle = client.get_workflow_handle(run_id)
            await handle.cancel()
            gate.set()
            await history_shows(client, run_id, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
            async with build_worker(
                client, [agent], task_queue=task_queue, no_remote_activities=True
            ):
                await closed_cancelled(handle)
                events = await TemporalStore(client).aload(run_id)
                results = {e.call_id: e for e in events if e.type == "tool_result"}
                assert results["call_w"].result == "The weather in London is sunny and 22C."
                assert str(results["call_l"].result).startswith(CANCELLED_WHILE_RUNNING)
                resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    assert len(ledger_lines(ledger)) == 1
    assert model.request_count == 2


async def test_a_call_waiting_for_a_person_when_the_run_is_cancelled_is_answered_not_run(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Beside a sync call that finishes, a call waiting for approval: it is answered as not
    run (nobody decided), the finished call is kept, and resume asks the model with both."""
    gate, started = threading.Event(), threading.Event()
    script = [
        [
            CallTool("get_weather", {"city": "London"}, id="call_w"),
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
        ],
        Reply("Sunny; nothing was paid."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[gated_weather(ledger, gate, started), transfer_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart(PROMPT)
            assert await asyncio.to_thread(started.wait, 30)
            async with asyncio.timeout(30):  # the transfer waits for a person
                while "approval_request" not in [
                    e.type for e in await TemporalStore(client).aload(run_id)
                ]:
                    await asyncio.sleep(0.05)
            try:
                handle = await cancel_once_asked(client, run_id)
                # the run still finishes the weather call; the transfer waits no more
                with pytest.raises(ValueError, match="no tool call 'call_pay' waiting"):
                    await agent.aapprove(run_id, "call_pay", by="alice")
            finally:
                gate.set()
            await closed_cancelled(handle)
            events = await TemporalStore(client).aload(run_id)
            assert "approval_request" in [e.type for e in events]
            assert "approval_decision" not in [e.type for e in events]
            results = {e.call_id: e for e in events if e.type == "tool_result"}
            assert results["call_w"].result == "The weather in London is sunny and 22C."
            assert results["call_pay"].error == "cancelled"
            assert "did not run" in str(results["call_pay"].result)
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    answers = tool_messages(model.requests[-1])
    assert answers[0] == "The weather in London is sunny and 22C."
    assert "did not run" in answers[1]


async def test_a_turn_in_which_no_call_finished_is_rewound_on_resume(
    client: Client, task_queue: str
) -> None:
    """Nothing ran to its end: as before, resume asks the model again for that turn."""
    started = threading.Event()
    script = [
        CallTool("lookup", {"topic": "umbrellas"}, id="call_l"),
        Reply("I will not look it up after all."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[endless_lookup(started)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart(PROMPT)
            assert await asyncio.to_thread(started.wait, 30)
            handle = await cancel_once_asked(client, run_id)
            await closed_cancelled(handle)
            events = await TemporalStore(client).aload(run_id)
            assert "tool_result" not in [e.type for e in events]
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    assert model.request_count == 2
    assert tool_messages(model.requests[-1]) == []  # the turn was asked again


async def test_a_turn_cancelled_before_its_call_started_goes_on_from_its_answer(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Cancelled while its one call waits for a person, the turn's call never started: resume
    (and a fork) goes on from the answer it recorded and asks for the decision again, not
    asking the model again (it rewound the turn: a second paid request, for the same call)."""

    def pay_then_answer(request: dict[str, Any]) -> Any:
        if tool_messages(request):
            return Reply("Paid.")
        return CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay")

    with ScriptedModelServer(pay_then_answer) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool(ledger)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart(PROMPT)
            handle = client.get_workflow_handle(run_id)
            async with asyncio.timeout(30):
                while "approval_request" not in [
                    e.type for e in await TemporalStore(client).aload(run_id)
                ]:
                    await asyncio.sleep(0.05)
            await handle.cancel()
            await closed_cancelled(handle)
            events = await TemporalStore(client).aload(run_id)
            assert "tool_result" not in [e.type for e in events]
            # a fork of it goes on from that answer too
            forked = await asyncio.wait_for(agent.afork(run_id), 30)
            assert forked.status == "awaiting_approval", forked
            assert model.request_count == 1
            paused = await asyncio.wait_for(agent.aresume(run_id), 30)
            assert paused.status == "awaiting_approval", paused
            await agent.aapprove(run_id, "call_pay", by="alice")
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == "Paid.", resumed
    assert model.request_count == 2  # the answer the cancel left was not asked for again
    assert tool_messages(model.requests[-1]) == ["Sent 5 to bob."]
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]


@pytest.mark.parametrize(
    "final, local", [(False, False), (True, False), (False, True)], ids=["calls", "final", "local"]
)
async def test_a_model_answer_that_comes_after_the_cancel_is_recorded_not_asked_again(
    final: bool, local: bool, client: Client, task_queue: str, tmp_path: Any
) -> None:
    """A run cancelled while its model request is in flight waits for the answer and records
    it (policies.GENERATION_KEPT), running none of its calls; resume goes on from it, so the
    request is not sent a second time."""
    answer: Any = Reply("Sunny.") if final else CallTool("get_weather", {"city": "London"})
    # a local request holds its workflow task: the cancel reaches the run only when the
    # worker renews the task (at 80% of its 10 s timeout), so that request answers later
    script = [Hang(12 if local else 3, answer), Reply("Sunny.")]
    store = FileStore(str(tmp_path / "runs"))
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            store=store,
            embedded_worker=False,
            local_model_calls=local,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart(PROMPT)
            await asyncio.to_thread(model.wait_for_requests, 1)
            handle = client.get_workflow_handle(run_id)
            await handle.cancel()
            await closed_cancelled(handle)
            events = await TemporalStore(client).aload(run_id)
            assert [e.type for e in events][-2:] == ["generation", "run_end"], events
            assert events[-2].usage is not None and events[-2].usage.total_tokens > 0
            assert "answer came after the stop and is recorded" in str(events[-1].error)
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
            # the answer recorded again by the resumed segment: whole in both logs
            projected = await TemporalStore(client).aload(run_id)
    mirrored = store.load(run_id)
    assert [e.to_dict() for e in projected] == [e.to_dict() for e in mirrored]
    again = [e for e in mirrored if e.type == "generation"][1]
    assert again.messages == events[-2].messages and again.calls == events[-2].calls
    assert resumed.status == "completed" and resumed.final_output == "Sunny."
    assert model.request_count == (1 if final else 2)
    if not final:
        assert tool_messages(model.requests[-1]) == ["The weather in London is sunny and 22C."]


async def test_a_model_answer_that_came_with_the_cancel_is_recorded_not_asked_again(
    client: Client, task_queue: str
) -> None:
    """The cancel and the model request's completion reach the run in one workflow task:
    the answer is recorded, not read as stopped (before behaviour level 14 it was lost and
    resume sent the request again)."""
    script = [Hang(2, CallTool("get_weather", {"city": "London"})), Reply("Sunny.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        # the request runs on a worker of its own, so that the run's workflow tasks can
        # wait while the cancel and the request's completion both reach history
        calls = Worker(
            client, task_queue=task_queue, activities=AgentorPlugin([agent]).bundle.all()
        )
        async with calls:
            async with build_worker(
                client, [agent], task_queue=task_queue, no_remote_activities=True
            ):
                run_id = await agent.astart(PROMPT)
                await asyncio.to_thread(model.wait_for_requests, 1)
            handle = client.get_workflow_handle(run_id)
            await handle.cancel()
            await history_shows(client, run_id, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
            async with build_worker(
                client, [agent], task_queue=task_queue, no_remote_activities=True
            ):
                await closed_cancelled(handle)
                events = await TemporalStore(client).aload(run_id)
                assert [e.type for e in events][-2:] == ["generation", "run_end"], events
                resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == "Sunny."
    assert model.request_count == 2


@pytest.mark.slow
async def test_a_run_cancelled_after_its_worker_died_mid_call_closes_and_resumes(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    ledger: str,
    tmp_path: Any,
) -> None:
    """Nobody is left to answer the cancel: the call's heartbeat timeout answers it.

    The run closes as cancelled (it does not wait for ever), the call that may
    or may not have run is not recorded, and `resume` on a new worker runs
    the turn again and completes.
    """
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": temporal_address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "60",
    }
    first = spawn(["run", "--run-id", run_id], env)
    worker: subprocess.Popen[str] | None = None
    resumer: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
        handle = client.get_workflow_handle(run_id)
        await handle.cancel()
        # a worker takes the cancel; the dead worker's call times out on its heartbeat. It
        # runs no calls: one that took the call's retry (its heartbeat timeout passing
        # first, on a loaded machine) would finish it, and its result would rightly stand
        worker = spawn(
            ["worker"],
            {**env, "TOOL_DELAY": "0", "NO_REMOTE_ACTIVITIES": "1"},
            stderr=subprocess.DEVNULL,
        )
        await closed_cancelled(handle)
        events = await TemporalStore(client).aload(run_id)
        assert "tool_result" not in [e.type for e in events]
        resumer = spawn(["resume", "--run-id", run_id], {**env, "TOOL_DELAY": "0"})
        out, _ = resumer.communicate(timeout=90)
    finally:
        stop_process(first)
        stop_process(worker)
        stop_process(resumer)
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"
    assert model.request_count == 3  # the turn asked again, then the answer
