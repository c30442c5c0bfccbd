"""A run started with a time limit stops itself before it, keeping what its turn's calls did.

A start's `execution_timeout` or `run_timeout` (a plain Temporal client's, or
`run_agent(..., execution_timeout=...)` from a user's workflow) is enforced by
the server wherever the run is. Timed out mid-turn, the run recorded nothing of
the turn: `resume` rewound it and the model asked for its calls again, so a
transfer that had gone through was made twice. From behaviour level 12
(`policies.DEADLINE_SETTLES`) the run stops `DEADLINE_MARGIN` before its limit
and settles the turn as a cancel does, then returns "failed" saying why;
`resume` goes on after the recorded calls. The facade starts runs with no
limit, and such a run issues no command for it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.worker import Worker

from agentor_temporal import AgentorPlugin, FileStore, function_tool
from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflow import run_agent
from agentor_temporal.workflows import TemporalStore, policies

from helpers import (
    cancel_once_asked,
    ledger_lines,
    ledger_write,
    scripted_agent,
    transfer_tool,
    until,
    weather_tool,
)

#: Short enough for a quick test, long enough that the run's first turn starts well
#: inside it and its call hears it is to stop (the margin is half of it: the run stops
#: after 7 s).
LIMIT = timedelta(seconds=14)
PAID = "Sent 5 to bob."
STOPPED_WHILE_RUNNING = "Error: the run reached its time limit while this call ran"


def pay_tool(ledger: str) -> Any:
    @function_tool
    def pay(amount: float, to: str) -> str:
        """Send money (no approval needed).

        Args:
            amount: How much.
            to: To whom.
        """
        ledger_write(ledger, "pay", f"{amount:g} {to}")
        return f"Sent {amount:g} to {to}."

    return pay


def slow_lookup_tool(ledger: str) -> Any:
    @function_tool
    async def slow_lookup(topic: str) -> str:
        """Look a topic up; the first lookup takes far longer than the run's limit.

        Args:
            topic: What to look up.
        """
        first = not any(line.startswith("slow_lookup") for line in ledger_lines(ledger))
        ledger_write(ledger, "slow_lookup", topic)
        if first:
            await asyncio.sleep(60)
        return f"Nothing new on {topic}."

    return slow_lookup


def sync_slow_lookup_tool(ledger: str) -> Any:
    @function_tool
    def slow_lookup(topic: str) -> str:
        """Look a topic up in a blocking library; the first lookup outlasts the run's limit.

        Args:
            topic: What to look up.
        """
        first = not any(line.startswith("slow_lookup") for line in ledger_lines(ledger))
        ledger_write(ledger, "slow_lookup", topic)
        if first:
            time.sleep(30)  # a thread cannot be stopped
        return f"Nothing new on {topic}."

    return slow_lookup


def paying_model(weather_turns: int = 0) -> Any:
    """After `weather_turns` weather lookups, one turn paying bob beside a slow lookup;
    then an answer."""

    def respond(request: dict[str, Any]) -> Any:
        answered = sum(1 for m in request.get("messages") or [] if m.get("role") == "tool")
        if answered < weather_turns:
            return CallTool("get_weather", {"city": "Oslo"}, id=f"c_wx{answered}")
        if answered == weather_turns:
            return [
                CallTool("pay", {"amount": 5, "to": "bob"}, id="c_pay"),
                CallTool("slow_lookup", {"topic": "bob"}, id="c_look"),
            ]
        return Reply("Paid bob.")

    return respond


@workflow.defn(sandboxed=False)
class LimitedAgentWorkflow:
    """A user's workflow giving its agent run a time limit."""

    @workflow.run
    async def run(self, run_id: str) -> dict[str, Any]:
        outcome = await run_agent(
            "Weather Agent", "Pay bob.", run_id=run_id, execution_timeout=LIMIT
        )
        return outcome.to_dict()


async def start_limited(
    client: Client, how: str, agent: Any, task_queue: str, run_id: str
) -> dict[str, Any]:
    """Start the run as `how` says and return its outcome."""
    if how == "run_agent":
        return dict(
            await client.execute_workflow(
                LimitedAgentWorkflow.run,
                run_id,
                id=f"{run_id}-parent",
                task_queue=task_queue,
            )
        )
    limit = {"run_timeout": LIMIT} if how == "run_timeout" else {"execution_timeout": LIMIT}
    handle = await client.start_workflow(
        policies.WORKFLOW_TYPE,
        {"agent": agent.name, "input": "Pay bob."},
        id=run_id,
        task_queue=task_queue,
        result_type=dict,
        **limit,  # type: ignore[arg-type]
    )
    return dict(await asyncio.wait_for(handle.result(), 60))


async def each_execution_stops_at_the_chains_limit(
    client: Client, run_id: str, weather_turns: int
) -> None:
    """Every execution of the continue-as-new chain set its timer for one moment: the
    chain's start plus the limit less the margin, not its own start plus that."""
    segments = await TemporalStore(client).segments(run_id)
    histories = [
        await client.get_workflow_handle(run_id, run_id=s.execution_run_id).fetch_history()
        for s in segments
    ]
    assert len(histories) == weather_turns + 1
    chain_start = histories[0].events[0].event_time.ToDatetime()
    fire_at = []
    for history in histories:
        events = list(history.events)
        [at] = [
            i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        ]
        # the workflow's clock is its task's start, not the (later, under load) moment the
        # task's commands were recorded
        task_started = next(
            e
            for e in reversed(events[:at])
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
        )
        fire_at.append(
            task_started.event_time.ToDatetime()
            + events[at].timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        )
    # the continued executions started a second or more after the chain did
    assert histories[-1].events[0].event_time.ToDatetime() - chain_start > timedelta(seconds=1)
    for at in fire_at:
        assert abs((at - chain_start) - LIMIT / 2) < timedelta(seconds=0.5), (at, chain_start)


@pytest.mark.parametrize(
    "how, weather_turns",
    [
        ("execution_timeout", 0),
        ("run_timeout", 0),
        ("run_agent", 0),
        # every turn continues as new: the chain's limit is carried to each execution
        ("execution_timeout", 2),
    ],
    ids=["execution_timeout", "run_timeout", "run_agent", "continued-as-new"],
)
async def test_a_run_reaching_its_time_limit_mid_turn_keeps_its_calls_and_resume_goes_on(
    how: str,
    weather_turns: int,
    client: Client,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finished payment is recorded and the slow lookup answered as stopped before the
    limit; resume asks the model once more and pays nobody twice."""
    if weather_turns:
        monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "1")  # every turn continues as new
    store = FileStore(str(tmp_path / "runs"))
    run_id = f"limited-{uuid.uuid4().hex[:8]}"
    with ScriptedModelServer(paying_model(weather_turns)) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            store=store,
            tools=[pay_tool(ledger), slow_lookup_tool(ledger), weather_tool()],
            embedded_worker=False,
        )
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[LimitedAgentWorkflow],
            plugins=[AgentorPlugin(agents=[agent], store=store)],
        ):
            outcome = await start_limited(client, how, agent, task_queue, run_id)
            assert outcome["status"] == "failed", outcome
            assert "reached its time limit of 14 s" in outcome["error"], outcome
            handle = client.get_workflow_handle(run_id)
            described = await handle.describe()
            # it stopped itself: the server did not time it out
            assert described.status == WorkflowExecutionStatus.COMPLETED
            if weather_turns:
                await each_execution_stops_at_the_chains_limit(client, run_id, weather_turns)
            events = await TemporalStore(client).aload(run_id)
            results = {e.call_id: e for e in events if e.type == "tool_result"}
            assert results["c_pay"].result == PAID
            assert results["c_look"].error == "cancelled"
            assert str(results["c_look"].result).startswith(STOPPED_WHILE_RUNNING)
            assert events[-1].type == "run_end" and events[-1].error == outcome["error"]
            mirrored = await asyncio.to_thread(store.load, run_id)
            assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in events]
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == "Paid bob."
    paid = [line for line in ledger_lines(ledger) if line.startswith("pay ")]
    assert len(paid) == 1, ledger_lines(ledger)
    # the reply after resume read both answers of the settled turn
    answers = [m["content"] for m in model.requests[-1]["messages"] if m.get("role") == "tool"]
    assert answers[-2] == PAID and answers[-1].startswith(STOPPED_WHILE_RUNNING)


async def test_a_sync_call_still_running_at_the_time_limit_is_answered_before_it(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A sync tool's thread, which cannot be stopped, is waited for only as long as the
    limit leaves, not CANCEL_GRACE: the run settles before the server times it out, so
    the finished payment is recorded and resume does not pay bob again."""
    with ScriptedModelServer(paying_model()) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[pay_tool(ledger), sync_slow_lookup_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"limited-{uuid.uuid4().hex[:8]}"
            outcome = await start_limited(client, "execution_timeout", agent, task_queue, run_id)
            assert outcome["status"] == "failed" and "time limit" in outcome["error"], outcome
            described = await client.get_workflow_handle(run_id).describe()
            assert described.status == WorkflowExecutionStatus.COMPLETED
            events = await TemporalStore(client).aload(run_id)
            results = {e.call_id: e for e in events if e.type == "tool_result"}
            assert results["c_pay"].result == PAID
            assert str(results["c_look"].result).startswith(
                "Error: slow_lookup was still running when its run stopped at its time limit"
            )
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    # the turn's two calls run side by side: each once, in either order
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["pay", "slow_lookup"]


async def test_a_model_request_cut_off_by_the_time_limit_is_named_in_the_error(
    client: Client, task_queue: str
) -> None:
    """A request still unanswered when the run must close (DEADLINE_CLOSE before the limit)
    is lost: the error says resume sends it again, a second paid request."""
    with ScriptedModelServer([Hang(60), Reply("Sunny.")]) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"limited-{uuid.uuid4().hex[:8]}"
            outcome = await start_limited(client, "execution_timeout", agent, task_queue, run_id)
            assert outcome["status"] == "failed", outcome
            assert "time limit" in outcome["error"]
            assert "Turn 1's model request was cut off" in outcome["error"], outcome["error"]
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and model.request_count == 2


async def test_a_model_answer_that_comes_after_the_time_limit_stop_is_recorded_not_asked_again(
    client: Client, task_queue: str
) -> None:
    """A request answered after the run stopped but before its closing time is waited for
    and recorded (policies.GENERATION_KEPT), its call not run; resume runs the call and
    does not send the request again."""
    # asked at ~0.5 s, answered at ~9.5 s: after the stop (7 s), before settle_by (11 s)
    script = [Hang(9, CallTool("get_weather", {"city": "London"})), Reply("Sunny.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"limited-{uuid.uuid4().hex[:8]}"
            outcome = await start_limited(client, "execution_timeout", agent, task_queue, run_id)
            assert outcome["status"] == "failed" and "time limit" in outcome["error"], outcome
            assert "answer came after the stop and is recorded" in outcome["error"], outcome
            assert outcome["usage"]["total_tokens"] > 0, outcome
            described = await client.get_workflow_handle(run_id).describe()
            assert described.status == WorkflowExecutionStatus.COMPLETED
            events = await TemporalStore(client).aload(run_id)
            assert [e.type for e in events][-2:] == ["generation", "run_end"], events
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == "Sunny."
    assert model.request_count == 2
    tools = [m["content"] for m in model.requests[-1]["messages"] if m.get("role") == "tool"]
    assert tools == ["The weather in London is sunny and 22C."]


async def test_a_run_waiting_for_a_person_at_its_time_limit_answers_the_call_not_run(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A call still waiting for approval at the limit is answered as not run, beside the
    finished payment; resume runs neither."""
    script = [
        [
            CallTool("pay", {"amount": 5, "to": "bob"}, id="c_pay"),
            CallTool("transfer", {"amount": 500, "to": "eve"}, id="c_transfer"),
        ],
        Reply("Paid bob; eve's transfer waits."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[pay_tool(ledger), transfer_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"limited-{uuid.uuid4().hex[:8]}"
            outcome = await start_limited(client, "execution_timeout", agent, task_queue, run_id)
            assert outcome["status"] == "failed" and "time limit" in outcome["error"], outcome
            events = await TemporalStore(client).aload(run_id)
            results = {e.call_id: e for e in events if e.type == "tool_result"}
            assert results["c_pay"].result == PAID
            assert results["c_transfer"].error == "cancelled"
            assert str(results["c_transfer"].result) == (
                "Error: the run reached its time limit before this call ran; it did not run."
            )
            resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["pay"]


async def test_a_run_with_a_time_limit_cancelled_mid_turn_still_closes_as_cancelled(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A cancel before the limit settles the turn and closes the run as cancelled, as it
    does for a run with no limit."""
    with ScriptedModelServer(paying_model()) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[pay_tool(ledger), slow_lookup_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"limited-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "input": "Pay bob."},
                id=run_id,
                task_queue=task_queue,
                execution_timeout=timedelta(minutes=5),
            )
            await until(lambda: len(ledger_lines(ledger)) == 2, "both calls started")
            await cancel_once_asked(client, run_id)
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 30)
            assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
            events = await TemporalStore(client).aload(run_id)
            results = {e.call_id: e for e in events if e.type == "tool_result"}
            assert results["c_pay"].result == PAID
            assert str(results["c_look"].result).startswith(
                "Error: the run was cancelled while this call ran"
            )
            assert events[-1].error is not None and "cancelled" in events[-1].error


async def test_a_run_started_without_a_limit_sets_no_timer(
    client: Client, task_queue: str, model: ScriptedModelServer
) -> None:
    """The facade starts runs with no time limit: their histories are as before."""
    agent = scripted_agent(model, client, task_queue, embedded_worker=False)
    async with build_worker(client, [agent], task_queue=task_queue):
        result = await agent.arun("What is the weather in London?")
    assert result.status == "completed"
    history = await client.get_workflow_handle(str(result.run_id)).fetch_history()
    kinds = {e.event_type for e in history.events}
    assert EventType.EVENT_TYPE_TIMER_STARTED not in kinds
    started = history.events[0].workflow_execution_started_event_attributes
    assert not started.HasField("workflow_execution_timeout")
