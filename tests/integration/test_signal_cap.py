"""Runs past Temporal's cap on an execution's signals (10,000 by default).

Past the cap the server refuses every further signal to the execution
("exceeded workflow execution limit for signal events"), and the run goes on
without them: a flood of junk signals (a plain client's retry loop) is
enough to reach it. The tests start a dev server whose cap is `SIGNALS`, so
a few dozen signals reach it, and that takes `UPDATES` updates per execution
(the facade decides by signal past them, as past Temporal's 2,000).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import RawValue
from temporalio.service import RPCError

from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from conftest import dev_server
from helpers import ledger_lines, payer, scripted_agent

#: signals the server takes per execution in these tests (Temporal's default: 10,000)
SIGNALS = 30
#: updates it takes per execution (Temporal's default: 2,000)
UPDATES = 2
PAY = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")


@pytest_asyncio.fixture
async def few_signals() -> AsyncIterator[Client]:
    """A dev server that takes only SIGNALS signals and UPDATES updates per execution."""
    async with dev_server(
        f"history.maximumSignalsPerExecution={SIGNALS}", f"history.maxTotalUpdates={UPDATES}"
    ) as client:
        yield client


async def flood(client: Client, run_id: str) -> str:
    """Junk signals until the server refuses one (the execution is at its cap, or closed)."""
    handle = client.get_workflow_handle(run_id)
    for n in range(SIGNALS + 1):
        try:
            await handle.signal("decide_signal", {"request_id": f"junk-{n}", "decision": "x"})
        except RPCError as exc:
            return str(exc)
    pytest.fail(f"the server took {SIGNALS + 1} signals")


async def test_a_streamed_answer_after_the_signal_cap_is_kept(
    few_signals: Client, task_queue: str
) -> None:
    """A streamed reply whose text deltas the run refuses (its execution past the signal cap)
    is still recorded, asked once: before, the refused publish failed the model request
    after its answer came, as an internal error, and the run failed with the paid answer lost."""
    client = few_signals
    flooded = threading.Event()

    def once_flooded(request: dict[str, Any]) -> Any:
        if flooded.is_set():
            return Reply("Sunny in London, " + "and warm " * 50)
        return Hang(0.1, once_flooded)

    with ScriptedModelServer([once_flooded]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Weather in London?", stream_text=True)
            await asyncio.to_thread(model.wait_for_requests, 1)
            assert "limit for signal events" in await flood(client, run_id)
            flooded.set()
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert result.status == "completed", result.error
    assert result.final_output is not None and result.final_output.startswith("Sunny in London")
    assert model.request_count == 1


async def test_a_paused_run_flooded_with_signals_stops_before_the_cap_and_resumes(
    few_signals: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run waiting for a person, past the cap on updates (so decisions go by signal), sent
    junk signals stops, failed and resumable, before the server's cap on signals; resume
    asks again and the decision is taken. Before, the junk took the execution to the cap
    and stayed waiting: every decision sent by signal was refused, for good."""
    client = few_signals
    monkeypatch.setattr(policies, "PAUSED_SIGNALS", SIGNALS - 10, raising=False)

    def respond(request: dict[str, Any]) -> Any:
        answers = [m for m in request["messages"] if m["role"] == "tool"]
        if not answers:
            return PAY
        if len(answers) == 1:  # told the transfer did not run: asks for it again
            return CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay_2")
        return Reply("Paid bob.")

    with ScriptedModelServer(respond) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            handle = client.get_workflow_handle(run_id)
            with pytest.raises(RPCError, match="limit"):
                for _ in range(UPDATES + 1):  # the run's caller may have used one
                    await handle.execute_update("wait_paused", result_type=dict)
            await flood(client, run_id)
            async with asyncio.timeout(30):
                while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await asyncio.sleep(0.05)
            outcome = await handle.result()
            stopped = await asyncio.wait_for(agent.aresume(run_id), 30)
            assert stopped.status == "awaiting_approval", stopped.error
            await asyncio.wait_for(agent.aapprove(run_id, "call_pay_2", by="al"), 30)
            done = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert outcome["status"] == "failed" and "stopped while waiting" in outcome["error"], outcome
    assert f"signals (it stops at {SIGNALS - 10}: Temporal refuses" in outcome["error"], outcome
    assert done.status == "completed" and done.final_output == "Paid bob."
    assert [line.split()[-2:] for line in ledger_lines(ledger)] == [["5000.0", "bob"]]


#: a payload no JSON decoder reads (a plain client's hand-written one)
UNREADABLE = RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json"))


async def test_signals_a_run_cannot_read_never_fail_it_and_count_towards_the_cap(
    few_signals: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`decide_signal` and the stream's publish sent by a plain client with no argument, two,
    or one that does not decode (`temporal workflow signal` without --input) are dropped and
    counted: the run waiting for a person stops short of the server's cap on signals, failed
    and resumable. Before, one with no argument or two failed every workflow task of the run
    (the handler called with what came), for good, and one that did not decode was dropped
    uncounted, so a flood of them took the run to the cap still waiting."""
    client = few_signals
    monkeypatch.setattr(policies, "PAUSED_SIGNALS", SIGNALS - 10, raising=False)
    sends: list[tuple[str, list[Any]]] = [
        (name, args)
        for name in ("decide_signal", policies.STREAM_PUBLISH_SIGNAL)
        for args in ([], [{"request_id": "r"}, 2], [UNREADABLE])
    ]
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            handle = client.get_workflow_handle(run_id)
            refused = None
            for n in range(SIGNALS + 1):
                name, args = sends[n % len(sends)]
                try:
                    await handle.signal(name, args=args)
                except RPCError as exc:
                    refused = str(exc)
                    break
            outcome = await asyncio.wait_for(handle.result(), 30)
            state = await handle.query("state")
            failed = [
                e.workflow_task_failed_event_attributes.failure.message
                for e in (await handle.fetch_history()).events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            ]
            stopped = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert refused is not None, "the server took every signal"
    # a task whose commands met new signals is failed by the server and asked again
    assert set(failed) <= {"UnhandledCommand"}, failed
    assert state["unreadable_signals"] >= SIGNALS - 10, state
    assert outcome["status"] == "failed" and "stopped while waiting" in outcome["error"], outcome
    assert f"signals (it stops at {SIGNALS - 10}: Temporal refuses" in outcome["error"], outcome
    # resume asks the model again (told the transfer did not run), and the run goes on
    assert stopped.status == "completed", stopped.error
    assert ledger_lines(ledger) == []


async def test_a_decision_past_both_caps_says_to_cancel_and_resume(
    few_signals: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that does not stop short of the cap on signals (recorded before behaviour level
    18, here by a PAUSED_SIGNALS it never reaches), past the caps on updates and signals:
    approve says no decision can reach it and to cancel the run, then resume it, and that
    works. Before, it said only "did not take the decision: exceeded workflow execution
    limit for signal events"."""
    client = few_signals
    monkeypatch.setattr(policies, "PAUSED_SIGNALS", 10**9, raising=False)
    # resumed, the run asks for the same call again from its recorded answer
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            handle = client.get_workflow_handle(run_id)
            with pytest.raises(RPCError, match="limit"):
                for _ in range(UPDATES + 1):
                    await handle.execute_update("wait_paused", result_type=dict)
            assert "limit for signal events" in await flood(client, run_id)
            with pytest.raises(ValueError) as refused:
                await asyncio.wait_for(agent.aapprove(run_id, "call_pay"), 30)
            await handle.cancel()
            async with asyncio.timeout(30):
                while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await asyncio.sleep(0.05)
            again = await asyncio.wait_for(agent.aresume(run_id), 30)
            assert again.status == "awaiting_approval", again.error
            await asyncio.wait_for(agent.aapprove(run_id, "call_pay", by="al"), 30)
            done = await asyncio.wait_for(agent.aresume(run_id), 30)
    message = str(refused.value)
    assert "can take no decision" in message and "Cancel the run" in message, message
    assert f"resume({run_id!r})" in message, message
    assert done.status == "completed" and done.final_output == "Paid."
    assert model.request_count == 2
    assert [line.split()[-2:] for line in ledger_lines(ledger)] == [["5000.0", "bob"]]
