"""Callers and followers of a run past Temporal's cap on an execution's updates.

A caller waiting for a run's pause (`run`, `resume`) used to send the
`wait_paused` update every time: two history events and a workflow task per
call, so a service polling a paused run with `resume` grew its history
without end (towards Temporal's 51,200-event limit), and once the server
refused more updates for the execution (2,000 by default), the caller waited
for the run's end and never returned the pause. A follower's stream polls are
updates too: one the server refused stopped following and ended its stream
before the run's end, without an error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateStage
from temporalio.contrib.workflow_streams import PollInput
from temporalio.service import RetryConfig, RPCError

from agentor_temporal import TemporalStore
from agentor_temporal.activities.tooldef import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from conftest import dev_server
from helpers import ledger_lines, payer, scripted_agent, transfer_tool, weather_agent, weather_tool
from integration.test_watchers_and_plain_clients import Asks

PAY = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")
#: updates the server takes per execution in the second test (Temporal's default: 2,000)
UPDATES = 2
#: updates an execution may have in flight (Temporal's default)
IN_FLIGHT = 10
#: the update a stream follower polls with
STREAM_POLL = "__temporal_workflow_stream_poll"


@function_tool
async def page(n: int) -> str:
    """Return a 250 kB page, a moment later.

    Args:
        n: Which page.
    """
    await asyncio.sleep(0.3)  # the followers are all waiting when it comes
    return str(n % 10) * 250_000


async def history_length(client: Client, run_id: str) -> int:
    return len((await client.get_workflow_handle(run_id).fetch_history()).events)


async def test_asking_a_paused_run_again_and_again_leaves_its_history_alone(
    client: Client, task_queue: str, ledger: str
) -> None:
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            before = await history_length(client, paused.run_id)
            for _ in range(20):
                again = await agent.aresume(paused.run_id)
                assert again.status == "awaiting_approval"
                assert [p.call_id for p in again.pending_approvals] == ["call_pay"]
            assert await history_length(client, paused.run_id) == before
            await agent.aapprove(paused.run_id, "call_pay", by="alice")
            done = await agent.aresume(paused.run_id)
    assert done.status == "completed" and done.final_output == "Paid."


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def few_updates() -> AsyncIterator[Client]:
    """A dev server that takes only UPDATES updates per workflow execution (each test its runs)."""
    async with dev_server(f"history.maxTotalUpdates={UPDATES}") as client:
        yield client


async def test_callers_past_the_update_limit_still_get_the_pause(
    few_updates: Client, task_queue: str, ledger: str
) -> None:
    client = few_updates
    started, gate = asyncio.Event(), asyncio.Event()

    @function_tool
    async def prepare(account: str) -> str:
        """Get an account ready.

        Args:
            account: Which account.
        """
        started.set()
        await gate.wait()
        return f"{account} is ready."

    script = [[CallTool("prepare", {"account": "main"}, id="call_prep")], [PAY], Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[prepare, transfer_tool(ledger)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = "pause-polling-limit"
            first = asyncio.ensure_future(agent.arun("Prepare, then pay bob.", run_id=run_id))
            # while the run works, more callers wait for it than it takes updates
            await asyncio.wait_for(started.wait(), 30)
            callers = [asyncio.ensure_future(agent.aresume(run_id)) for _ in range(UPDATES + 1)]
            gate.set()
            async with asyncio.timeout(30):
                results = await asyncio.gather(first, *callers)
    assert [r.status for r in results] == ["awaiting_approval"] * (UPDATES + 2)
    assert all([p.call_id for p in r.pending_approvals] == ["call_pay"] for r in results)


async def test_a_follower_the_stream_refuses_reads_history_to_the_runs_end(
    few_updates: Client, task_queue: str, ledger: str
) -> None:
    client = few_updates
    # quick turns use up the updates; the last tool outlasts the follower's
    # re-subscribing (~4 s), during which the run records nothing new
    cities = ["Oslo", "Rome", "Lima", "slow"]
    script = [CallTool("get_weather", {"city": city}) for city in cities]
    with ScriptedModelServer([*script, Reply("All sunny.")]) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[weather_tool(ledger, delay=6.0, delay_city="slow")],
            embedded_worker=False,
            max_turns=len(cities) + 1,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Weather everywhere.")
            async with asyncio.timeout(60):
                followed = [e async for e in agent.stream(run_id)]
            result = await agent.aresume(run_id)
    assert result.status == "completed" and result.final_output == "All sunny."
    # every event, in order, ending with the run's end
    assert [(e.type, e.turn) for e in followed] == [(e.type, e.turn) for e in result.events]
    assert followed[-1].type == "run_end"


def _two_payments() -> list[Any]:
    return [
        [PAY, CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_eve")],
        Reply("Paid bob."),
    ]


async def test_a_run_past_the_update_limit_still_takes_decisions(
    few_updates: Client, task_queue: str, ledger: str
) -> None:
    """Past Temporal's cap on an execution's updates (every stream follower's poll is one),
    a decision goes by signal: taken as the update would take it, refused as it would be,
    a malformed one refused without harm. Before, no decision could reach the run any
    more: it waited for approval for good."""
    client = few_updates
    with ScriptedModelServer(_two_payments()) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob and eve."), 30)
            assert sorted(p.call_id for p in paused.pending_approvals) == ["call_eve", "call_pay"]
            handle = client.get_workflow_handle(paused.run_id)
            with pytest.raises(RPCError, match="limit"):
                for _ in range(UPDATES + 1):  # the run's caller may have used one
                    await handle.execute_update("wait_paused", result_type=dict)

            decided = await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay", by="al"), 30)
            assert (decided["call_id"], decided["approved"], decided["turn"]) == (
                "call_pay",
                True,
                1,
            )
            with pytest.raises(ValueError, match="already approved by al; the decision stands"):
                await asyncio.wait_for(agent.adeny(paused.run_id, "call_pay", "late"), 30)
            with pytest.raises(ValueError, match="not waiting for turn 2's call 'call_eve'"):
                await asyncio.wait_for(agent.aapprove(paused.run_id, "call_eve", turn=2), 30)
            # a plain client's malformed signals: refused, the run unharmed
            await handle.signal("decide_signal", "nonsense")
            bad = {"call_id": ["call_eve"], "approved": "yes"}
            await handle.signal("decide_signal", {"request_id": "bad-1", "decision": bad})
            async with asyncio.timeout(30):
                while (outcome := await handle.query("signalled_decision", "bad-1")) is None:
                    await asyncio.sleep(0.05)
            assert outcome["type"] == "BadDecision", outcome
            # an integer no float holds (plain JSON may carry one): it raised in the
            # handler, failing every workflow task of the run, for ever
            huge = {"call_id": "call_eve", "approved": True, "at": 10**400}
            await handle.signal("decide_signal", {"request_id": "bad-2", "decision": huge})
            async with asyncio.timeout(30):
                while (outcome := await handle.query("signalled_decision", "bad-2")) is None:
                    await asyncio.sleep(0.05)
            assert "at must be a time in seconds since the epoch" in outcome["refused"], outcome

            await asyncio.wait_for(agent.adeny(paused.run_id, "call_eve", "not eve"), 30)
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    assert done.status == "completed" and done.final_output == "Paid bob."
    assert [line.split()[-2:] for line in ledger_lines(ledger)] == [["5000.0", "bob"]]
    decisions = [
        (e.call_id, e.status, e.result) for e in done.events if e.type == "approval_decision"
    ]
    assert decisions == [("call_pay", "approved", "al"), ("call_eve", "denied", None)]


async def test_a_run_with_more_followers_than_updates_in_flight_still_takes_decisions(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Temporal lets an execution have 10 updates in flight, and each follower of a paused
    run holds one (its poll waits for the run's next event): with ten watching (ten tabs
    of the page, say) a decision by update was refused, and none could be taken. Now it
    goes by signal, once the client has stopped retrying the update (its default retries
    take ~15 s; this test's client retries once)."""
    impatient = await Client.connect(
        client.service_client.config.target_host, retry_config=RetryConfig(max_retries=1)
    )
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, impatient, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 30)
            ahead = len(paused.events) + 100  # nothing there yet: each poll waits
            handle = client.get_workflow_handle(paused.run_id)
            # ten followers' polls, as the stream client sends them, each accepted
            polls = [
                await handle.start_update(
                    STREAM_POLL,
                    PollInput(topics=["events"], from_offset=ahead),
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                )
                for _ in range(IN_FLIGHT)
            ]
            decided = await asyncio.wait_for(agent.aapprove(paused.run_id, "call_pay"), 60)
            assert decided["approved"] and decided["call_id"] == "call_pay"
            # the run's next events answer the polls
            async with asyncio.timeout(30):
                await asyncio.gather(*(p.result() for p in polls))
            done = await asyncio.wait_for(agent.aresume(paused.run_id), 30)
    assert done.status == "completed" and done.final_output == "Paid."
    assert [line.split()[-2:] for line in ledger_lines(ledger)] == [["5000.0", "bob"]]


@dataclass
class SayThenCall:
    """A reply that streams `text`, then asks for `calls` (one assistant message)."""

    text: str
    calls: list[CallTool]


class TalkativeModel(ScriptedModelServer):
    """The scripted model, plus replies with both text and tool calls."""

    @staticmethod
    def _message(step: Any) -> dict[str, Any]:
        if not isinstance(step, SayThenCall):
            return ScriptedModelServer._message(step)
        message = ScriptedModelServer._message(step.calls)
        return {**message, "content": step.text}


async def test_a_decision_after_a_watched_streamed_reply_is_taken(
    few_updates: Client, task_queue: str, ledger: str
) -> None:
    """A reply streamed to followers, then asking for approval, can still be approved.

    What a user sees (with Temporal's default of 2,000 updates per
    execution): a model that talks for a minute or two to a few followers
    (the page, SSE or A2A streams with text) before asking for an approval
    leaves a run whose every approve fails with "limit on the total number of
    distinct updates in this workflow has been reached"; it waits for ever
    (only terminate ends it).
    """
    client = few_updates
    words = " ".join(f"word{i}" for i in range(40))
    script = [SayThenCall(f"Let me think. {words}", [PAY]), Reply("Paid.")]
    with TalkativeModel(script, chunk_delay=0.05) as model:
        options: dict[str, Any] = dict(
            base_url=model.base_url,
            task_queue=task_queue,
            tools=[transfer_tool(ledger)],
            embedded_worker=False,
        )
        agent = weather_agent(temporal=client, **options)
        asks = Asks()
        watcher = weather_agent(
            temporal=Client(**{**client.config(), "interceptors": [asks]}), **options
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Pay bob.", stream_text=True)
            deltas = 0

            async def follow() -> None:
                nonlocal deltas
                async for event in watcher.stream(run_id, text=True):
                    deltas += event.type == "text_delta"

            follower = asyncio.ensure_future(follow())
            paused = await asyncio.wait_for(agent.aresume(run_id), 30)
            assert paused.status == "awaiting_approval"
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            # what makes this case: the execution's updates are used up (by
            # the follower's polls, and the wait for the pause)
            history = await client.get_workflow_handle(run_id).fetch_history()
            accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            assert sum(e.event_type == accepted for e in history.events) >= UPDATES
            assert asks.polls >= 1, "the follower never polled"
            refused: str | None = None
            try:
                decided = await asyncio.wait_for(agent.aapprove(run_id, "call_pay"), 30)
            except ValueError as exc:
                refused = str(exc)
            # reported outside the handler, without the refusal's traceback:
            # pytest 8 on CPython 3.11.7 crashed formatting it (INTERNALERROR,
            # "AST constructor recursion depth mismatch"), ending the session
            assert refused is None, f"the decision was refused: {refused}"
            assert decided["approved"]
            done = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert done.status == "completed" and done.final_output == "Paid."
    assert len(ledger_lines(ledger)) == 1


async def test_ten_followers_of_a_run_of_large_results_do_not_end_it(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten followers, turns of four 250 kB results: the run completes, each follower gets it all.

    Every waiting poll was answered in the workflow task that recorded the
    results, each with up to 1 MB of them: the task's completion passed
    gRPC's 4 MB and Temporal terminated the run (GrpcMessageTooLarge). Past
    its share of the execution's history (lowered here to 6 MB) a follower
    reads history instead, and gets the same events.
    """
    monkeypatch.setattr(policies, "POLL_BYTES_PER_EXECUTION", 6_000_000, raising=False)
    script: list[Any] = [[CallTool("page", {"n": 4 * t + k}) for k in range(4)] for t in range(3)]
    script.append(Reply("Read them all."))
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False, tools=[page])
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Read twelve pages.")

            async def follow() -> list[str]:
                return [e.type async for e in agent.stream(run_id)]

            seen = await asyncio.wait_for(asyncio.gather(*(follow() for _ in range(10))), 120)
        result = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert result.status == "completed" and result.final_output == "Read them all."
    assert all(types == [e.type for e in result.events] for types in seen)
    segments = await TemporalStore(client).segments(run_id)
    for segment in segments:
        handle = client.get_workflow_handle(run_id, run_id=segment.execution_run_id)
        history = await handle.fetch_history()
        assert sum(e.ByteSize() for e in history.events) < 15_000_000


async def test_ten_callers_waiting_for_a_wide_turns_pause_do_not_end_it(
    client: Client, task_queue: str
) -> None:
    """Ten callers wait while the model asks for 500 calls a person must approve (half a
    MB of arguments): the run pauses, and every caller gets the whole pause.

    Every caller's `wait_paused` was answered in the one workflow task that
    paused the run, each with every call's arguments: ten answers passed
    gRPC's 4 MB, the task failed as GrpcMessageTooLarge and Temporal
    terminated the run. Past the task's share the answers leave out what does
    not fit, and their callers read the pause by query.
    """
    started, gate = asyncio.Event(), asyncio.Event()

    @function_tool
    async def prepare(account: str) -> str:
        """Get an account ready.

        Args:
            account: Which account.
        """
        started.set()
        await gate.wait()
        return f"{account} is ready."

    @function_tool(requires_approval=True)
    def release(n: int, note: str) -> str:
        """Release one item (a person approves each).

        Args:
            n: Which item.
            note: Why.
        """
        return f"released {n}"

    count = policies.MAX_CALLS_PER_REPLY
    note = "n" * (policies.MAX_REPLY_BYTES // count - 150)
    wide = [CallTool("release", {"n": n, "note": note}, id=f"call_{n}") for n in range(count)]
    script = [[CallTool("prepare", {"account": "main"}, id="call_prep")], wide, Reply("Done.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[prepare, release], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = f"wide-pause-{task_queue}"
            first = asyncio.ensure_future(agent.arun("Prepare, then release all.", run_id=run_id))
            # while the run works, as many callers wait for it as it takes updates at once
            await asyncio.wait_for(started.wait(), 30)
            callers = [asyncio.ensure_future(agent.aresume(run_id)) for _ in range(IN_FLIGHT - 1)]
            handle = client.get_workflow_handle(run_id)
            accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            async with asyncio.timeout(30):
                while (
                    sum(e.event_type == accepted for e in (await handle.fetch_history()).events)
                    < IN_FLIGHT
                ):
                    await asyncio.sleep(0.05)
            gate.set()
            async with asyncio.timeout(60):
                results = await asyncio.gather(first, *callers)
            description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.RUNNING
    assert [r.status for r in results] == ["awaiting_approval"] * IN_FLIGHT
    for result in results:
        pending = sorted(result.pending_approvals, key=lambda p: int(p.call_id[5:]))
        assert [p.call_id for p in pending] == [f"call_{n}" for n in range(count)]
        assert all(p.args == {"n": n, "note": note} for n, p in enumerate(pending))
