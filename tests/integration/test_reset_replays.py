"""A run reset to an earlier point (`temporal workflow reset`) does not pay again for what its
base execution completed.

A reset runs the workflow again from the chosen workflow task in a new
execution: every model request and tool call after that point is scheduled
again. Only a call still live (or just finished) in the worker that ran it
was joined; on any other worker, or once the run had ended, the model was
asked again and the tool ran again. The reset execution now takes the base's
recorded result for the same call; a tool that raised there runs again (a
reset is how a fixed tool is run again).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client

from agentor_temporal import TemporalStore, function_tool
from agentor_temporal.connection import connect
from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import (
    chunk_reader,
    chunk_tool,
    coder,
    ledger_lines,
    ledger_write,
    payer,
    scripted_agent,
)
from private import keys_of, make_keys


async def _reset(client: Client, run_id: str, task: int) -> None:
    """`temporal workflow reset --event-id`: to the end of the run's `task`-th workflow task."""
    handle = client.get_workflow_handle(run_id)
    current = (await handle.describe()).run_id
    events = (await handle.fetch_history()).events
    done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run_id, run_id=current),
            reason="test",
            workflow_task_finish_event_id=[e.event_id for e in events if e.event_type == done][
                task
            ],
            request_id=uuid.uuid4().hex,
        )
    )


@pytest.mark.parametrize(
    "options",
    [{}, {"local_model_calls": True}, {"keys": keys_of(make_keys("A")["A"])}],
    ids=["activities", "local_model_calls", "encrypted"],
)
async def test_a_reset_to_an_earlier_task_takes_the_base_s_recorded_answers(
    client: Client, task_queue: str, ledger: str, options: dict[str, Any]
) -> None:
    """A finished run reset to its first workflow task, then again to its second (a reset of
    a reset), each run on a fresh worker, asks the model no more and runs its tool no more;
    a call that raised runs again. Model requests in local activities and encrypted
    payloads alike."""
    failing = [True]

    @function_tool
    def pay(to: str) -> str:
        """Pays someone.

        Args:
            to: Who.
        """
        ledger_write(ledger, "pay", to)
        return f"paid {to}"

    @function_tool
    def flaky(to: str) -> str:
        """Fails until fixed.

        Args:
            to: Who.
        """
        ledger_write(ledger, "flaky", to)
        if failing[0]:
            raise RuntimeError("backend down")
        return f"fixed {to}"

    def respond(request: dict[str, Any]) -> Any:
        answers = [m for m in request.get("messages") or [] if m.get("role") == "tool"]
        if not answers:
            return [
                CallTool("pay", {"to": "bob"}, id="c1"),
                CallTool("flaky", {"to": "ann"}, id="c2"),
            ]
        return Reply(
            "Fixed." if any("fixed" in str(m.get("content")) for m in answers) else "Paid."
        )

    options = dict(options)
    if "keys" in options:
        client = await connect(client, encryption_keys=options.pop("keys"))
    with ScriptedModelServer(respond) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[pay, flaky],
            embedded_worker=False,
            **options,
        )
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            first = await asyncio.wait_for(agent.arun("Pay bob and ann.", run_id=run_id), 30)
        assert (first.status, first.final_output) == ("completed", "Paid."), first.error
        assert model.request_count == 2
        failing[0] = False
        for task in (0, 1):
            await _reset(client, run_id, task)
            async with build_worker(client, [agent], task_queue=task_queue):
                again = await asyncio.wait_for(agent.aresume(run_id), 30)
            runs = [line.split()[0] for line in ledger_lines(ledger)]
            assert (runs.count("pay"), runs.count("flaky")) == (1, 2), runs
            # the second turn is asked once more after the first reset: its input changed
            assert model.request_count == 3
            assert again.status == "completed", again.error
            assert again.final_output == "Fixed."
            results = {e.name: e for e in again.events if e.type == "tool_result"}
            assert results["pay"].result == "paid bob"
            assert results["flaky"].result == "fixed ann"


async def _reset_before_the_first_answer(client: Client, run_id: str) -> None:
    """Reset to the last workflow task completed after the first model request was scheduled
    and before its answer: the reset execution holds that request as scheduled, not done."""
    handle = client.get_workflow_handle(run_id)
    current = (await handle.describe()).run_id
    events = (await handle.fetch_history()).events
    scheduled = next(
        e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    answered = next(
        e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    [*_, point] = [e.event_id for e in events if e.event_type == done and e.event_id < answered]
    assert point > scheduled, "no workflow task completed while the model was answering"
    await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run_id, run_id=current),
            reason="test",
            workflow_task_finish_event_id=point,
            request_id=uuid.uuid4().hex,
        )
    )


async def test_an_approved_call_is_not_made_again_by_a_reset(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A run whose approved transfer ran, reset to a task completed while its model was
    answering: the server dispatches that request again with its first input (the reset
    execution did not schedule it), which takes its recorded answer too; the run asks for
    the decision again (a decision is not carried over by a reset), and once approved takes
    the transfer's recorded result instead of paying a second time."""
    pay = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")
    # the answer comes late: the caller's update makes a workflow task meanwhile
    with ScriptedModelServer([Hang(2, [pay]), Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
            await agent.aapprove(paused.run_id, "call_pay")
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
            assert done.final_output == "Paid."
            await _reset_before_the_first_answer(client, paused.run_id)
            again = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
            assert model.request_count == 2
            assert again.status == "awaiting_approval"
            await agent.aapprove(paused.run_id, "call_pay")
            again = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    assert (again.status, again.final_output) == ("completed", "Paid."), again.error
    assert len(ledger_lines(ledger)) == 1, ledger_lines(ledger)
    assert model.request_count == 2


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_model_calls"])
async def test_a_reset_of_an_older_execution_takes_the_later_executions_answers_too(
    local: bool,
    client: Client,
    task_queue: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that continued as new twice or more, reset to its first execution's second workflow
    task on a fresh worker: the reset execution takes its base's answers, and the executions
    it continues as new into take those the base's later executions recorded (before, only
    the reset execution's own calls did: 11 model requests for 7, 9 tool calls for 6)."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "20000")
    turns, ledger = 6, str(tmp_path / "ledger")
    with ScriptedModelServer(chunk_reader(turns)) as model:
        agent = coder(
            model, client, task_queue, tools=[chunk_tool(ledger, 2000)], local_model_calls=local
        )
        run_id = uuid.uuid4().hex
        # 2 KB results a turn: the run continues as new every two turns or so
        async with build_worker(client, [agent], task_queue=task_queue):
            first = await asyncio.wait_for(
                agent.arun("Read the repository.", run_id=run_id, max_turns=turns + 1), 60
            )
        assert first.status == "completed", first.error
        segments = await TemporalStore(client).segments(run_id)
        assert len(segments) >= 3, [s.status for s in segments]
        paid, ran = model.request_count, len(ledger_lines(ledger))
        assert (paid, ran) == (turns + 1, turns)
        handle = client.get_workflow_handle(run_id, run_id=segments[0].execution_run_id)
        events = (await handle.fetch_history()).events
        done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        await client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(
                    workflow_id=run_id, run_id=segments[0].execution_run_id
                ),
                reason="test",
                workflow_task_finish_event_id=[e.event_id for e in events if e.event_type == done][
                    1
                ],
                request_id=uuid.uuid4().hex,
            )
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            again = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert (again.status, again.final_output) == ("completed", f"Read {turns} chunks.")
    assert (model.request_count, len(ledger_lines(ledger))) == (paid, ran)


async def test_a_reset_again_before_any_worker_ran_the_first_takes_the_first_base_s_answers(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A finished run reset to its second workflow task, and again (the operator picking
    another point) to its first before any worker ran the first reset: the second reset's
    base did nothing, and what the run's first execution recorded is taken still."""

    @function_tool
    def pay(to: str) -> str:
        """Pays someone.

        Args:
            to: Who.
        """
        ledger_write(ledger, "pay", to)
        return f"paid {to}"

    with ScriptedModelServer([[CallTool("pay", {"to": "bob"}, id="c1")], Reply("Paid.")]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[pay], embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            first = await asyncio.wait_for(agent.arun("Pay bob.", run_id=run_id), 30)
        assert (first.status, first.final_output) == ("completed", "Paid."), first.error
        await _reset(client, run_id, 1)
        await _reset(client, run_id, 0)
        async with build_worker(client, [agent], task_queue=task_queue):
            again = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert (model.request_count, len(ledger_lines(ledger))) == (2, 1), ledger_lines(ledger)
    assert (again.status, again.final_output) == ("completed", "Paid."), again.error
