"""What a run carries over continue-as-new stays one payload Temporal accepts, or the run ends.

The next execution's input holds the last turn's messages, how often each
call id was used (counted for the whole run: a later call may reuse any id)
and the decisions people took. Kept whole, a model's 40 KB call ids or a
batch of decisions with long reasons made that input pass Temporal's 2 MB
limit, and every workflow task failed from then on. Long ids are counted by
digest, decisions carry no reason, and a carry still too large ends the run
saying why.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from agentor_temporal import Agentor, TemporalStore, function_tool, tool_context
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import AgentRunWorkflow, policies

from helpers import pad, scripted_agent, transfer_tool, unwedged_history

#: Every turn's history passes this: each turn continues as new.
BUDGET = "200000"


async def _executions(client: Client, run_id: str) -> list[WorkflowHistory]:
    """The histories of the run's executions, first to last."""
    segments = await TemporalStore(client).segments(run_id)
    return [
        await client.get_workflow_handle(run_id, run_id=s.execution_run_id).fetch_history()
        for s in segments
    ]


def _agent(
    model: ScriptedModelServer, client: Client, task_queue: str, tool: Any, **kwargs: Any
) -> Agentor:
    """The run's agent with one tool, served by the test's own worker."""
    return scripted_agent(model, client, task_queue, embedded_worker=False, tools=[tool], **kwargs)


def _looking() -> tuple[Any, dict[str, str]]:
    """A tool that looks, and the idempotency key of each look by "turn-n"."""
    keys: dict[str, str] = {}

    @function_tool
    def look(n: int) -> str:
        """Look once.

        Args:
            n: Which look.
        """
        keys[f"{tool_context().turn}-{n}"] = tool_context().idempotency_key
        return "seen"

    return look, keys


def _carry_sizes(histories: list[WorkflowHistory]) -> list[int]:
    """Encoded bytes of each continued execution's input."""
    sizes = []
    for history in histories:
        start = history.events[0].workflow_execution_started_event_attributes
        data = json.loads(start.input.payloads[0].data)
        if "carry" in data:
            sizes.append(len(start.input.payloads[0].data))
    return sizes


async def test_long_call_ids_are_counted_by_digest_across_continue_as_new(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three turns of twelve 40 KB call ids, then one reused: the run continues, keys stay apart.

    Before: the ids were carried whole (480 KB a turn) and the third
    continue-as-new passed 2 MB.
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", BUDGET)
    look, keys = _looking()

    def long_id(turn: int, n: int) -> str:
        return f"{turn}-{n}-" + "c" * 40_000

    script: list[Any] = [
        [CallTool("look", {"n": n}, id=long_id(turn, n)) for n in range(12)] for turn in range(3)
    ]
    script += [CallTool("look", {"n": 0}, id=long_id(0, 0)), Reply("Looked.")]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, look)
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "input": "Look a lot."},
                id=f"ids-{task_queue}",
                task_queue=task_queue,
            )
            await unwedged_history(client, handle.id)
            outcome = await asyncio.wait_for(handle.result(), 10)
    assert outcome["status"] == "completed", outcome["error"]
    histories = await _executions(client, handle.id)
    assert len(histories) >= 4
    # the last turn's messages (960 KB of ids), and counts of a few bytes per id
    assert max(_carry_sizes(histories)) < 1_000_000
    # the reused id is its second use: a key of its own, not the first call's
    assert keys["4-0"] == f"{handle.id}:{long_id(0, 0)}#2"
    assert keys["1-0"] == f"{handle.id}:{long_id(0, 0)}"
    # a continued execution, from its carry
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(histories[-2])


async def test_decisions_with_long_reasons_are_carried_without_them(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty calls approved, each with the longest reason and name: the run goes on.

    Before: each decision was carried whole (96 KB as Temporal encodes it,
    when 4,000 emoji were let in), and the continue-as-new after the turn
    passed 2 MB.
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", BUDGET)
    script = [
        [CallTool("transfer", {"amount": n, "to": "bob"}, id=f"call_{n}") for n in range(20)],
        Reply("Paid."),
    ]
    reason = "r" * policies.MAX_DECISION_BYTES
    name = "\U0001f600" * (policies.MAX_DECISION_BYTES // 12)  # 12 bytes each, encoded
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, transfer_tool())
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob twenty times."), 30)
            assert paused.status == "awaiting_approval" and len(paused.pending_approvals) == 20
            run_id = str(paused.run_id)
            # one at a time: a decision's update in flight while the run continues
            # as new is retried by the client on the next execution, which refuses it
            for pending in paused.pending_approvals:
                await agent.aapprove(run_id, pending.call_id, reason, by=name)
            await unwedged_history(client, run_id)
            outcome = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 10)
        result = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert outcome["status"] == "completed", outcome["error"]
    assert result.final_output == "Paid."
    # every reason and name is in the log whole
    decisions = [e for e in result.events if e.type == "approval_decision"]
    assert len(decisions) == 20 and all(e.text == reason and e.result == name for e in decisions)
    histories = await _executions(client, run_id)
    # whole, the decisions alone would be 160 KB
    assert len(histories) == 2 and max(_carry_sizes(histories)) < 100_000


async def test_a_carry_over_its_limit_ends_the_run_saying_why(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A carry larger than the run may hand on ends the run as `failed`, its log whole.

    (The limit is lowered to 100 KB here; a turn's 200 KB result passes it.)
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", BUDGET)
    monkeypatch.setattr(policies, "MAX_PAYLOAD_BYTES", 100_000)
    script = [CallTool("pad", {"data": "x", "n": 200_000}), Reply("never asked")]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, pad)
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.arun("Pad once."), 30)
        assert model.request_count == 1
    assert result.status == "failed"
    assert (result.error or "").startswith("The run could not continue as new after turn 1")
    assert [e.type for e in result.events][-3:] == ["tool_call", "tool_result", "run_end"]
    [history] = await _executions(client, str(result.run_id))
    kinds = {e.event_type for e in history.events}
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW not in kinds
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)


async def test_decisions_carried_stay_bounded_however_many_turns_are_decided(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four turns of 50 approvals, names of 333 emoji: each carry holds a turn's decisions, cut.

    Before: every decision of the run was carried, its name cut to 100
    characters (1.2 kB of emoji), so three turns of 500 passed the 1.9 MB a
    run hands on and it ended failed. (Scaled down here: the limit lowered
    to 150 kB, a turn being 50 decisions.)
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", BUDGET)
    monkeypatch.setattr(policies, "MAX_PAYLOAD_BYTES", 150_000)
    monkeypatch.setattr(policies, "CARRIED_DECISIONS", 50, raising=False)
    turns, calls = 4, 50
    script: list[Any] = [
        [
            CallTool("transfer", {"amount": n, "to": "bob"}, id=f"call_{turn}_{n}")
            for n in range(calls)
        ]
        for turn in range(turns)
    ]
    script.append(Reply("Paid."))
    name = "\U0001f600" * (policies.MAX_DECISION_BYTES // 12)
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, transfer_tool())
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.arun("Pay bob, a lot."), 30)
            run_id = str(result.run_id)
            for turn in range(turns):
                assert result.status == "awaiting_approval", result.error
                if turn:
                    # the last turn's decision, sent again after the run went on: it stands
                    with pytest.raises(ValueError, match="already approved"):
                        await agent.aapprove(run_id, f"call_{turn - 1}_0", by="dave")
                for pending in result.pending_approvals:
                    await agent.aapprove(run_id, pending, by=name)
                result = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert result.status == "completed", result.error
    assert len([e for e in result.events if e.type == "approval_decision"]) == turns * calls
    assert all(e.result == name for e in result.events if e.type == "approval_decision")
    histories = await _executions(client, run_id)
    sizes = _carry_sizes(histories)
    assert len(sizes) >= turns and max(sizes) < 2 * min(sizes)
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(histories[-1])


async def test_many_unique_call_ids_are_carried_in_a_fixed_size(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six turns of 100 unique ids, then one reused: the run continues, its key is its own.

    Before: each id was counted in the carry (~70 bytes each), so 50,000 ids
    (100 turns of 500 calls) passed the 1.9 MB a run hands on and the run
    ended failed. (Scaled down: the limit lowered to 60 kB, compaction from
    10 kB, a filter of 64 kbit.)
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "50000")  # every turn continues as new
    monkeypatch.setattr(policies, "MAX_PAYLOAD_BYTES", 60_000)
    monkeypatch.setattr(policies, "CARRIED_USES_BYTES", 10_000, raising=False)
    monkeypatch.setattr(policies, "CALL_IDS_SEEN_BITS", 1 << 16, raising=False)
    look, keys = _looking()

    def unique(turn: int, n: int) -> str:
        return f"call_{turn}_{n}_".ljust(60, "u")

    turns, calls = 6, 100
    script: list[Any] = [
        [CallTool("look", {"n": n}, id=unique(turn, n)) for n in range(calls)]
        for turn in range(turns)
    ]
    script += [CallTool("look", {"n": 0}, id=unique(0, 7)), Reply("Looked.")]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, look)
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.arun("Look a lot."), 120)
    assert result.status == "completed", result.error
    run_id = str(result.run_id)
    histories = await _executions(client, run_id)
    assert len(histories) >= turns
    assert max(_carry_sizes(histories)) < 60_000
    # the reused id is its second use, and the first uses kept their plain keys
    assert keys[f"{turns + 1}-0"] == f"{run_id}:{unique(0, 7)}#2"
    assert keys["1-7"] == f"{run_id}:{unique(0, 7)}"
    assert all(keys[f"{turns}-{n}"] == f"{run_id}:{unique(turns - 1, n)}" for n in range(calls))
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(histories[-1])


async def test_resuming_a_run_of_many_unique_call_ids_sends_them_in_a_fixed_size(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed long conversation's ids go compacted in its input; a reused one is keyed #2.

    Before: its input counted every id (~70 bytes each), so a run of 30,000
    calls could not be resumed: its input passed what a run records in one
    payload and it failed at once. (Scaled down: 300 calls, the limit
    lowered to 15 kB for the resume, compaction from 5 kB.)
    """
    look, keys = _looking()

    def unique(turn: int, n: int) -> str:
        return f"call_{turn}_{n}_".ljust(60, "u")

    script: list[Any] = [
        [CallTool("look", {"n": n}, id=unique(turn, n)) for n in range(150)] for turn in range(2)
    ]
    script += [
        CallTool("look", {"n": 0}, id=unique(2, 0)),
        CallTool("look", {"n": 0}, id=unique(0, 7)),
        Reply("Looked."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, look, max_turns=3)
        async with build_worker(client, [agent], task_queue=task_queue):
            first = await asyncio.wait_for(agent.arun("Look a lot."), 60)
            assert first.status == "max_turns", first.error
            monkeypatch.setattr(policies, "MAX_PAYLOAD_BYTES", 15_000)
            monkeypatch.setattr(policies, "CARRIED_USES_BYTES", 5_000, raising=False)
            monkeypatch.setattr(policies, "CALL_IDS_SEEN_BITS", 1 << 14, raising=False)
            result = await asyncio.wait_for(agent.aresume(str(first.run_id)), 60)
    assert result.status == "completed", result.error
    run_id = str(result.run_id)
    # the resumed segment's first turn reuses turn 1's id: its second use
    assert keys["1-0"] == f"{run_id}:{unique(0, 7)}#2"
    assert keys["2-7"] == f"{run_id}:{unique(1, 7)}"
