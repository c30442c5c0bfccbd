"""Tool-call ids that models reuse: every call is its own, for approvals and idempotency keys.

Models reuse call ids (`call_0` in every turn, or twice in one turn). A
decision a person took on one call must never approve or deny a later call
that happens to share its id, and each call gets its own idempotency key
(the id's first use keeps `<run_id>:<call_id>`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from agentor_temporal import Agentor, TemporalStore, function_tool, tool_context
from agentor_temporal._inspect import summarize_segments
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer, Step
from agentor_temporal.worker import build_worker

from helpers import (
    coder,
    ledger_lines,
    scripted_agent,
    tool_results,
    transfer_tool,
    weather_tool,
)
from integration.test_long_runs import BUDGET

#: How long one step of a run may take before a test gives up on it.
STEP = 60


def _agent(
    model: ScriptedModelServer, client: Client, task_queue: str, ledger: str, *tools: Any
) -> Agentor:
    return scripted_agent(
        model, client, task_queue, tools=[weather_tool(ledger), transfer_tool(ledger), *tools]
    )


def _transfers(ledger: str) -> list[str]:
    """The executed transfers as `amount to` (the ledger line's last two words)."""
    return [
        " ".join(line.split()[-2:]) for line in ledger_lines(ledger) if line.startswith("transfer")
    ]


def _pending(result: Any) -> list[tuple[str, Any]]:
    return [(p.call_id, p.args) for p in result.pending_approvals]


async def test_an_approved_call_id_reused_in_a_later_turn_waits_for_its_own_decision(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A second call reusing an approved call's id waits for a person, whose decision is taken."""
    script: list[Step] = [
        CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0"),
        CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_0"),
        Reply("Paid both."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob, then eve."), STEP)
        run_id = paused.run_id
        assert paused.status == "awaiting_approval"
        assert _pending(paused) == [("call_0", {"amount": 5, "to": "bob"})]
        await agent.aapprove(run_id, "call_0", by="alice")

        again = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert again.status == "awaiting_approval", again.final_output
        assert _pending(again) == [("call_0", {"amount": 7000, "to": "eve"})]
        assert _transfers(ledger) == ["5.0 bob"]

        decided = await agent.aapprove(run_id, "call_0", by="bob")
        assert decided["args"] == {"amount": 7000, "to": "eve"} and decided["approved"]
        result = await asyncio.wait_for(agent.aresume(run_id), STEP)
    assert result.status == "completed" and result.final_output == "Paid both."
    assert _transfers(ledger) == ["5.0 bob", "7000.0 eve"]
    decisions = [(e.status, e.result) for e in result.events if e.type == "approval_decision"]
    assert decisions == [("approved", "alice"), ("approved", "bob")]


async def test_a_denial_does_not_carry_over_to_a_later_call_with_the_same_id(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A call reusing a denied call's id is not denied by that decision: it waits for its own."""
    script: list[Step] = [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_0"),
        CallTool("transfer", {"amount": 50, "to": "bob"}, id="call_0"),
        Reply("Sent the smaller one."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob."), STEP)
        run_id = paused.run_id
        await agent.adeny(run_id, "call_0", "too much", by="carol")

        again = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert again.status == "awaiting_approval", again.final_output
        assert _pending(again) == [("call_0", {"amount": 50, "to": "bob"})]
        await agent.aapprove(run_id, "call_0", by="carol")
        result = await asyncio.wait_for(agent.aresume(run_id), STEP)
    assert result.status == "completed"
    assert _transfers(ledger) == ["50.0 bob"]
    decisions = [e.status for e in result.events if e.type == "approval_decision"]
    assert decisions == ["denied", "approved"]


async def test_two_calls_sharing_an_id_in_one_turn_only_the_first_waits_for_approval(
    client: Client, task_queue: str, ledger: str
) -> None:
    """In one turn, a second call with the same id of a tool that may need approval is refused
    to the model without running or asking anyone; the first is decided as usual."""
    script: list[Step] = [
        [
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0"),
            CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_0"),
        ],
        Reply("Paid bob."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob and eve."), STEP)
        run_id = paused.run_id
        assert paused.status == "awaiting_approval"
        assert _pending(paused) == [("call_0", {"amount": 5, "to": "bob"})]
        await agent.aapprove(run_id, "call_0", by="alice")
        result = await asyncio.wait_for(agent.aresume(run_id), STEP)
        answers = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert result.status == "completed" and result.final_output == "Paid bob."
    assert _transfers(ledger) == ["5.0 bob"]
    assert [m["tool_call_id"] for m in answers] == ["call_0", "call_0"]
    assert answers[0]["content"] == "Sent 5 to bob."
    assert answers[1]["content"].startswith("Error:") and "same id" in answers[1]["content"]
    results = [e for e in result.events if e.type == "tool_result"]
    assert [e.error for e in results] == [None, "duplicate call id"]
    assert [e.type for e in result.events].count("approval_request") == 1


async def test_calls_sharing_an_id_get_distinct_idempotency_keys(
    client: Client, task_queue: str
) -> None:
    """Every call has its own key: an id's first use keeps `<run_id>:<call_id>`, repeats are
    numbered (`#2`, `#3`), in one turn and across turns; calls that need no approval all run."""
    keys: dict[int, str] = {}

    @function_tool
    def charge(cents: int) -> str:
        """Charge a card.

        Args:
            cents: How much.
        """
        keys[cents] = tool_context().idempotency_key
        return "charged"

    script: list[Step] = [
        [
            CallTool("charge", {"cents": 5}, id="call_0"),
            CallTool("charge", {"cents": 7}, id="call_0"),
        ],
        [CallTool("charge", {"cents": 10}, id="call_0"), CallTool("charge", {"cents": 11}, id="x")],
        Reply("Charged."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[charge])
        result = await asyncio.wait_for(agent.arun("Charge."), STEP)
    assert result.status == "completed"
    run = result.run_id
    assert keys == {5: f"{run}:call_0", 7: f"{run}:call_0#2", 10: f"{run}:call_0#3", 11: f"{run}:x"}


async def test_decisions_and_keys_hold_across_continue_as_new(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After continue-as-new, a call reusing an approved call's id still waits for a person,
    and repeats of an id keep getting new keys."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    ledger, reads = str(tmp_path / "ledger"), 20
    keys: list[str] = []

    @function_tool
    def read_chunk(n: int) -> str:
        """Read chunk `n`.

        Args:
            n: Which chunk.
        """
        keys.append(tool_context().idempotency_key)
        return f"chunk {n}: " + "x" * 2000

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        if done == 0:
            return CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0")
        if done <= reads:
            return CallTool("read_chunk", {"n": done}, id="call_0")
        if done == reads + 1:
            return CallTool("transfer", {"amount": 6, "to": "bob"}, id="call_0")
        return Reply("Read and paid twice.")

    with ScriptedModelServer(respond) as model:
        agent = coder(model, client, task_queue, tools=[read_chunk, transfer_tool(ledger)])
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay, read, pay.", max_turns=40), STEP)
            run_id = paused.run_id
            assert _pending(paused) == [("call_0", {"amount": 5, "to": "bob"})]
            await agent.aapprove(run_id, "call_0", by="alice")

            again = await asyncio.wait_for(agent.aresume(run_id), STEP)
            assert again.status == "awaiting_approval", again.final_output
            assert _pending(again) == [("call_0", {"amount": 6, "to": "bob"})]
            assert len(await TemporalStore(client).segments(run_id)) >= 2
            assert _transfers(ledger) == ["5.0 bob"]
            # turn 1's call, read before the run continued as new, decides nothing now
            with pytest.raises(ValueError, match="execution .* that has ended"):
                await agent.aapprove(run_id, paused.pending_approvals[0], by="mallory")
            with pytest.raises(ValueError, match="not waiting for turn 1's call 'call_0'"):
                await agent.aapprove(run_id, "call_0", by="mallory", turn=1)
            await agent.aapprove(run_id, "call_0", by="bob")
            result = await asyncio.wait_for(agent.aresume(run_id), STEP)
    assert result.status == "completed" and result.final_output == "Read and paid twice."
    assert _transfers(ledger) == ["5.0 bob", "6.0 bob"]
    assert keys == [f"{run_id}:call_0#{n}" for n in range(2, reads + 2)]
    transfer_keys = [line.split()[1] for line in ledger_lines(ledger)]
    assert transfer_keys == [f"{run_id}:call_0", f"{run_id}:call_0#{reads + 2}"]


@pytest.mark.parametrize("pay_id", ["call_pay", "call_" + "p" * 100], ids=["short", "long"])
async def test_a_decision_sent_again_into_the_next_execution_is_told_the_first_stands(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pay_id: str,
) -> None:
    """A decision that reaches an execution's first workflow task is checked against the
    decisions carried into it.

    A client may send a decision again as the run continues as new (its first attempt
    took effect, its answer was lost), and Temporal then delivers it to the next
    execution, with that execution's first task. Update validators run before the
    workflow's `run`, which restored the carried decisions only after its first step:
    such a decision was refused as "no tool call waiting", as if the approval had been
    lost. Update-with-start on a copy of the next execution's input puts the decision in
    that first task every time. A long call id is carried by its digest.
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    ledger, reads = str(tmp_path / "ledger"), 6

    @function_tool
    def read_chunk(n: int) -> str:
        """Read chunk `n`.

        Args:
            n: Which chunk.
        """
        return f"chunk {n}: " + "x" * 4000

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        if done == 0:
            return CallTool("transfer", {"amount": 5, "to": "bob"}, id=pay_id)
        if done <= reads:
            return CallTool("read_chunk", {"n": done}, id=f"call_{done}")
        return Reply("Paid and read.")

    with ScriptedModelServer(respond) as model:
        agent = coder(model, client, task_queue, tools=[read_chunk, transfer_tool(ledger)])
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay, then read.", max_turns=20), STEP)
            await agent.aapprove(paused.run_id, paused.pending_approvals[0], by="alice")
            result = await asyncio.wait_for(agent.aresume(paused.run_id), STEP)
            assert result.status == "completed", result.final_output
            segments = await TemporalStore(client).segments(paused.run_id)
            assert len(segments) >= 2, "the run never continued as new"
            last = client.get_workflow_handle(paused.run_id, run_id=segments[-1].execution_run_id)
            started = (await last.fetch_history()).events[0]
            payload = started.workflow_execution_started_event_attributes.input.payloads[0]
            carried = json.loads(payload.data)
            assert len(carried["carry"]["decisions"]) == 1, carried["carry"]

            copy = client.get_workflow_handle(f"{paused.run_id}-next")
            start = WithStartWorkflowOperation(
                "AgentRun",
                carried,
                id=copy.id,
                task_queue=task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
            try:
                with pytest.raises(WorkflowUpdateFailedError) as refused:
                    await client.execute_update_with_start_workflow(
                        "decide",
                        {"call_id": pay_id, "approved": True, "by": "bob"},
                        start_workflow_operation=start,
                        result_type=dict,
                    )
            finally:
                await copy.terminate("test: only its first task was wanted")
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == "AlreadyDecided", cause
    assert "already approved by alice; the decision stands" in str(cause)
    assert _transfers(ledger) == ["5.0 bob"]


async def test_the_state_query_of_a_paused_run_says_it_awaits_approval(
    client: Client, task_queue: str, ledger: str
) -> None:
    """`state` of a run waiting for a person says so, with its current history size, as
    `list`/`show` do."""
    script: list[Step] = [
        [
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
            CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
        ],
        Reply("Paid."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob."), STEP)
        assert paused.status == "awaiting_approval"
        handle = client.get_workflow_handle(paused.run_id)
        state = await handle.query("state", result_type=dict)
        history = await handle.fetch_history()
        assert state["status"] == "awaiting_approval", state
        # the numbers of the workflow task that paused: history after it has at
        # most that task's completion and the query's own events
        assert state["history_events"] >= len(history.events) - 3, (state, len(history.events))
        # and `list`/`show`, which read history
        segments = await TemporalStore(client).segments(paused.run_id)
        assert summarize_segments(paused.run_id, segments).status == "awaiting_approval"
        await agent.aapprove(paused.run_id, "call_pay")
        result = await asyncio.wait_for(agent.aresume(paused.run_id), STEP)
        assert result.status == "completed"
        assert (await handle.query("state", result_type=dict))["status"] == "completed"


@pytest.mark.parametrize("size", [100, 10_000], ids=["whole", "by-reference"])
async def test_keys_stay_distinct_when_a_failed_run_is_resumed(
    client: Client, task_queue: str, size: int
) -> None:
    """A resumed run counts the calls of the conversation it continues (sent whole, or by
    reference to history when large), so a call reusing an id gets a key of its own."""
    keys: list[str] = []
    refused: list[int] = []
    reads = 4

    @function_tool
    def read_chunk(n: int) -> str:
        """Read chunk `n`.

        Args:
            n: Which chunk.
        """
        keys.append(tool_context().idempotency_key)
        return f"chunk {n}: " + "x" * size

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        if done < reads or (refused and done == reads):
            return CallTool("read_chunk", {"n": done}, id="call_0")
        if not refused:
            refused.append(done)
            return Fail(400, "not today")
        return Reply("Read them all.")

    with ScriptedModelServer(respond) as model:
        agent = coder(model, client, task_queue, tools=[read_chunk])
        async with build_worker(client, [agent], task_queue=task_queue):
            failed = await asyncio.wait_for(agent.arun("Read.", max_turns=20), STEP)
            assert failed.status == "failed", failed.error
            result = await asyncio.wait_for(agent.aresume(failed.run_id), STEP)
    assert result.status == "completed" and result.final_output == "Read them all."
    resumed = (await TemporalStore(client).segments(failed.run_id))[-1].input
    assert (resumed.get("conversation") is not None) == (size > 1000)
    run = failed.run_id
    assert keys == [f"{run}:call_0"] + [f"{run}:call_0#{n}" for n in range(2, reads + 2)]
