"""A decision decides only the call the person saw, named by call id and turn.

Models reuse call ids (`call_0` in every turn). A decision read against
turn 1's `call_0` (an approver acting on an old pending list, a client
sending again) must never decide turn 2's `call_0` that waits now: the run
refuses it, and the call waiting is decided only by a decision naming its
turn, or by one naming no turn (plain clients, as before).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.worker import Replayer

from agentor_temporal import Agentor, PendingApproval
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.workflows import AgentRunWorkflow, Decision

from helpers import ledger_lines, scripted_agent, transfer_tool, weather_tool
from integration.test_cli import cli, cli_all
from integration.test_cli_approval import AGENT, agent_env

#: How long one step of a run may take before a test gives up on it.
STEP = 60


def reused_id_script() -> list[Step]:
    """Two turns each asking for a transfer with the same call id, then an answer."""
    return [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_0"),
        CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_0"),
        Reply("Done."),
    ]


def _agent(model: ScriptedModelServer, client: Client, task_queue: str, ledger: str) -> Agentor:
    return scripted_agent(
        model, client, task_queue, tools=[weather_tool(ledger), transfer_tool(ledger)]
    )


def _pending(result: Any) -> list[tuple[str, int | None, Any]]:
    return [(p.call_id, p.turn, p.args) for p in result.pending_approvals]


async def _accepted_decisions(client: Client, run_id: str) -> list[dict[str, Any]]:
    """The `decide` updates the run's history accepted, as sent."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    accepted = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            continue
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        if request.input.name != "decide":
            continue
        [payload] = request.input.args.payloads
        accepted.append(json.loads(payload.data))
    return accepted


async def test_a_decision_on_an_earlier_turns_call_does_not_decide_the_call_waiting_now(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Approving turn 1's call_0 (denied already) after turn 2's call_0 began to wait is refused,
    by the facade and for a plain client; turn 2's call waits on, decided only as itself."""
    with ScriptedModelServer(reused_id_script()) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob, then eve."), STEP)
        run_id = paused.run_id
        assert _pending(paused) == [("call_0", 1, {"amount": 5000, "to": "bob"})]
        [first] = paused.pending_approvals
        await agent.adeny(run_id, first, "too much", by="carol")

        again = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert _pending(again) == [("call_0", 2, {"amount": 7000, "to": "eve"})]
        # the approver who read turn 1's call approves it late
        with pytest.raises(ValueError, match="not waiting for turn 1's call 'call_0'.*turn 2's"):
            await agent.aapprove(run_id, first, by="dave")
        with pytest.raises(ValueError, match="not waiting for turn 1's call"):
            await agent.aapprove(run_id, "call_0", by="dave", turn=1)
        handle = client.get_workflow_handle(run_id)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("decide", Decision("call_0", True, by="dave", turn=1))
        assert "turn 2's" in str(refused.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                "decide", {"call_id": "call_0", "approved": True, "turn": 0}
            )
        assert "turn must be a positive integer" in str(refused.value.cause)

        still = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert still.status == "awaiting_approval"
        assert _pending(still) == [("call_0", 2, {"amount": 7000, "to": "eve"})]
        assert ledger_lines(ledger) == []

        # a plain client naming no turn decides the call waiting, as before
        decided = await handle.execute_update(
            "decide", {"call_id": "call_0", "approved": False, "by": "erin"}, result_type=dict
        )
        assert decided["turn"] == 2 and decided["args"] == {"amount": 7000, "to": "eve"}
        result = await asyncio.wait_for(agent.aresume(run_id), STEP)
    assert result.status == "completed" and result.final_output == "Done."
    assert ledger_lines(ledger) == []
    decisions = [
        (e.turn, e.status, e.result) for e in result.events if e.type == "approval_decision"
    ]
    assert decisions == [(1, "denied", "carol"), (2, "denied", "erin")]
    # the refused decisions left nothing in history; the facade's names its turn
    accepted = await _accepted_decisions(client, run_id)
    assert [(d["by"], d.get("turn")) for d in accepted] == [("carol", 1), ("erin", None)]
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)


async def test_the_facade_names_the_turn_of_the_call_waiting_when_it_sends(
    client: Client, task_queue: str, ledger: str
) -> None:
    """`approve(run_id, call_id)` without a turn sends the turn of the call waiting (read from
    history), so a decision delivered only after the run moved on is refused by the run."""
    with ScriptedModelServer(reused_id_script()) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob, then eve."), STEP)
        run_id = paused.run_id
        await agent.aapprove(run_id, "call_0", by="alice")
        again = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert _pending(again) == [("call_0", 2, {"amount": 7000, "to": "eve"})]
        await agent.adeny(run_id, "call_0", "not eve", by="bob")
        result = await asyncio.wait_for(agent.aresume(run_id), STEP)
    assert result.status == "completed"
    assert [line.split()[-2:] for line in ledger_lines(ledger)] == [["5000.0", "bob"]]
    accepted = await _accepted_decisions(client, run_id)
    assert [(d["by"], d["turn"]) for d in accepted] == [("alice", 1), ("bob", 2)]


def test_cli_pending_shows_the_turn_and_approve_refuses_another_turns_call(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`pending` shows each call's turn; `approve --turn` naming an earlier turn's call exits 1
    and decides nothing; `approve` naming the turn shown decides the call."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(reused_id_script()) as model:
        env = agent_env(model, task_queue, ledger)
        common = ["--temporal", temporal_address, "--agent", AGENT]
        started = cli("run", "Pay bob, then eve.", "--json", *common, env=env)
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]
        denied = cli("deny", run_id, "call_0", "--reason", "no", "--turn", "1", *common, env=env)
        assert denied.returncode == 0, denied.stderr
        assert "denied call_0 (turn 1)" in denied.stdout
        resumed = cli("resume", run_id, "--json", *common, env=env)
        assert json.loads(resumed.stdout)["status"] == "awaiting_approval", resumed.stderr

        # what reads or is refused changes nothing: side by side
        listed, tabled, stale, elsewhere, malformed = cli_all(
            [
                ("pending", "--json", "--temporal", temporal_address),
                ("pending", "--temporal", temporal_address),
                ("approve", run_id, "call_0", "--turn", "1", *common),
                ("approve", run_id, "call_0", "--execution", str(uuid.uuid4()), *common),
                ("approve", run_id, "call_0", "--execution", "x", *common),
            ],
            env=env,
        )
        mine = [r for r in json.loads(listed.stdout) if r["run_id"] == run_id]
        assert [(r["call_id"], r["turn"], r["args"]) for r in mine] == [
            ("call_0", 2, {"amount": 7000, "to": "eve"})
        ]
        assert "TURN" in tabled.stdout.splitlines()[0]

        assert stale.returncode == 1
        assert "not waiting for turn 1's call 'call_0'" in stale.stderr
        assert "Traceback" not in stale.stderr
        # pinned to the execution that asked, as `pending --json` shows it
        [execution] = {r["execution_run_id"] for r in mine}
        assert execution, mine
        assert elsewhere.returncode == 1 and "has no execution" in elsewhere.stderr
        assert malformed.returncode == 1 and "not an execution run id" in malformed.stderr
        assert "Traceback" not in elsewhere.stderr + malformed.stderr
        approved = cli(
            "approve", run_id, "call_0", "--turn", "2", "--execution", execution, *common, env=env
        )
        assert approved.returncode == 0, approved.stderr
        done = cli("resume", run_id, "--json", *common, env=env)
    assert json.loads(done.stdout)["final_output"] == "Done."
    assert [line.split()[-2:] for line in ledger_lines(ledger)] == [["7000.0", "eve"]]


def _pending_approval(call_id: str, turn: int) -> PendingApproval:
    return PendingApproval(call_id, "transfer", None, turn)


async def test_a_decision_naming_a_turn_for_a_call_never_asked_is_refused_as_unknown(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A decision naming a turn, for a call id the run never asked about, says so (no turn
    check can pass it through), and one naming the turn waiting decides it."""
    with ScriptedModelServer(reused_id_script()) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob, then eve."), STEP)
        run_id = paused.run_id
        with pytest.raises(ValueError, match="no tool call 'call_x' waiting"):
            await agent.aapprove(run_id, _pending_approval("call_x", 1))
        with pytest.raises(ValueError, match="turn must be a positive integer"):
            await agent.aapprove(run_id, "call_0", turn=0)
        decided = await agent.aapprove(run_id, _pending_approval("call_0", 1))
        assert decided["turn"] == 1 and decided["approved"]
        # refused either way: as decided, or (the run already asking turn 2's
        # call_0, which happens under load) as not waiting for turn 1's
        with pytest.raises(ValueError, match="already approved|not waiting for turn 1"):
            await agent.aapprove(run_id, _pending_approval("call_0", 1))


async def test_a_decision_read_before_a_resume_does_not_decide_the_resumed_runs_call(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A run cancelled while turn 1's call_0 waits is resumed, and asks again for the same
    call (from the recorded answer, the model not asked again): approving the call read
    before the resume decides nothing."""
    script: list[Step] = [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_0"),
        Reply("Done."),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(model, client, task_queue, ledger)
        paused = await asyncio.wait_for(agent.arun("Pay bob."), STEP)
        run_id = paused.run_id
        [before] = paused.pending_approvals
        handle = client.get_workflow_handle(run_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), STEP)

        resumed = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert _pending(resumed) == [("call_0", 1, {"amount": 5000, "to": "bob"})]
        assert model.request_count == 1
        with pytest.raises(ValueError, match="asked in an execution of run .* that has ended"):
            await agent.aapprove(run_id, before, by="dave")
        still = await asyncio.wait_for(agent.aresume(run_id), STEP)
        assert _pending(still) == [("call_0", 1, {"amount": 5000, "to": "bob"})]
        assert ledger_lines(ledger) == []
        [now] = still.pending_approvals
        await agent.adeny(run_id, now, "not bob")
        result = await asyncio.wait_for(agent.aresume(run_id), STEP)
    assert result.status == "completed" and ledger_lines(ledger) == []
