"""A fork of a running parent whose turn has one call finished and one still running.

The parent's history holds the finished call's result; the fork keeps it and
goes on from the parent's answer, answering the call still running there that
the parent runs it. Before, the fork rewound the turn: the model was asked that
turn again and the call that had finished in the parent (a payment made) ran a
second time, under the fork's own idempotency key. A fork with input did so still
(the turn rewound, the new message after its request): it now records the turn's
answers before its marker and the new message follows them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import ledger_lines, scripted_agent, until, weather_tool


def _model(request: dict[str, Any]) -> Any:
    answered = [m for m in request.get("messages") or [] if m.get("role") == "tool"]
    if not answered:
        return [
            CallTool("get_weather", {"city": "Paris"}, id="c_fast"),
            CallTool("get_weather", {"city": "Oslo"}, id="c_slow"),
        ]
    return Reply("Done.")


async def _finished_tools(client: Client, run_id: str) -> list[str]:
    """Activity ids of the run's tool calls completed in its history."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    return [
        scheduled[e.activity_task_completed_event_attributes.scheduled_event_id]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and scheduled[e.activity_task_completed_event_attributes.scheduled_event_id].startswith(
            "tool-"
        )
    ]


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_model_calls"])
async def test_a_fork_of_a_running_turn_keeps_the_finished_call_and_asks_nothing_again(
    local: bool, client: Client, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """Forked once Paris's call finished in the parent and while Oslo's runs there: the fork
    keeps Paris's result, answers Oslo's as cut off, and asks the model only for turn 2."""
    gate = tmp_path / "gate"
    with ScriptedModelServer(_model) as model:
        tool = weather_tool(ledger, delay=120, delay_city="Oslo", gate=str(gate))
        agent = scripted_agent(model, client, task_queue, tools=[tool], local_model_calls=local)
        parent = await agent.astart("Weather in Paris and Oslo?")
        await until(lambda: len(ledger_lines(ledger)) >= 2, "both calls to start", 60)
        deadline = asyncio.get_running_loop().time() + 60
        while await _finished_tools(client, parent) != ["tool-1-0"]:  # Paris's, in history
            assert asyncio.get_running_loop().time() < deadline, "Paris's call to finish"
            await asyncio.sleep(0.1)
        forking = asyncio.create_task(agent.afork(parent))
        # done, or (without the fix) running the turn's calls again
        await until(lambda: forking.done() or len(ledger_lines(ledger)) > 2, "the fork", 60)
        gate.touch()  # the parent's Oslo call ends (and the fork's, run again without the fix)
        fork = await asyncio.wait_for(forking, 60)
        finished = await asyncio.wait_for(agent.aresume(parent), 60)
        requests = model.requests
    assert fork.status == "completed" and fork.final_output == "Done."
    assert finished.status == "completed"
    cities = [line.split()[-1] for line in ledger_lines(ledger)]
    # each call ran once, in the parent
    assert sorted(cities) == ["Oslo", "Paris"], ledger_lines(ledger)
    # the parent's two requests and the fork's one after the parent's answer
    assert len(requests) == 3, [r["messages"][-1] for r in requests]
    results = {e.call_id: e for e in fork.events if e.type == "tool_result"}
    assert results["c_fast"].result == "The weather in Paris is sunny and 22C."
    assert results["c_slow"].error == "cut off"
    assert "forked from" in str(results["c_slow"].result)


async def test_a_fork_with_input_of_a_running_turn_keeps_the_finished_call(
    client: Client, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """Forked with a new message once Paris's call finished in the parent and while Oslo's
    runs there: the fork keeps Paris's result, answers Oslo's as cut off, and its one request
    holds both, then the new message. Before, the fork rewound the turn: the model was asked
    the turn again and Paris's call (a payment made) ran a second time."""
    gate = tmp_path / "gate"
    with ScriptedModelServer(_model) as model:
        tool = weather_tool(ledger, delay=120, delay_city="Oslo", gate=str(gate))
        agent = scripted_agent(model, client, task_queue, tools=[tool])
        parent = await agent.astart("Weather in Paris and Oslo?")
        await until(lambda: len(ledger_lines(ledger)) >= 2, "both calls to start", 60)
        deadline = asyncio.get_running_loop().time() + 60
        while await _finished_tools(client, parent) != ["tool-1-0"]:  # Paris's, in history
            assert asyncio.get_running_loop().time() < deadline, "Paris's call to finish"
            await asyncio.sleep(0.1)
        forking = asyncio.create_task(agent.afork(parent, "And is it windy?"))
        # done, or (without the fix) running the turn's calls again
        await until(lambda: forking.done() or len(ledger_lines(ledger)) > 2, "the fork", 60)
        gate.touch()  # the parent's Oslo call ends (and the fork's, run again without the fix)
        fork = await asyncio.wait_for(forking, 60)
        finished = await asyncio.wait_for(agent.aresume(parent), 60)
        requests = model.requests
    assert fork.status == "completed" and fork.final_output == "Done."
    assert finished.status == "completed"
    cities = [line.split()[-1] for line in ledger_lines(ledger)]
    assert sorted(cities) == ["Oslo", "Paris"], ledger_lines(ledger)  # each ran once
    assert len(requests) == 3, [r["messages"][-1] for r in requests]
    forked = [r["messages"] for r in requests if "windy" in str(r["messages"][-1])]
    assert len(forked) == 1, [r["messages"][-1] for r in requests]
    asked = forked[0]
    assert [m["role"] for m in asked[-4:]] == ["assistant", "tool", "tool", "user"], asked
    assert asked[-1]["content"] == "And is it windy?"
    results = {e.call_id: e for e in fork.events if e.type == "tool_result"}
    assert results["c_fast"].result == "The weather in Paris is sunny and 22C."
    assert results["c_slow"].error == "cut off"
    kinds = [e.type for e in fork.events]
    assert kinds.index("fork") > max(i for i, k in enumerate(kinds) if k == "tool_result")


async def test_a_fork_with_input_of_a_turn_terminated_mid_call_keeps_the_finished_call(
    client: Client, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """The parent terminated once Paris's call finished and while Oslo's ran: the fork with a
    new message keeps Paris's result and answers Oslo's as cut off; neither runs again."""
    gate = tmp_path / "gate"
    with ScriptedModelServer(_model) as model:
        tool = weather_tool(ledger, delay=120, delay_city="Oslo", gate=str(gate))
        agent = scripted_agent(model, client, task_queue, tools=[tool])
        parent = await agent.astart("Weather in Paris and Oslo?")
        await until(lambda: len(ledger_lines(ledger)) >= 2, "both calls to start", 60)
        deadline = asyncio.get_running_loop().time() + 60
        while await _finished_tools(client, parent) != ["tool-1-0"]:  # Paris's, in history
            assert asyncio.get_running_loop().time() < deadline, "Paris's call to finish"
            await asyncio.sleep(0.1)
        await client.get_workflow_handle(parent).terminate("test")
        gate.touch()
        fork = await asyncio.wait_for(agent.afork(parent, "And is it windy?"), 60)
        requests = model.requests
    assert fork.status == "completed" and fork.final_output == "Done."
    cities = [line.split()[-1] for line in ledger_lines(ledger)]
    assert sorted(cities) == ["Oslo", "Paris"], ledger_lines(ledger)  # each ran once
    assert len(requests) == 2, [r["messages"][-1] for r in requests]
    assert requests[-1]["messages"][-1]["content"] == "And is it windy?"
    results = {e.call_id: e for e in fork.events if e.type == "tool_result"}
    assert results["c_fast"].result == "The weather in Paris is sunny and 22C."
    assert results["c_slow"].error == "cut off"
