"""Runs watched by many followers, and plain Temporal clients, never wedge or leak.

Regression tests for what probing the surfaces beyond the facade found:
followers of a paused run holding Temporal's updates in flight (so no
decision got in), a watched streamed reply using up the execution's updates,
a malformed stream publish or carried stream state failing every workflow
task, the page's token in the server's access log, an A2A send retried
starting a second run, an approve given up on leaving an exception no
one retrieved, a paused run reset (`temporal workflow reset`) that no
decision could reach, and an activity completed by hand with a result of
another shape failing every workflow task.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    StartWorkflowUpdateInput,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
)
from temporalio.service import RPCError

from agentor_temporal import Event, _stuck, function_tool
from agentor_temporal._runtime import Runtime
from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import failure_message

from helpers import (
    ROOT,
    ledger_lines,
    ledger_write,
    payer,
    scripted_agent,
    transfer_tool,
    until,
    unwedged_history,
    wait_until,
    weather_agent,
)

PAY = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")


class Asks(Interceptor):
    """Counts a client's accepted stream polls and its `state` queries."""

    def __init__(self) -> None:
        self.polls = 0
        self.queries = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counts = self

        class Counting(OutboundInterceptor):
            async def start_workflow_update(
                self, input: StartWorkflowUpdateInput
            ) -> WorkflowUpdateHandle[Any]:
                handle = await super().start_workflow_update(input)
                if input.update.startswith("__temporal_workflow_stream_poll"):
                    counts.polls += 1
                return handle

            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                if input.query == "state":
                    counts.queries += 1
                return await super().query_workflow(input)

        return Counting(next)


async def test_followers_of_a_paused_run_never_keep_its_decision_out(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Ten followers of a paused run (page tabs, SSE or A2A streams, even gone) let it be approved.

    Before: each follower held a stream poll (a Temporal update) in flight
    until the run published again, and Temporal takes only 10 updates in
    flight per execution: `approve` failed with "limit on number of
    concurrent in-flight updates has been reached (10)", and since polls
    outlive their followers, the run could never be approved.
    """
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        options: dict[str, Any] = dict(
            base_url=model.base_url,
            task_queue=task_queue,
            tools=[transfer_tool(ledger)],
            embedded_worker=False,
        )
        agent = weather_agent(temporal=client, **options)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            asks = [Asks() for _ in range(10)]
            followers = [
                weather_agent(
                    temporal=Client(**{**client.config(), "interceptors": [a]}), **options
                )
                for a in asks
            ]

            async def follow(follower: Any) -> None:
                async for _ in follower.stream(paused.run_id):
                    pass

            watching = [asyncio.ensure_future(follow(f)) for f in followers]
            # and one that stays: it gets the rest of the run once it is decided
            stays = asyncio.ensure_future(_collect(agent.stream(paused.run_id)))
            # every follower waits for what comes next: by a poll sent after
            # the first (which returns what is there), or by asking the run
            async with asyncio.timeout(30):
                while not all(a.polls >= 2 or a.queries >= 1 for a in asks):
                    await asyncio.sleep(0.02)
            for task in watching:
                task.cancel()
            for task in watching:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            decided = await asyncio.wait_for(
                agent.aapprove(paused.run_id, "call_pay", by="alice"), 60
            )
            assert decided["approved"]
            done = await agent.aresume(paused.run_id)
            followed = await asyncio.wait_for(stays, 30)
    assert done.status == "completed" and done.final_output == "Paid."
    assert [e.to_dict() for e in followed] == [e.to_dict() for e in done.events]
    assert len(ledger_lines(ledger)) == 1


async def _collect(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


async def test_a_malformed_stream_publish_from_a_plain_client_never_poisons_the_run(
    client: Client, task_queue: str, ledger: str
) -> None:
    """One bad signal from any Temporal client (`temporal workflow signal`) leaves the run working.

    What a user sees: the run's workflow task fails again and again
    ("Invalid base64-encoded string ..."); the paused run can no longer be
    approved, resumed or cancelled cleanly: it is stuck until terminated.
    """
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            handle = client.get_workflow_handle(paused.run_id)
            await handle.signal(
                "__temporal_workflow_stream_publish",
                {"items": [{"topic": "events", "data": "!!notbase64"}], "sequence": 0},
            )
            # the workflow task that takes the signal completes, or fails
            # (asked of history: a decision sent now would wait for ever)
            done_types = {
                EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "completed",
                EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED: "failed",
            }
            outcome = None
            async with asyncio.timeout(30):
                while outcome is None:
                    events = (await handle.fetch_history()).events
                    signalled = next(
                        i
                        for i, e in enumerate(events)
                        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                    )
                    outcome = next(
                        (
                            done_types[e.event_type]
                            for e in events[signalled:]
                            if e.event_type in done_types
                        ),
                        None,
                    )
                    await asyncio.sleep(0.05)
            assert outcome == "completed"
            decided = await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay"), 30)
            assert decided["approved"]
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    assert done.status == "completed"
    assert len(ledger_lines(ledger)) == 1


async def test_a_plain_client_start_with_a_bad_carried_stream_fails_the_run_clearly(
    client: Client, task_queue: str
) -> None:
    """A start whose input carries a broken stream state fails the run, not its workflow task.

    Before: `temporal workflow start --type AgentRun --input '{..., "carry":
    {"stream": {"log": [{"topic": "events", "data": "abcde"}]}}}'` left a run
    "Running" for ever, every workflow task failing in `WorkflowStream`'s
    constructor ("Invalid base64-encoded string"). Now the carried stream is
    decoded where it is read, and the run fails on its input.
    """
    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue)
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                "AgentRun",
                {
                    "agent": "Weather Agent",
                    "input": "hi",
                    "carry": {
                        "stream": {"log": [{"topic": "events", "data": "abcde", "offset": 0}]}
                    },
                },
                id=f"bad-carry-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 15)
    assert "carry" in failure_message(failed.value)


async def test_an_approve_given_up_on_leaves_no_exception_unretrieved(
    client: Client, task_queue: str, ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller that stops waiting for a decision no worker takes (the HTTP and A2A routes
    after 30 s, `asyncio.wait_for`) cancels it, and it ends cancelled. Before, it ended with
    a TimeoutError no one awaited, logged as "Task exception was never retrieved" (once,
    formatted at an unlucky moment, it crashed a pytest session)."""
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
        # no worker now: the decision waits for one
        with caplog.at_level("ERROR", logger="asyncio"):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay", turn=1), 2)
            runtime = Runtime.get().loop

            def deciding() -> list[asyncio.Task[Any]]:
                tasks = list(asyncio.all_tasks(runtime))  # read from this thread: a test's view
                return [t for t in tasks if "_decide" in repr(t.get_coro())]

            await asyncio.to_thread(wait_until, lambda: not deciding(), "the decision to stop")
            gc.collect()  # a task that ended with an exception nobody took logs it here
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def _reset_to_last_task(client: Client, run_id: str) -> str:
    """`temporal workflow reset --type LastWorkflowTask`: the new execution's run id."""
    handle = client.get_workflow_handle(run_id)
    current = (await handle.describe()).run_id
    events = (await handle.fetch_history()).events
    done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    reset = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run_id, run_id=current),
            reason="test",
            workflow_task_finish_event_id=[e.event_id for e in events if e.event_type == done][-1],
            request_id=uuid.uuid4().hex,
        )
    )
    return reset.run_id


async def test_a_paused_run_reset_from_a_plain_client_takes_its_decision(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A reset run's pending approvals name the execution waiting now, so a decision reaches it.

    A reset execution's history begins with a copy of its base's started
    event, whose original_execution_run_id names the base (terminated by the
    reset): the pending approvals named that execution, and every approve was
    refused ("asked in an execution ... that has ended"), the run waiting for
    good. Reset twice: the last reset names the execution.
    """
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
            for _ in range(2):
                now = await _reset_to_last_task(client, paused.run_id)
                again = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
                assert again.status == "awaiting_approval"
                [pending] = again.pending_approvals
                assert pending.execution_run_id == now
            decided = await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay"), 30)
            assert decided["approved"]
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    assert done.status == "completed" and done.final_output == "Paid."
    assert [e.type for e in done.events].count("approval_request") == 1
    assert len(ledger_lines(ledger)) == 1 and model.request_count == 2


async def _complete_by_hand(client: Client, run_id: str, activity_id: str, result: Any) -> None:
    """`temporal activity complete --activity-id <id> --result <json>`, once it runs."""
    handle = client.get_workflow_handle(run_id)

    async def running() -> bool:
        with contextlib.suppress(Exception):  # not started yet
            pending = (await handle.describe()).raw_description.pending_activities
            return any(
                a.activity_id == activity_id and a.last_started_time.seconds for a in pending
            )
        return False

    async with asyncio.timeout(30):
        while not await running():
            await asyncio.sleep(0.05)
    await client.get_async_activity_handle(
        workflow_id=run_id, run_id=None, activity_id=activity_id
    ).complete(result)


async def test_an_activity_completed_by_hand_with_another_shape_fails_the_run_clearly(
    client: Client, task_queue: str
) -> None:
    """A tool call or model request completed from outside with a result that is not its
    own shape fails the run naming it, and resume goes on; before, the SDK's decoding (or
    the run's reading a null) failed every workflow task ("Failed decoding arguments")."""
    release = threading.Event()

    @function_tool
    def held(text: str) -> str:
        """Waits until the test lets it answer.

        Args:
            text: Anything.
        """
        release.wait(60)
        return "held answer"

    script = [
        CallTool("held", {"text": "a"}, id="c1"),
        Reply("after the call"),
        Hang(30, Reply("too late")),
        Reply("after the request"),
    ]
    try:
        with ScriptedModelServer(script) as model:
            agent = scripted_agent(model, client, task_queue, tools=[held], embedded_worker=False)
            async with build_worker(client, [agent], task_queue=task_queue):
                for activity_id, result, what in [
                    ("tool-1-0", {"result": 5}, "The call held(text='a')"),
                    ("generate-1", None, "The model request of turn 1"),
                ]:
                    run_id = uuid.uuid4().hex
                    running = asyncio.ensure_future(agent.arun("go", run_id=run_id))
                    try:
                        await _complete_by_hand(client, run_id, activity_id, result)
                        await unwedged_history(client, run_id)
                    except BaseException:  # wedged: the assertion says how
                        # (once the run closed, its caller may still be reading its end)
                        running.cancel()
                        with contextlib.suppress(RPCError):
                            await client.get_workflow_handle(run_id).terminate("test: wedged")
                        raise
                    failed = await asyncio.wait_for(running, 30)
                    assert failed.status == "failed"
                    assert (failed.error or "").startswith(
                        f"{what} was completed with a result the run cannot take"
                    ), failed.error
                    done = await asyncio.wait_for(agent.aresume(run_id), 30)
                    assert done.status == "completed", done.error
                    assert done.final_output in ("after the call", "after the request")
    finally:
        release.set()
    assert model.request_count == 4


async def test_a_caller_waiting_on_a_run_reset_meanwhile_gets_its_outcome(
    client: Client, task_queue: str
) -> None:
    """A run reset while its caller waits (its model request in flight) is followed into the
    reset execution: the caller was told the run had failed, with the reset's reason. The
    reset execution's request joins the one in flight on the same worker: one paid request."""
    with ScriptedModelServer([Hang(2, Reply("first")), Reply("after the reset")]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[], embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = uuid.uuid4().hex
            running = asyncio.ensure_future(agent.arun("go", run_id=run_id))
            await asyncio.to_thread(model.wait_for_requests, 1)
            await _reset_to_last_task(client, run_id)
            result = await asyncio.wait_for(running, 30)
    assert result.status == "completed", result.error
    assert result.final_output == "first"
    assert model.request_count == 1


async def test_a_run_reset_while_its_tool_runs_does_not_run_the_call_again(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A run reset (`temporal workflow reset`, last workflow task) while a tool call runs:
    the reset execution schedules the same call again, and on the worker still running it
    joins that call instead of running the tool a second time (a sync tool's thread cannot
    be stopped, an async one was stopped and started over). A reset after the call's result
    was taken does not run it again either."""
    started, release = threading.Event(), threading.Event()

    @function_tool
    def held_sync(text: str) -> str:
        """Waits until the test lets it answer.

        Args:
            text: Anything.
        """
        started.set()
        release.wait(30)
        ledger_write(ledger, "held_sync", text)
        return f"sync {text}"

    @function_tool
    async def held_async(text: str) -> str:
        """Waits until the test lets it answer.

        Args:
            text: Anything.
        """
        started.set()
        await asyncio.to_thread(release.wait, 30)
        ledger_write(ledger, "held_async", text)
        return f"async {text}"

    script = [
        CallTool("held_sync", {"text": "a"}, id="c1"),
        Reply("after sync"),
        CallTool("held_async", {"text": "b"}, id="c2"),
        Reply("after async"),
        CallTool("held_sync", {"text": "c"}, id="c3"),
        Reply("after the result"),
    ]
    tools = [held_sync, held_async]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=tools, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            for name, answer in [("held_sync", "after sync"), ("held_async", "after async")]:
                started.clear()
                release.clear()
                run_id = uuid.uuid4().hex
                running = asyncio.ensure_future(agent.arun("go", run_id=run_id))
                await asyncio.to_thread(started.wait, 30)
                await _reset_to_last_task(client, run_id)
                release.set()
                result = await asyncio.wait_for(running, 30)
                assert (result.status, result.final_output) == ("completed", answer), result.error
                assert len([e for e in result.events if e.type == "tool_result"]) == 1
                assert [line.split()[0] for line in ledger_lines(ledger)].count(name) == 1
            release.set()
            run_id = uuid.uuid4().hex
            done = await asyncio.wait_for(agent.arun("go", run_id=run_id), 30)
            await _reset_to_last_task(client, run_id)  # after its results: nothing runs
            again = await asyncio.wait_for(agent.aresume(run_id), 30)
            assert again.status == "completed" and again.events == done.events
    assert len(ledger_lines(ledger)) == 3
    assert model.request_count == 6


async def test_malformed_decisions_and_queries_from_a_plain_client_are_refused_clearly(
    client: Client, task_queue: str, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain client's `decide` with null, no argument or a field of another type, and an
    `events` or `signalled_decision` query with an argument of another type, are refused
    naming the field and the shape: they failed inside the handler ("'NoneType' object has
    no attribute 'turn_problem'", "unsupported operand", "Failed decoding arguments"). The
    `events` query answers a page at most EVENTS_QUERY_BYTES, so an answer past gRPC's 4 MB
    cannot fail it for good, and paging from the last reads them all. The run then takes
    its decision."""
    monkeypatch.setattr(policies, "EVENTS_QUERY_BYTES", 1, raising=False)
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            handle = client.get_workflow_handle(paused.run_id)
            refusals = []
            for args in ([None], [], ["x"], [{"call_id": 5, "approved": True}]):
                with pytest.raises(WorkflowUpdateFailedError) as failed:
                    await handle.execute_update("decide", args=args)
                refusals.append(failure_message(failed.value))
            queried = []
            for name, args in (("events", [None]), ("events", ["x"]), ("signalled_decision", [5])):
                with pytest.raises(WorkflowQueryFailedError) as refused:
                    await handle.query(name, args=args)
                queried.append(str(refused.value))
            pages: list[dict[str, Any]] = []
            while page := await handle.query("events", len(pages)):
                assert len(page) == 1  # each event is past the bound: one a page
                pages.extend(page)
            state = await handle.query("state")
            decided = await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay"), 30)
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    shape = 'send one object {"call_id": text, "approved": true or false'
    assert all("refused the decision" in r and shape in r for r in refusals), refusals
    assert "the decision must be an object" in refusals[0]
    assert "no decision came" in refusals[1]
    assert "names a call (call_id, text)" in refusals[3]
    assert all("got None" in q or "got 'x'" in q or "got 5" in q for q in queried), queried
    assert "takes after, the whole-run position" in queried[0]
    assert "takes request_id" in queried[2]
    assert len(pages) == state["events"] and pages[-1]["type"] == "approval_request"
    assert decided["approved"] and done.status == "completed"
    assert len(ledger_lines(ledger)) == 1


async def test_a_start_with_a_signal_the_run_cannot_read_never_wedges_it(
    client: Client, task_queue: str
) -> None:
    """A plain client's signal-with-start of `decide_signal` or the stream's publish with no
    argument (taken in the run's first activation, before its handlers are set) is dropped
    and counted, and the run answers: before, the publish failed every workflow task of the
    run ("guarded() missing 1 required positional argument")."""
    with ScriptedModelServer([Reply("One."), Reply("Two.")]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[])
        async with build_worker(client, [agent], task_queue=task_queue):
            states = []
            for name in (policies.STREAM_PUBLISH_SIGNAL, "decide_signal"):
                handle = await client.start_workflow(
                    "AgentRun",
                    {"agent": "Weather Agent", "input": "hi"},
                    id=f"signal-start-{uuid.uuid4().hex[:8]}",
                    task_queue=task_queue,
                    start_signal=name,
                )
                await unwedged_history(client, handle.id)
                outcome = await handle.result()
                assert outcome["status"] == "completed", outcome
                states.append(await handle.query("state"))
    assert [s["unreadable_signals"] for s in states] == [1, 1], states


async def test_a_run_on_a_queue_no_worker_polls_is_named_to_its_caller_and_in_show(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plain client's start on a task queue no worker polls never fails a task: it waits,
    unstarted. Its caller (resume, here) waited in silence for ever and `show` said only
    'running'; both now name the queue no worker polls and how to go on."""
    monkeypatch.setattr(_stuck, "STUCK_POLL", 0.2)
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    run_id, queue = uuid.uuid4().hex, f"unpolled-{task_queue}"
    await client.start_workflow(
        "AgentRun", {"agent": "Weather Agent", "input": "hi"}, id=run_id, task_queue=queue
    )
    agent = scripted_agent(model, client, task_queue)

    def warned() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if f"Run {run_id} is not moving" in r.getMessage()
        ]

    waiting = asyncio.ensure_future(agent.aresume(run_id))
    try:
        await until(lambda: warned() or waiting.done(), "a warning naming the queue", timeout=20)
        assert not waiting.done(), waiting.result()
        said = warned()[0]
        assert f"waits on task queue {queue!r}, which no worker polls" in said, said
        assert f"--task-queue {queue}" in said and f"--workflow-id {run_id}" in said, said
        env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
        shown = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "agentor_temporal",
                "show",
                run_id,
                "--temporal",
                temporal_address,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "status   running" in shown.stdout, shown.stdout
        assert f"waits on task queue {queue!r}, which no worker polls" in shown.stdout
    finally:
        waiting.cancel()
        with contextlib.suppress(BaseException):
            await waiting
        await client.get_workflow_handle(run_id).terminate("test over")
    assert model.request_count == 0
