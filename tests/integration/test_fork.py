"""Forking a run: Agentor 0.1.1's `fork` semantics, one test each, plus `at=N` and ForkedFrom.

Each test runs real workflows on the session's dev server, the real `openai`
client against a scripted model, and mirrors into a real `FileStore`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.worker import Worker

from agentor_temporal import Agentor, Event, FileStore, RunResult, TemporalStore, function_tool
from agentor_temporal.activities import AgentActivities, AgentRegistry
from agentor_temporal.connection import temporal_binary
from agentor_temporal.store import replay_messages, total_usage
from agentor_temporal.testing import (
    CallTool,
    Fail,
    Hang,
    Reply,
    ScriptedModelServer,
    tool_then_answer,
)
from agentor_temporal.workflows import AgentRunWorkflow
from agentor_temporal.workflows.segment import FORKED_FROM
from agentor_temporal.workflows.status import AGENT_STATUS, AGENT_TOKENS

from helpers import (
    ANSWER,
    PROMPT,
    SEED_EVENT_TYPES,
    ledger_lines,
    ledger_write,
    scripted_agent,
    transfer_tool,
    until,
    wait_until,
    weather_agent,
    weather_tool,
)

#: What the model hears after a continuation message in the tests below.
PARIS = "Now do the same for Paris."
PARIS_ANSWER = "Answer based on tool: The weather in Paris is sunny and 22C."


def _agent(
    model: ScriptedModelServer, client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> Agentor:
    return scripted_agent(
        model, client, task_queue, store=FileStore(tmp_path / "runs"), ledger=ledger
    )


def _dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


async def _same_everywhere(client: Client, tmp_path: Path, result: RunResult) -> None:
    """The result's events are the fork's mirror and its Temporal projection, event for event."""
    assert result.run_id is not None
    mirrored = FileStore(tmp_path / "runs").load(result.run_id)
    projected = await TemporalStore(client).aload(result.run_id)
    assert _dicts(result.events) == _dicts(mirrored) == _dicts(projected)


async def test_fork_keeps_the_whole_trace_then_the_marker_and_continues_with_input(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A fork holds the parent's every event under its own id, then `fork`, then its own life."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    parent_mirror = FileStore(tmp_path / "runs").load(parent.run_id)

    fork = await agent.afork(parent.run_id, PARIS)

    assert fork.run_id not in (None, parent.run_id)
    assert fork.status == "completed" and fork.final_output == PARIS_ANSWER
    types = [e.type for e in fork.events]
    assert types == [*SEED_EVENT_TYPES, "fork", *SEED_EVENT_TYPES]
    assert _dicts(fork.events[:7]) == _dicts(parent.events)
    marker = fork.events[7]
    assert marker.forked_from == parent.run_id
    assert marker.started_at is not None and marker.started_at == marker.ended_at
    # the continuation is the parent's whole conversation plus the new message
    request = model.requests[2]["messages"]
    assert request == [*parent.messages, {"role": "user", "content": PARIS}]
    assert fork.usage == total_usage(fork.events) and fork.usage.total_tokens == 60
    assert fork.messages == replay_messages(fork.events)
    await _same_everywhere(client, tmp_path, fork)
    # streamable like any run, positions counting the parent's events
    streamed = [e async for e in agent.stream(str(fork.run_id))]
    assert _dicts(streamed) == _dicts(fork.events)
    assert _dicts([e async for e in agent.stream(str(fork.run_id), after=7)]) == _dicts(
        fork.events[7:]
    )
    # the parent is untouched: its log, its mirror, its one execution
    assert FileStore(tmp_path / "runs").load(parent.run_id) == parent_mirror
    assert _dicts(await TemporalStore(client).aload(parent.run_id)) == _dicts(parent.events)
    assert len(await TemporalStore(client).segments(parent.run_id)) == 1


async def test_a_fork_of_a_parent_still_running_a_call_says_it_may_run_again(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Forked while its call runs, the parent has no result for it to copy: the fork asks
    the model again and may run the call a second time (its own idempotency key), and
    the user is told so, naming the call."""
    caplog.set_level(logging.WARNING)
    agent = weather_agent(
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=client,
        store=FileStore(tmp_path / "runs"),
        tools=[weather_tool(ledger, delay=8, delay_city="London")],
    )
    run_id = await agent.astart(PROMPT)
    await until(lambda: ledger_lines(ledger), "the parent's call to start")
    fork = await agent.afork(run_id)
    parent = await agent.aresume(run_id)
    assert fork.status == parent.status == "completed"
    call = next(e for e in parent.events if e.type == "tool_call")
    [warning] = [r.getMessage() for r in caplog.records if "is still running" in r.getMessage()]
    assert f"get_weather({call.call_id})" in warning and "second time" in warning
    # as it said: the call ran in both, each under its run's key
    assert [line.split()[1] for line in ledger_lines(ledger)] == [
        f"{parent.run_id}:{call.call_id}",
        f"{fork.run_id}:{next(e for e in fork.events[4:] if e.type == 'tool_call').call_id}",
    ]


async def test_fork_takes_a_message_list_too(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`input` may be chat messages: they are appended to the parent's conversation."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    extra = [{"role": "user", "content": PARIS}]

    fork = await agent.afork(parent.run_id, extra)

    assert fork.status == "completed" and fork.final_output == PARIS_ANSWER
    assert model.requests[2]["messages"] == [*parent.messages, *extra]


async def test_fork_of_a_finished_run_without_input_is_a_snapshot(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A finished parent forked without input is copied and returned: no model request."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    requests = model.request_count

    fork = await agent.afork(parent.run_id, fork_id=f"snapshot-{task_queue}")

    assert fork.run_id == f"snapshot-{task_queue}"
    assert model.request_count == requests and len(ledger_lines(ledger)) == 1
    assert fork.status == "completed" and fork.final_output == ANSWER and fork.error is None
    assert [e.type for e in fork.events] == [*SEED_EVENT_TYPES, "fork"]
    assert fork.usage == parent.usage and fork.messages == parent.messages
    await _same_everywhere(client, tmp_path, fork)
    # a run like any other: its own closed workflow, and resume returns it as it is
    description = await client.get_workflow_handle(fork.run_id).describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    # found as a finished run that cost what its parent did (AgentTokens = usage)
    attributes = description.typed_search_attributes
    assert attributes.get(AGENT_STATUS) == "completed"
    assert attributes.get(AGENT_TOKENS) == fork.usage.total_tokens == 30
    assert attributes.get(FORKED_FROM) == parent.run_id
    assert await client.get_workflow_handle(fork.run_id).result() == {
        "run_id": fork.run_id,
        "status": "completed",
        "final_output": ANSWER,
        "usage": {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30},
        "error": None,
    }
    again = await agent.aresume(fork.run_id)
    assert _dicts(again.events) == _dicts(fork.events) and model.request_count == requests


async def test_fork_without_input_completes_an_unfinished_parent_on_the_fork(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A failed parent forked without input finishes on the fork; the parent stays failed."""
    script = [CallTool("get_weather", {"city": "London"}), Fail(400, "bad request")]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, tmp_path, ledger)
        parent = await agent.arun(PROMPT)
        assert parent.status == "failed" and parent.run_id is not None

        fork = await agent.afork(parent.run_id)

    assert fork.status == "completed" and fork.final_output == ANSWER
    assert len(ledger_lines(ledger)) == 1, "the parent's tool call ran again"
    assert model.requests[2]["messages"][-1]["role"] == "tool"
    assert [e.type for e in fork.events] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "run_end",
        "fork",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    assert fork.usage == total_usage(fork.events)
    await _same_everywhere(client, tmp_path, fork)
    latest = await TemporalStore(client).latest(parent.run_id)
    assert latest is not None and (latest.result or {}).get("status") == "failed"
    assert _dicts(await TemporalStore(client).aload(parent.run_id)) == _dicts(parent.events)


@pytest.mark.parametrize("final", [False, True], ids=["calls", "final"])
async def test_a_fork_of_a_run_stopped_with_its_answer_kept_does_not_ask_again(
    final: bool, client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A parent cancelled while its model request was in flight kept the answer
    (policies.GENERATION_KEPT): a fork without input goes on from it, as resume does, so the
    request is not sent again and its calls run once."""
    answer: Any = Reply(ANSWER) if final else CallTool("get_weather", {"city": "London"})
    with ScriptedModelServer([Hang(2, answer), Reply(ANSWER)]) as model:
        agent = _agent(model, client, task_queue, tmp_path, ledger)
        run_id = await agent.astart(PROMPT)
        await asyncio.to_thread(model.wait_for_requests, 1)
        handle = client.get_workflow_handle(run_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
        kept = await TemporalStore(client).aload(run_id)
        assert [e.type for e in kept][-2:] == ["generation", "run_end"], kept

        fork = await asyncio.wait_for(agent.afork(run_id), 30)

    assert fork.status == "completed" and fork.final_output == ANSWER
    assert model.request_count == (1 if final else 2), "the kept answer was asked for again"
    assert len(ledger_lines(ledger)) == (0 if final else 1)
    again = [e for e in fork.events[len(kept) :] if e.type == "generation"][0]
    assert again.calls == kept[-2].calls and again.text == kept[-2].text
    assert fork.usage == total_usage(fork.events)
    await _same_everywhere(client, tmp_path, fork)


@pytest.mark.parametrize("how", ["fork", "resume_terminated"])
async def test_a_fork_of_a_run_waiting_for_a_person_goes_on_from_its_answer(
    how: str, client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A parent paused for approval has its answer recorded, and the call beside the one
    waiting ran (history holds its result): a fork without input goes on from that answer,
    keeping that result and asking its own approval for the waiting call; so does resume
    once the paused run was terminated. Both asked the model again instead (a paid request
    the parent had answered), and the finished call could run a second time."""
    script = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
            CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
        ],
        Reply("Paid and checked."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[weather_tool(ledger), transfer_tool(ledger)],
            store=FileStore(tmp_path / "runs"),
        )
        paused = await asyncio.wait_for(agent.arun("Pay bob 5000 and tell me the weather."), 60)
        assert paused.status == "awaiting_approval" and paused.run_id is not None
        handle = client.get_workflow_handle(paused.run_id)

        # the weather call ran to its end in the parent: its result is in history only
        await until(lambda: ledger_lines(ledger), "the parent's weather call")
        for _ in range(600):
            if not (await handle.describe()).raw_description.pending_activities:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the parent's weather call did not finish")

        if how == "fork":
            fork = await asyncio.wait_for(agent.afork(paused.run_id), 30)
        else:
            await handle.terminate("an operator's forced stop")
            fork = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
        assert fork.run_id is not None
        assert fork.status == "awaiting_approval", fork.final_output
        assert [p.call_id for p in fork.pending_approvals] == ["call_pay"]
        assert model.request_count == 1, "the parent's answer was asked for again"

        await asyncio.wait_for(agent.aapprove(fork.run_id, "call_pay"), 30)
        done = await asyncio.wait_for(agent.aresume(fork.run_id), 30)
        if how == "fork":
            await handle.terminate("test over")

    assert done.status == "completed" and done.final_output == "Paid and checked."
    assert model.request_count == 2
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "transfer"]
    starts = [i for i, e in enumerate(done.events) if e.type == "run_start"]
    own = done.events[starts[-1] :]
    results = {e.call_id: e.result for e in own if e.type == "tool_result"}
    assert results == {
        "call_pay": "Sent 5000 to bob.",
        "call_wx": "The weather in Oslo is sunny and 22C.",
    }
    assert done.usage == total_usage(done.events)
    await _same_everywhere(client, tmp_path, done)


@pytest.mark.parametrize("asks", ["always", "predicate"])
async def test_a_fork_by_a_build_whose_tool_no_longer_takes_the_waiting_call_is_refused(
    asks: str, client: Client, task_queue: str, ledger: str
) -> None:
    """A fork of a run waiting for a person goes on from its answer; with a build whose tool
    renamed a parameter, the call waiting no longer validates. The fork asked a person to
    approve it anyway, and only then told the model the call was invalid: it is refused at
    once, naming the call and what the tool now takes, with the fork that asks the model
    again (`at=`, before that answer)."""
    script = [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
        CallTool("transfer", {"amount": 5000, "recipient": "bob"}, id="call_pay2"),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[transfer_tool(ledger)])
        paused = await asyncio.wait_for(agent.arun("Pay bob 5000."), 60)
        assert paused.status == "awaiting_approval" and paused.run_id is not None

        def over(amount: float, recipient: str) -> bool:
            return amount > 100  # a predicate the old arguments do not fit asks a person

        @function_tool(requires_approval=True if asks == "always" else over)
        def transfer(amount: float, recipient: str) -> str:
            """Send money."""
            return f"Sent {amount:g} to {recipient}."

        renamed = scripted_agent(model, client, task_queue, tools=[transfer])
        at = max(i for i, e in enumerate(paused.events) if e.type == "generation")
        try:
            with pytest.raises(ValueError) as info:
                await asyncio.wait_for(renamed.afork(paused.run_id, fork_id="f-" + task_queue), 30)
            said = str(info.value)
            assert "call_pay" in said and "recipient" in said, said
            assert f"at={at}" in said, said
            assert await TemporalStore(client).segments("f-" + task_queue) == []  # nothing made
            assert model.request_count == 1

            # forked from before that answer, the model is asked again with this build's tools
            fork = await asyncio.wait_for(renamed.afork(paused.run_id, at=at), 30)
            assert fork.status == "awaiting_approval", fork.error
            assert [p.call_id for p in fork.pending_approvals] == ["call_pay2"]
            assert fork.run_id is not None
            await client.get_workflow_handle(fork.run_id).terminate("test over")
        finally:
            await client.get_workflow_handle(paused.run_id).terminate("test over")
    assert ledger_lines(ledger) == []


@pytest.mark.parametrize("how", ["fork", "resume_terminated"])
async def test_a_fork_of_a_waiting_run_keeps_its_calls_answered_without_running(
    how: str, client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Beside the call waiting for a person, the parent's turn has a call that ran and two
    the workflow answered without running (an unknown tool, arguments that are not JSON):
    a fork (or the resume of the terminated parent) goes on from the parent's answer, as
    without those two. It asked the model again instead (a paid request the parent had
    answered), and the weather call could run a second time."""
    script = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
            CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
            CallTool("teleport", {"to": "Mars"}, id="call_mars"),
            CallTool("get_weather", "{not json", id="call_typo"),
        ],
        Reply("Paid and checked."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[weather_tool(ledger), transfer_tool(ledger)],
            store=FileStore(tmp_path / "runs"),
        )
        paused = await asyncio.wait_for(agent.arun("Pay bob and tell me the weather."), 60)
        assert paused.status == "awaiting_approval" and paused.run_id is not None
        handle = client.get_workflow_handle(paused.run_id)

        await until(lambda: ledger_lines(ledger), "the parent's weather call")
        for _ in range(600):
            if not (await handle.describe()).raw_description.pending_activities:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the parent's weather call did not finish")

        if how == "fork":
            fork = await asyncio.wait_for(agent.afork(paused.run_id), 30)
        else:
            await handle.terminate("an operator's forced stop")
            fork = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
        assert fork.run_id is not None
        assert fork.status == "awaiting_approval", fork.final_output
        assert [p.call_id for p in fork.pending_approvals] == ["call_pay"]
        assert model.request_count == 1, "the parent's answer was asked for again"

        await asyncio.wait_for(agent.aapprove(fork.run_id, "call_pay"), 30)
        done = await asyncio.wait_for(agent.aresume(fork.run_id), 30)
        if how == "fork":
            await handle.terminate("test over")

    assert done.status == "completed" and done.final_output == "Paid and checked."
    assert model.request_count == 2
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "transfer"]
    starts = [i for i, e in enumerate(done.events) if e.type == "run_start"]
    errors = {e.call_id: e.error for e in done.events[starts[-1] :] if e.type == "tool_result"}
    assert errors["call_pay"] is None and errors["call_wx"] is None
    assert errors["call_mars"] == "unknown tool"
    assert (errors["call_typo"] or "").startswith("Invalid JSON arguments")
    assert done.usage == total_usage(done.events)
    await _same_everywhere(client, tmp_path, done)


async def test_a_fork_of_a_waiting_run_keeps_the_denial_it_recorded(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A person denied one call of the parent's turn, and the parent recorded that decision
    (it asked about a later call of the turn, whose check was slow): a fork goes on from the
    parent's answer, the denied call answered as denied, and asks only the waiting call's
    approval. It asked the model again instead (a paid request the parent had answered)."""
    checks: list[str] = []

    def slow_check(amount: float, to: str) -> bool:
        # the parent's check, a local activity, outlasts its workflow task's
        # heartbeat (8 s): the decision sent meanwhile is taken in the next
        # task, and the approval request its answer makes records them both
        checks.append(to)
        if len(checks) == 1:
            time.sleep(9)
        return True

    @function_tool(requires_approval=slow_check)
    def wire(amount: float, to: str) -> str:
        """Wire money.

        Args:
            amount: How much.
            to: To whom.
        """
        ledger_write(ledger, "wire", f"{amount} {to}")
        return f"Wired {amount:g} to {to}."

    script = [
        [
            CallTool("transfer", {"amount": 9, "to": "eve"}, id="call_eve"),
            CallTool("wire", {"amount": 5000, "to": "bob"}, id="call_pay"),
        ],
        Reply("Wired, not sent."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[transfer_tool(ledger), wire],
            store=FileStore(tmp_path / "runs"),
        )
        run_id = await agent.astart("Pay eve and wire bob.")

        async def approvals() -> list[str]:
            logged = await TemporalStore(client).aload(run_id)
            return [e.type for e in logged if e.type.startswith("approval_")]

        for _ in range(600):
            if await approvals() == ["approval_request"]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the parent did not ask about call_eve")
        await asyncio.wait_for(agent.adeny(run_id, "call_eve", "not eve", by="ann"), 30)

        expected = ["approval_request", "approval_decision", "approval_request"]
        for _ in range(600):
            if await approvals() == expected:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the parent did not record its denial and second request")
        fork = await asyncio.wait_for(agent.afork(run_id), 30)
        assert fork.run_id is not None
        assert fork.status == "awaiting_approval", fork.final_output
        assert [p.call_id for p in fork.pending_approvals] == ["call_pay"]
        assert model.request_count == 1, "the parent's answer was asked for again"

        await asyncio.wait_for(agent.aapprove(fork.run_id, "call_pay"), 30)
        done = await asyncio.wait_for(agent.aresume(fork.run_id), 30)
        await client.get_workflow_handle(run_id).terminate("test over")

    assert done.status == "completed" and done.final_output == "Wired, not sent."
    assert model.request_count == 2
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["wire"]
    told = {m.get("tool_call_id"): m["content"] for m in model.requests[1]["messages"]}
    assert told["call_eve"].startswith("Error: a person denied this call (ann): not eve.")
    assert told["call_pay"] == "Wired 5000 to bob."
    await _same_everywhere(client, tmp_path, done)


async def test_a_parent_resumed_after_its_fork_leaves_the_fork_as_it_was(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Independent both ways: the parent's later life changes nothing the fork reads."""
    script = [
        CallTool("get_weather", {"city": "London"}),
        Fail(400, "bad request"),
        Reply("The fork's answer."),
        Reply("The parent's answer."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, tmp_path, ledger)
        parent = await agent.arun(PROMPT)
        assert parent.status == "failed" and parent.run_id is not None
        fork = await agent.afork(parent.run_id)
        assert fork.final_output == "The fork's answer." and fork.run_id is not None

        resumed = await agent.aresume(parent.run_id)

    assert resumed.final_output == "The parent's answer."
    assert len(await TemporalStore(client).segments(parent.run_id)) == 2
    assert _dicts(await TemporalStore(client).aload(fork.run_id)) == _dicts(fork.events)
    assert _dicts(FileStore(tmp_path / "runs").load(fork.run_id)) == _dicts(fork.events)
    assert _dicts((await agent.aresume(fork.run_id)).events) == _dicts(fork.events)
    assert not any(e.type == "fork" for e in resumed.events)


async def test_fork_with_input_continues_even_a_completed_parent_and_forks_chain(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A fork of a fork holds both ancestries' events and both markers, in order."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    child = await agent.afork(parent.run_id, PARIS)
    assert child.run_id is not None

    grandchild = await agent.afork(child.run_id, "And in Rome?")

    assert grandchild.final_output == "Answer based on tool: The weather in Rome is sunny and 22C."
    markers = [(i, e.forked_from) for i, e in enumerate(grandchild.events) if e.type == "fork"]
    assert markers == [(7, parent.run_id), (15, child.run_id)]
    assert _dicts(grandchild.events[:15]) == _dicts(child.events)
    await _same_everywhere(client, tmp_path, grandchild)


async def test_an_empty_input_list_is_refused_and_nothing_is_made(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`input=[]` is a ValueError (Agentor's words); no fork run exists afterwards."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    fork_id = f"empty-{task_queue}"

    with pytest.raises(ValueError, match=r"input is an empty list; pass None to fork without"):
        await agent.afork(parent.run_id, [], fork_id=fork_id)

    assert await TemporalStore(client).segments(fork_id) == []
    assert FileStore(tmp_path / "runs").load(fork_id) == []


async def test_an_oversize_input_is_refused_before_the_fork_starts(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """3 MB of new input: a ValueError naming the limit, not Temporal's raw refusal; no fork."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    fork_id = f"huge-{task_queue}"
    requests = model.request_count

    with pytest.raises(ValueError, match=r"fork's input would be 3\.\d+ MB .* over the 1\.5 MB"):
        await agent.afork(parent.run_id, "x" * 3_000_000, fork_id=fork_id)

    assert await TemporalStore(client).segments(fork_id) == []
    assert FileStore(tmp_path / "runs").load(fork_id) == []
    assert model.request_count == requests


async def test_a_fork_id_in_use_is_refused_and_nothing_is_overwritten(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A fork id that names a run (in Temporal, or only in the store) is a ValueError."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    other = await agent.arun("What is the weather in Oslo?")
    assert parent.run_id is not None and other.run_id is not None
    other_events = _dicts(await TemporalStore(client).aload(other.run_id))
    requests = model.request_count

    with pytest.raises(ValueError, match=r"already exists; choose an unused id"):
        await agent.afork(parent.run_id, PARIS, fork_id=other.run_id)
    first = await agent.afork(parent.run_id, fork_id=f"once-{task_queue}")
    with pytest.raises(ValueError, match=r"already exists"):
        await agent.afork(parent.run_id, PARIS, fork_id=f"once-{task_queue}")
    store_only = tmp_path / "runs" / f"stored-{task_queue}.jsonl"
    store_only.write_text(Event(type="run_start", agent="x").to_json() + "\n")
    with pytest.raises(ValueError, match=r"already exists"):
        await agent.afork(parent.run_id, PARIS, fork_id=f"stored-{task_queue}")

    assert model.request_count == requests
    assert _dicts(await TemporalStore(client).aload(other.run_id)) == other_events
    assert _dicts(FileStore(tmp_path / "runs").load(first.run_id or "")) == _dicts(first.events)
    assert len(store_only.read_text().splitlines()) == 1


async def test_an_unknown_parent_is_a_key_error(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Forking a run neither Temporal nor the store knows raises KeyError naming it."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    with pytest.raises(KeyError, match=f"no-such-run-{task_queue}"):
        await agent.afork(f"no-such-run-{task_queue}", PARIS)
    assert model.request_count == 0


async def test_a_failing_continuation_leaves_the_fork_persisted_and_names_it(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """The failed fork's error names its id; `resume(fork_id)` then finishes it."""
    script = [
        CallTool("get_weather", {"city": "London"}),
        Reply(ANSWER),
        Fail(400, "the model refuses"),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, tmp_path, ledger)
        parent = await agent.arun(PROMPT)
        assert parent.run_id is not None

        failed = await agent.afork(parent.run_id, PARIS, fork_id=f"failing-{task_queue}")

        assert failed.status == "failed" and failed.run_id == f"failing-{task_queue}"
        assert failed.error is not None and "the model refuses" in failed.error
        assert failed.error.endswith(
            f"Forked run persisted as 'failing-{task_queue}'; resume it to retry."
        )
        # the log's run_end says what failed, as Agentor's does, without the note
        assert "persisted" not in str(failed.events[-1].error)
        await _same_everywhere(client, tmp_path, failed)

        resumed = await agent.aresume(f"failing-{task_queue}")

    assert resumed.status == "completed" and resumed.final_output == PARIS_ANSWER
    assert [e.type for e in resumed.events][7:11] == ["fork", "run_start", "run_end", "run_start"]
    assert resumed.events[7].forked_from == parent.run_id
    assert resumed.usage == total_usage(resumed.events)


async def test_a_fork_no_worker_began_resumes_with_its_message_and_marker(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A fork that failed before it recorded anything begins again as that fork on resume."""
    from agentor_temporal.worker import build_worker

    with ScriptedModelServer() as model:
        parent = await _agent(model, client, task_queue, tmp_path, ledger).arun(PROMPT)
        assert parent.run_id is not None
        # the fork's queue is served by a worker that does not run its agent yet
        queue = task_queue + "-fleet"
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=queue,
            temporal=client,
            store=FileStore(tmp_path / "runs"),
            ledger=ledger,
        )
        other = weather_agent(
            base_url=model.base_url, task_queue=queue, temporal=client, name="Other"
        )
        fork_id = f"unserved-{task_queue}"
        async with build_worker(client, [other], task_queue=queue):
            failed = await weather_agent(
                base_url=model.base_url, task_queue=queue, temporal=client, embedded_worker=False
            ).afork(parent.run_id, PARIS, fork_id=fork_id)
        assert failed.status == "failed" and "Unknown agent 'Weather Agent'" in str(failed.error)
        requests = model.request_count

        resumed = await agent.aresume(fork_id)

    assert resumed.status == "completed" and resumed.final_output == PARIS_ANSWER
    types = [e.type for e in resumed.events]
    assert types == SEED_EVENT_TYPES + ["fork"] + SEED_EVENT_TYPES
    assert resumed.events[7].forked_from == parent.run_id
    # the model heard the fork's message after the parent's conversation
    assert model.requests[requests]["messages"][-1] == {"role": "user", "content": PARIS}
    await _same_everywhere(client, tmp_path, resumed)


async def test_fork_at_a_tool_boundary_keeps_the_answered_calls(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`at=4` (just after the tool's result) asks the model once more and runs no tool."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None

    fork = await agent.afork(parent.run_id, at=4)

    assert fork.status == "completed" and fork.final_output == ANSWER
    assert len(ledger_lines(ledger)) == 1
    assert model.requests[-1]["messages"] == parent.events[4].messages
    assert _dicts(fork.events[:4]) == _dicts(parent.events[:4])
    assert [e.type for e in fork.events[4:]] == [
        "fork",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    assert fork.usage.total_tokens == 30  # the parent's first generation, then one more
    await _same_everywhere(client, tmp_path, fork)


async def test_fork_inside_a_tool_batch_rewinds_it(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`at=N` between two results of one batch keeps N events and lets the model decide again."""
    script = [
        [CallTool("get_weather", {"city": "London"}), CallTool("get_weather", {"city": "Paris"})],
        Reply("Both sunny."),
        Reply("Decided again: sunny."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, tmp_path, ledger)
        parent = await agent.arun(PROMPT)
        assert parent.run_id is not None
        assert [e.type for e in parent.events][:6] == [
            "run_start",
            "generation",
            "tool_call",
            "tool_call",
            "tool_result",
            "tool_result",
        ]

        fork = await agent.afork(parent.run_id, at=5)

    assert fork.final_output == "Decided again: sunny."
    assert _dicts(fork.events[:5]) == _dicts(parent.events[:5])
    assert fork.events[5].type == "fork"
    # rewound: the request that produced the batch, asked again
    assert model.requests[-1]["messages"] == parent.events[1].messages
    assert len(ledger_lines(ledger)) == 2
    await _same_everywhere(client, tmp_path, fork)


async def test_a_tool_result_history_holds_but_no_step_recorded_is_kept(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """The tool answered, then no workflow task ran: the fork copies the answer, runs no tool;
    so does resume once the parent is terminated.

    The parent's workflow worker stops while its tool runs on another worker;
    the tool's completion reaches history, but no workflow task records its
    `tool_result` (nor sends it on with the next request). The fork finds it
    among the completed activities, and so does the parent's resume.
    """
    started, release = threading.Event(), threading.Event()

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        started.set()
        release.wait(30)
        return f"The weather in {city} is sunny and 22C."

    run_id = f"stopped-{task_queue}"
    with ScriptedModelServer(tool_then_answer) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            store=FileStore(tmp_path / "runs"),
            tools=[get_weather],
            embedded_worker=False,
        )
        acts = AgentActivities(AgentRegistry([agent.definition]))
        flow = Worker(
            client,
            task_queue=task_queue,
            workflows=[AgentRunWorkflow],
            activities=[acts.describe_agent, acts.journal],
            no_remote_activities=True,
        )
        # its own connection: one client may not have two workers on a queue. Every
        # remote activity runs here: with the model's request on the other worker, a
        # task sent to the one without it failed and was tried again later (1 in 2:
        # once, past the test's minute)
        other = await Client.connect(client.service_client.config.target_host)
        remote = [acts.generate, acts.call_tool, acts.journal]
        async with Worker(other, task_queue=task_queue, activities=remote):
            async with flow:
                handle = await client.start_workflow(
                    "AgentRun",
                    {"agent": agent.name, "input": PROMPT},
                    id=run_id,
                    task_queue=task_queue,
                )
                await until(started.is_set, "the tool to start")
            release.set()

            async def answered() -> bool:
                history = await handle.fetch_history()
                return any(
                    e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                    and e.activity_task_completed_event_attributes.scheduled_event_id
                    in {
                        s.event_id
                        for s in history.events
                        if s.activity_task_scheduled_event_attributes.activity_id == "tool-1-0"
                    }
                    for e in history.events
                )

            deadline = asyncio.get_running_loop().time() + 30
            while not await answered():
                assert asyncio.get_running_loop().time() < deadline, "the tool's answer"
                await asyncio.sleep(0.05)
        journaled = await TemporalStore(client).aload(run_id)
        assert [e.type for e in journaled] == ["run_start", "generation", "tool_call"]

        forker = weather_agent(
            base_url=model.base_url,
            task_queue=f"{task_queue}-forks",
            temporal=client,
            store=FileStore(tmp_path / "runs"),
            tools=[get_weather],
        )
        fork = await forker.afork(run_id)

    assert fork.status == "completed" and fork.final_output == ANSWER
    assert len(ledger_lines(ledger)) == 1, "the answered call ran again"
    assert model.request_count == 2
    assert [e.type for e in fork.events] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "fork",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    assert fork.events[3].result == "The weather in London is sunny and 22C."
    await _same_everywhere(client, tmp_path, fork)

    # the parent, stopped for good with the answer unrecorded, resumes from it too
    await handle.terminate("stuck")
    with ScriptedModelServer(tool_then_answer) as model:
        resumer = weather_agent(
            base_url=model.base_url,
            task_queue=f"{task_queue}-resumes",
            temporal=client,
            store=FileStore(tmp_path / "runs"),
            tools=[get_weather],
        )
        resumed = await asyncio.wait_for(resumer.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == ANSWER
    assert len(ledger_lines(ledger)) == 1, "the answered call ran again on resume"
    assert model.request_count == 1
    assert model.requests[0]["messages"][-1]["role"] == "tool"
    assert [e.type for e in resumed.events] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    assert resumed.events[3].to_dict() == fork.events[3].to_dict()
    assert resumed.usage == total_usage(resumed.events)
    await _same_everywhere(client, tmp_path, resumed)


async def test_a_model_answer_history_holds_but_no_step_recorded_is_not_asked_again(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """The model answered, then no workflow task ran and the run was terminated: a fork and
    resume go on from that answer (its tokens counted once), not sending the request again."""
    run_id = f"unrecorded-{task_queue}"
    script = [Hang(1, CallTool("get_weather", {"city": "London"})), Reply(ANSWER), Reply(ANSWER)]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, ledger=ledger, embedded_worker=False)
        acts = AgentActivities(AgentRegistry([agent.definition]))
        # the request runs apart, so its answer comes after the workflow worker is gone
        flow = Worker(
            client,
            task_queue=task_queue,
            workflows=[AgentRunWorkflow],
            activities=[acts.describe_agent, acts.journal],
            no_remote_activities=True,
        )
        other = await Client.connect(client.service_client.config.target_host)
        async with Worker(other, task_queue=task_queue, activities=[acts.generate, acts.journal]):
            async with flow:
                handle = await client.start_workflow(
                    "AgentRun",
                    {"agent": agent.name, "input": PROMPT},
                    id=run_id,
                    task_queue=task_queue,
                )
                await asyncio.to_thread(model.wait_for_requests, 1)

            async def answered() -> bool:
                events = (await handle.fetch_history()).events
                asked = {
                    e.event_id
                    for e in events
                    if e.activity_task_scheduled_event_attributes.activity_type.name == "generate"
                }
                return any(
                    e.activity_task_completed_event_attributes.scheduled_event_id in asked
                    for e in events
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                )

            deadline = asyncio.get_running_loop().time() + 30
            while not await answered():
                assert asyncio.get_running_loop().time() < deadline, "the model's answer"
                await asyncio.sleep(0.05)
        await handle.terminate("stuck")
        assert "generation" not in [e.type for e in await TemporalStore(client).aload(run_id)]

        resumer = scripted_agent(
            model,
            client,
            f"{task_queue}-resumes",
            store=FileStore(tmp_path / "runs"),
            ledger=ledger,
        )
        fork = await asyncio.wait_for(resumer.afork(run_id), 30)
        assert fork.status == "completed" and fork.final_output == ANSWER
        assert model.request_count == 2, "the fork sent the answered request again"
        assert len(ledger_lines(ledger)) == 1
        assert fork.usage == total_usage(fork.events)
        await _same_everywhere(client, tmp_path, fork)

        resumed = await asyncio.wait_for(resumer.aresume(run_id), 30)

    assert resumed.status == "completed" and resumed.final_output == ANSWER
    assert model.request_count == 3, "the answered request was sent again"
    assert [r["messages"][-1]["role"] for r in model.requests[1:]] == ["tool", "tool"]
    assert len(ledger_lines(ledger)) == 2  # once in the fork, once in the run
    gens = [e for e in resumed.events if e.type == "generation"]
    assert gens[0].calls and gens[0].calls[0]["function"]["name"] == "get_weather"
    assert gens[0].usage is not None and gens[0].usage.total_tokens > 0
    assert resumed.usage == total_usage(resumed.events)
    assert resumed.usage.total_tokens == sum(g.usage.total_tokens for g in gens if g.usage)
    assert [e.to_dict() for e in await TemporalStore(client).aload(run_id)] == [
        e.to_dict() for e in resumed.events
    ]


async def test_at_outside_the_parent_is_refused(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`at` must be a position of the parent's log (1..its length)."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    for at in (0, 8, -1):
        with pytest.raises(ValueError, match=r"at=.* is not an event position .* 1 to 7"):
            await agent.afork(parent.run_id, at=at)


async def test_forks_are_found_by_forked_from_and_name_their_parent(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """`temporal workflow list --query "ForkedFrom='<id>'"` lists a run's forks; each names it."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    forks = {
        (await agent.afork(parent.run_id, PARIS)).run_id,
        (await agent.afork(parent.run_id)).run_id,
    }

    def listed() -> bool:
        return set(_listed(temporal_address, f"ForkedFrom='{parent.run_id}'")) == forks

    await asyncio.to_thread(wait_until, listed, "the forks to be listed by ForkedFrom", 60)
    assert _listed(temporal_address, f"ForkedFrom='{next(iter(forks))}'") == []
    for fork_id in forks:
        description = await client.get_workflow_handle(str(fork_id)).describe()
        summary = await description.static_summary()
        details = await description.static_details()
        assert summary is not None and f"fork of {parent.run_id}" in summary
        assert details is not None and f"**Forked from** {parent.run_id}" in details


def _listed(address: str, query: str) -> list[str]:
    """Workflow ids `temporal workflow list --query` prints."""
    out = subprocess.run(
        [
            temporal_binary(),
            "workflow",
            "list",
            "--address",
            address,
            "--query",
            query,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    return [row["execution"]["workflowId"] for row in rows]


async def test_a_fork_without_a_store_reads_its_parent_from_temporal(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """With no store anywhere, the fork's projection holds the parent's events from history."""
    agent = scripted_agent(model, client, task_queue)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None

    fork = await agent.afork(parent.run_id, PARIS)

    projected = await TemporalStore(client).aload(fork.run_id or "")
    assert _dicts(projected) == _dicts(fork.events)
    assert _dicts(projected[:7]) == _dicts(parent.events)
    # the fork's history carries a reference to the parent, not its events
    segments = await TemporalStore(client).segments(fork.run_id or "")
    fork_input = segments[0].input
    assert fork_input["fork"]["run_id"] == parent.run_id and fork_input["fork"]["at"] == 7
    assert "events" not in fork_input["fork"]


async def test_a_run_only_in_the_store_is_forked(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A parent only a store has (Agentor's own log) is forked from the store."""
    from helpers import ROOT

    runs = tmp_path / "runs"
    runs.mkdir()
    parent_id = f"agentor-{task_queue}"
    fixture = ROOT / "tests" / "fixtures" / "completed-weather-run.jsonl"
    (runs / f"{parent_id}.jsonl").write_text(fixture.read_text())
    with ScriptedModelServer(tool_then_answer) as model:
        agent = _agent(model, client, task_queue, tmp_path, ledger)
        fork = await agent.afork(parent_id, PARIS)

    assert fork.final_output == PARIS_ANSWER
    parent_events = FileStore(runs).load(parent_id)
    assert _dicts(fork.events[:7]) == _dicts(parent_events)
    assert fork.events[7].forked_from == parent_id
    assert _dicts(FileStore(runs).load(fork.run_id or "")) == _dicts(fork.events)
    assert (runs / f"{parent_id}.jsonl").read_text() == fixture.read_text()


async def test_the_fork_history_replays(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A fork's history (marker, snapshot or continuation) replays deterministically."""
    from temporalio.worker import Replayer

    from agentor_temporal import AgentorPlugin

    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    snapshot = await agent.afork(parent.run_id)
    continued = await agent.afork(parent.run_id, PARIS)
    replayer = Replayer(workflows=[], plugins=[AgentorPlugin(agents=[agent])])
    for run_id in (snapshot.run_id, continued.run_id):
        history = await client.get_workflow_handle(str(run_id)).fetch_history()
        await replayer.replay_workflow(history)


async def test_fork_checks_its_arguments(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Hostile ids, bad input and bad max_turns are refused before anything starts."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    with pytest.raises(ValueError, match="Invalid run id"):
        await agent.afork("../etc", PARIS)
    with pytest.raises(ValueError, match="Invalid run id"):
        await agent.afork("parent", PARIS, fork_id="a/b")
    with pytest.raises(ValueError, match="empty prompt"):
        await agent.afork("parent", "  ")
    with pytest.raises(TypeError):
        await agent.afork("parent", 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_turns"):
        await agent.afork("parent", PARIS, max_turns=0)
    with pytest.raises(ValueError, match="at must be"):
        await agent.afork("parent", at="3")  # type: ignore[arg-type]


async def test_a_fork_in_flight_is_streamed_live(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """`stream(fork_id)` of a running fork yields the parent's events, then the fork's live."""
    gate = threading.Event()

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        if city == "Paris":
            gate.wait(60)
        return f"The weather in {city} is sunny and 22C."

    agent = scripted_agent(model, client, task_queue, tools=[get_weather])
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None
    fork_id = f"live-{task_queue}"
    forking = asyncio.ensure_future(agent.afork(parent.run_id, PARIS, fork_id=fork_id))
    try:

        async def tool_running() -> bool:
            latest = await TemporalStore(client).latest(fork_id)
            return latest is not None and any(e.type == "tool_call" for e in latest.events)

        deadline = asyncio.get_running_loop().time() + 60
        while not await tool_running():
            assert asyncio.get_running_loop().time() < deadline, "the fork never called its tool"
            await asyncio.sleep(0.05)
        streamed: list[Event] = []

        async def read() -> None:
            async for event in agent.stream(fork_id):
                streamed.append(event)
                if len(streamed) == 11:  # through the fork's tool_call: now let it answer
                    gate.set()

        await asyncio.wait_for(read(), 60)
        fork = await forking
    finally:
        gate.set()
        await asyncio.gather(forking, return_exceptions=True)
    assert _dicts(streamed) == _dicts(fork.events)
    assert [e.type for e in streamed][7:11] == ["fork", "run_start", "generation", "tool_call"]


async def test_max_turns_bounds_the_continuation(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """`max_turns` is the continuation's budget; a max_turns end is a result, not a failure."""
    agent = _agent(model, client, task_queue, tmp_path, ledger)
    parent = await agent.arun(PROMPT)
    assert parent.run_id is not None

    fork = await agent.afork(parent.run_id, PARIS, max_turns=1)

    assert fork.status == "max_turns" and fork.final_output is None
    assert fork.error == "Reached max_turns (1) without a final answer."
    assert [e.type for e in fork.events][8:] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "run_end",
    ]


async def test_another_agent_replays_a_run_with_a_fixed_tool(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """A fork by an agent with a fixed tool re-runs the parent from its start; the parent stays."""

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        raise RuntimeError("weather service down")

    broken = scripted_agent(
        model, client, task_queue, tools=[get_weather], store=FileStore(tmp_path / "runs")
    )
    parent = await broken.arun(PROMPT)
    assert parent.run_id is not None and "weather service down" in str(parent.final_output)
    fixed = weather_agent(
        base_url=model.base_url,
        task_queue=f"{task_queue}-fixed",
        temporal=client,
        name="Weather Agent (fixed)",
        instructions="Other instructions: the parent's system message is kept.",
        store=FileStore(tmp_path / "runs"),
    )

    fork = await fixed.afork(parent.run_id, at=1)

    assert fork.final_output == ANSWER
    assert [e.type for e in fork.events][:3] == ["run_start", "fork", "run_start"]
    assert fork.events[2].agent == "Weather Agent (fixed)"
    assert model.requests[-1]["messages"][0] == parent.events[0].messages[0]  # type: ignore[index]
    assert _dicts(await TemporalStore(client).aload(parent.run_id)) == _dicts(parent.events)
    await _same_everywhere(client, tmp_path, fork)
