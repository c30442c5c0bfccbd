"""A retried activity joins its earlier attempt in the same worker instead of calling again."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref
from datetime import datetime, timedelta, timezone

import pytest
from temporalio.activity import ActivityCancellationDetails
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from agentor_temporal.activities import _joining
from agentor_temporal.activities._joining import LiveCalls


def _attempt(n: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_id="run-1", workflow_run_id="exec-1", activity_id="generate-1", attempt=n
    )
    return env


class _Model:
    """Counts calls; each waits until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def ask(self) -> str:
        self.calls += 1
        await self.release.wait()
        return f"answer {self.calls}"


async def test_a_retry_joins_the_call_its_timed_out_attempt_left_running() -> None:
    """Attempt 1 timed out by the server while its call runs: attempt 2 waits for that call."""
    calls, model = LiveCalls(), _Model()
    first = _attempt(1)
    one = asyncio.ensure_future(first.run(calls.run, model.ask))
    await asyncio.sleep(0.01)
    first.cancel(ActivityCancellationDetails(timed_out=True))
    # ends quietly: the SDK logged a CancelledError here as a failure, with its traceback
    with pytest.raises(ApplicationError) as ended:
        await one
    assert ended.value.category == ApplicationErrorCategory.BENIGN
    two = asyncio.ensure_future(_attempt(2).run(calls.run, model.ask))
    await asyncio.sleep(0.01)
    model.release.set()
    assert await asyncio.wait_for(two, 2) == "answer 1"
    assert model.calls == 1 and calls.joined == 1


async def test_a_retry_takes_the_result_of_a_call_that_already_finished() -> None:
    """A completion that reached the server too late is not a reason to ask again."""
    calls, model = LiveCalls(), _Model()
    model.release.set()
    assert await _attempt(1).run(calls.run, model.ask) == "answer 1"
    assert await _attempt(2).run(calls.run, model.ask) == "answer 1"
    assert model.calls == 1


async def test_a_cancelled_run_cancels_the_call() -> None:
    """A cancel the workflow asked for stops the call; a later attempt calls afresh."""
    calls, model = LiveCalls(), _Model()
    first = _attempt(1)
    one = asyncio.ensure_future(first.run(calls.run, model.ask))
    await asyncio.sleep(0.01)
    first.cancel()  # cancel requested
    with pytest.raises(asyncio.CancelledError):
        await one
    model.release.set()
    assert await _attempt(2).run(calls.run, model.ask) == "answer 2"
    assert model.calls == 2


async def test_a_failed_call_is_made_again() -> None:
    """Only a live or successful call is joined; a failure (a 503, say) is retried for real."""
    calls = LiveCalls()
    outcomes = [RuntimeError("503"), "ok"]

    async def flaky() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with pytest.raises(RuntimeError):
        await _attempt(1).run(calls.run, flaky)
    assert await _attempt(2).run(calls.run, flaky) == "ok"


async def test_finished_calls_are_forgotten() -> None:
    """Results are kept only long enough for a retry to find them."""
    calls, model = LiveCalls(keep=0.05), _Model()
    model.release.set()
    await _attempt(1).run(calls.run, model.ask)
    assert len(calls) == 1
    deadline = asyncio.get_running_loop().time() + 2
    while len(calls) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert len(calls) == 0


async def test_a_local_answer_outlives_keep_for_the_task_run_again() -> None:
    """A lost workflow task's rerun waits in the queue behind the worker's backlog (35-62 s
    measured, past KEEP): its local request, asked again as a first attempt, takes the
    answer the worker holds. Other calls' results go after KEEP."""
    calls, model = LiveCalls(keep=0.05, local_keep=3600), _Model()
    model.release.set()
    assert await _local(1).run(calls.run, model.ask) == "answer 1"
    tool = _attempt(1)
    tool.info = dataclasses.replace(tool.info, activity_id="tool-1-0")
    await tool.run(calls.run, model.ask)
    deadline = asyncio.get_running_loop().time() + 5
    while len(calls) > 1 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert len(calls) == 1  # the tool call's result went after KEEP
    assert await _local(1).run(calls.run, model.ask) == "answer 1"
    assert model.calls == 2 and calls.joined == 1


async def test_an_ended_execution_s_finished_calls_are_forgotten_at_once() -> None:
    """Its end means no retry of its calls can come: their results go, running calls stay."""
    calls, model = LiveCalls(), _Model()
    model.release.set()
    await _attempt(1).run(calls.run, model.ask)
    other = _attempt(1)
    other.info = dataclasses.replace(other.info, workflow_run_id="exec-2")
    await other.run(calls.run, model.ask)
    held = _Model()
    running = _attempt(1)
    running.info = dataclasses.replace(running.info, activity_id="generate-2")
    live = asyncio.ensure_future(running.run(calls.run, held.ask))
    while held.calls == 0:
        await asyncio.sleep(0.01)
    assert len(calls) == 3
    assert calls.forget_execution("run-1", "exec-1") == 1
    assert len(calls) == 2  # exec-2's result and the running call
    held.release.set()
    assert await asyncio.wait_for(live, 2) == "answer 1"


async def test_a_forgotten_call_s_result_is_freed_before_its_keep_ends() -> None:
    """Nothing but the joinable entry holds a finished call (its keep timer neither)."""

    class Answer:
        pass

    calls = LiveCalls(keep=3600)

    async def ask() -> Answer:
        return Answer()

    answer = weakref.ref(await _attempt(1).run(calls.run, ask))
    assert answer() is not None
    deadline = asyncio.get_running_loop().time() + 2
    while answer() is not None and asyncio.get_running_loop().time() < deadline:
        calls.forget_execution("run-1", "exec-1")  # once its done callbacks ran
        gc.collect()
        await asyncio.sleep(0.01)
    assert answer() is None


async def test_an_attempt_that_arrives_after_its_heartbeat_timeout_does_not_call() -> None:
    """The server gave up on it before Python started it: calling would be paid for nothing."""
    calls, model = LiveCalls(), _Model()
    model.release.set()
    late = _attempt(1)
    late.info = dataclasses.replace(
        late.info,
        heartbeat_timeout=timedelta(seconds=5),
        started_time=datetime.now(timezone.utc) - timedelta(seconds=9),
    )
    with pytest.raises(ApplicationError, match="after its heartbeat timeout"):
        await late.run(calls.run, model.ask)
    on_time = _attempt(2)
    on_time.info = dataclasses.replace(
        on_time.info,
        heartbeat_timeout=timedelta(seconds=5),
        started_time=datetime.now(timezone.utc),
    )
    assert await on_time.run(calls.run, model.ask) == "answer 1"
    assert model.calls == 1


async def test_a_late_third_attempt_calls_all_the_same() -> None:
    """A worker clock far ahead of the server's must not turn every attempt away."""
    calls, model = LiveCalls(), _Model()
    model.release.set()
    skewed = _attempt(3)
    skewed.info = dataclasses.replace(
        skewed.info,
        heartbeat_timeout=timedelta(seconds=5),
        started_time=datetime.now(timezone.utc) - timedelta(seconds=60),
    )
    assert await skewed.run(calls.run, model.ask) == "answer 1"


async def test_an_attempt_timed_out_while_it_mirrors_ends_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call_tool attempt the server gives up on while its events are mirrored (a heartbeat
    timeout while Temporal throttles) ends as a benign error, not a CancelledError the SDK
    logged as a failure with its traceback (seen with frontend.namespaceRPS=1)."""
    from agentor_temporal.activities import bundle
    from agentor_temporal.activities.bundle import AgentActivities
    from agentor_temporal.activities.registry import AgentRegistry
    from agentor_temporal.workflows.activity_types import CallToolInput, JournalInput

    async def known(*args: object) -> None:
        return None

    mirroring = asyncio.Event()

    async def mirror_folded(*args: object) -> int:
        mirroring.set()
        await asyncio.sleep(60)  # reading history from a server that throttles
        return 0

    monkeypatch.setattr(bundle, "definition_for", known)
    monkeypatch.setattr(bundle._journal, "mirror_folded", mirror_folded)
    activities = AgentActivities(AgentRegistry([]))
    journal = JournalInput(run_id="run-1", agent="a", mirror=True, start=0, events=[], new_from=0)
    inp = CallToolInput(run_id="run-1", agent="a", call_id="c1", name="t", args={}, journal=journal)
    env = _attempt(1)
    call = asyncio.ensure_future(env.run(activities.call_tool, inp))
    await asyncio.wait_for(mirroring.wait(), 5)
    env.cancel(ActivityCancellationDetails(timed_out=True))
    with pytest.raises(ApplicationError) as ended:
        await asyncio.wait_for(call, 5)
    assert ended.value.category == ApplicationErrorCategory.BENIGN
    assert "The server gave up on this attempt of t()" in ended.value.message


def _local(n: int) -> ActivityEnvironment:
    env = _attempt(n)
    env.info = dataclasses.replace(env.info, is_local=True, heartbeat_timeout=None)
    return env


async def test_a_dropped_local_request_is_joined_by_its_rerun_or_stopped_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local request's attempt cancelled (its workflow task dropped, or its run cancelled):
    the rerun task's first attempt joins it; unjoined, it is stopped after the grace."""
    monkeypatch.setattr(_joining, "LOCAL_REJOIN_GRACE", 0.2)
    calls, model = LiveCalls(), _Model()
    first = _local(1)
    one = asyncio.ensure_future(first.run(calls.run, model.ask))
    await asyncio.sleep(0.01)
    first.cancel(ActivityCancellationDetails(cancel_requested=True))
    with pytest.raises(asyncio.CancelledError):
        await one
    # the rerun task asks again, as a first attempt: it joins the request still out
    two = asyncio.ensure_future(_local(1).run(calls.run, model.ask))
    await asyncio.sleep(0.3)  # past the grace: joined, so not stopped
    model.release.set()
    assert await asyncio.wait_for(two, 2) == "answer 1"
    assert model.calls == 1 and calls.joined == 1

    # no task asks again (the run was cancelled): stopped once the grace is over
    other = _local(1)
    other.info = dataclasses.replace(other.info, activity_id="generate-2")
    model.release.clear()
    three = asyncio.ensure_future(other.run(calls.run, model.ask))
    await asyncio.sleep(0.01)
    other.cancel(ActivityCancellationDetails(cancel_requested=True))
    with pytest.raises(asyncio.CancelledError):
        await three
    await asyncio.sleep(0.4)
    again = _local(1)
    again.info = dataclasses.replace(again.info, activity_id="generate-2")
    model.release.set()
    assert await asyncio.wait_for(again.run(calls.run, model.ask), 2) == "answer 3"
    assert model.calls == 3


async def test_a_late_attempt_s_answer_outlives_keep_for_its_retry() -> None:
    """Measured at 1,000 runs in flight on 2 overloaded cores: a model request's attempt 1
    finished past its heartbeat timeout (the worker too busy to beat), its completion
    refused, and attempt 2 started 38 s later, behind the worker's backlog in the task
    queue, past KEEP: it asked the model again. An answer that came after half the
    attempt's heartbeat timeout stays as long as a local one; one in good time goes
    after KEEP."""
    calls, model = LiveCalls(keep=0.05, local_keep=3600), _Model()
    model.release.set()
    late = _attempt(1)
    started = datetime.now(timezone.utc) - timedelta(seconds=4)
    late.info = dataclasses.replace(
        late.info, heartbeat_timeout=timedelta(seconds=5), started_time=started
    )
    assert await late.run(calls.run, model.ask) == "answer 1"
    prompt = _attempt(1)
    prompt.info = dataclasses.replace(
        prompt.info,
        activity_id="generate-2",
        heartbeat_timeout=timedelta(seconds=60),  # done well within half of it, under any load
        started_time=datetime.now(timezone.utc),
    )
    assert await prompt.run(calls.run, model.ask) == "answer 2"
    deadline = asyncio.get_running_loop().time() + 5
    while len(calls) > 1 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # past KEEP several times over
    assert len(calls) == 1  # the answer in good time went after KEEP
    assert await _attempt(2).run(calls.run, model.ask) == "answer 1"
    assert model.calls == 2 and calls.joined == 1


async def test_an_answer_whose_attempt_the_server_gave_up_on_outlives_keep() -> None:
    """The server timed attempt 1 out while its call ran: the retry, however long it waits
    in the queue, takes the answer."""
    calls, model = LiveCalls(keep=0.05, local_keep=3600), _Model()
    first = _attempt(1)
    one = asyncio.ensure_future(first.run(calls.run, model.ask))
    await asyncio.sleep(0.01)
    first.cancel(ActivityCancellationDetails(not_found=True))
    with pytest.raises(ApplicationError):
        await one
    model.release.set()
    await asyncio.sleep(0.3)  # the call finished, and KEEP passed several times over
    assert await _attempt(2).run(calls.run, model.ask) == "answer 1"
    assert model.calls == 1
