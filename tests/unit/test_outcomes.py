"""Whose failure is it: the tool's or model's own outcome is final, our machinery's never is.

Activities through `ActivityEnvironment`, against the scripted model server.
A tool's return, raise (even an unprintable one) and timeout answer the model
and are not raised (Temporal would run the tool again); a pool that refuses
work or a worker that stops is raised as retryable `WorkerStopping`, never
answered. A model reply that is malformed fails clearly and quickly; an error
of our own code is not retried as if the provider were down; text is made
encodable before it is sent; secrets never appear in an error.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentor_temporal.activities import AgentActivities, AgentDefinition, AgentRegistry
from agentor_temporal.activities import _tool_running as tool_running
from agentor_temporal.activities import function_tool as tool
from agentor_temporal.testing import Fail, Raw, Reply, ScriptedModelServer
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import CallToolInput, GenerateInput

CALLS: list[str] = []


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no string for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


@tool(timeout=0.3)
def slow_sync() -> str:
    """Sleeps past its timeout in a thread."""
    CALLS.append("slow_sync")
    time.sleep(1.0)
    CALLS.append("slow_sync finished")
    return "late"


@tool(timeout=0.3)
async def slow_async() -> str:
    """Sleeps past its timeout on the loop."""
    CALLS.append("slow_async")
    await asyncio.sleep(5)
    return "late"


GATE = threading.Event()


@tool(timeout=10)
def gated_sync() -> str:
    """Works in a thread until GATE opens (a payment: it cannot be stopped)."""
    CALLS.append("gated_sync")
    GATE.wait(10)
    CALLS.append("gated_sync finished")
    return "paid"


#: what `cancelled_as_it_starts` calls from its thread the moment it starts
AT_START: list[Any] = []


@tool(timeout=10)
def cancelled_as_it_starts() -> str:
    """Its run is cancelled the moment its thread starts it; it finishes all the same."""
    AT_START[0]()
    time.sleep(0.3)
    CALLS.append("cancelled_as_it_starts finished")
    return "done"


@tool
def unprintable() -> str:
    """Raises an exception that cannot be printed."""
    CALLS.append("unprintable")
    raise Unprintable()


@tool
def exits() -> str:
    """Calls sys.exit."""
    CALLS.append("exits")
    raise SystemExit(3)


@tool(retries=2)
def flaky() -> str:
    """Fails; asks for two retries."""
    CALLS.append("flaky")
    raise ConnectionError("backend down")


@tool
def echo(text: str) -> str:
    """Echoes."""
    CALLS.append("echo")
    return text


def acts(base_url: str = "http://unused", api_key: str = "k", **kw: Any) -> AgentActivities:
    agent = AgentDefinition(
        name="A",
        model="m",
        tools=[
            slow_sync,
            slow_async,
            gated_sync,
            cancelled_as_it_starts,
            unprintable,
            exits,
            flaky,
            echo,
        ],
        base_url=base_url,
        api_key=api_key,
        **kw,
    )
    return AgentActivities(AgentRegistry([agent]))


def call(name: str, **args: Any) -> CallToolInput:
    return CallToolInput("r", "A", f"call-{name}", name, args)


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLS.clear()
    GATE.clear()


# -- tools: the tool's own outcome is its answer ---------------------------------------


@pytest.mark.parametrize("name", ["slow_sync", "slow_async"])
async def test_a_timeout_is_the_tools_answer_not_a_retry(name: str) -> None:
    """Past its timeout a call answers "timed out" at once; the activity does not fail."""
    started = time.monotonic()
    result = await ActivityEnvironment().run(acts().call_tool, call(name))
    assert time.monotonic() - started < 0.9
    said = f"{name} timed out after 0.3 s"
    if name == "slow_sync":  # a thread cannot be stopped: the model is told it may run on
        said += (
            "; its thread is still running and was abandoned (it may still have effects; "
            "its result will be discarded)"
        )
    assert result.error == said
    assert result.result == f"Error: {said}"
    assert CALLS[:1] == [name]


async def test_a_timed_out_sync_tool_runs_on_in_its_thread_then_is_discarded() -> None:
    """The documented behaviour: the thread finishes in the background; its result is dropped."""
    result = await ActivityEnvironment().run(acts().call_tool, call("slow_sync"))
    assert result.error is not None and "timed out" in result.error
    deadline = time.monotonic() + 5
    while "slow_sync finished" not in CALLS and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert CALLS == ["slow_sync", "slow_sync finished"]


@pytest.mark.parametrize(
    "name, error",
    [("unprintable", "Unprintable: <unprintable Unprintable>"), ("exits", "SystemExit: 3")],
)
async def test_whatever_a_tool_raises_is_its_answer(name: str, error: str) -> None:
    """Even an exception whose __str__ raises, or SystemExit, answers the model once."""
    result = await ActivityEnvironment().run(acts().call_tool, call(name))
    assert result.error == error and result.result == f"Error: {error}"
    assert CALLS == [name]


async def test_retries_are_opt_in_and_bounded() -> None:
    """retries=2: attempts 1 and 2 raise (Temporal retries), attempt 3's error is the answer."""
    for attempt in (1, 2):
        env = ActivityEnvironment()
        env.info = _info(attempt=attempt)
        with pytest.raises(ApplicationError) as info:
            await env.run(acts().call_tool, call("flaky"))
        assert not info.value.non_retryable and info.value.type == "ToolFailed"
        assert f"(attempt {attempt} of 3)" in info.value.message
    env = ActivityEnvironment()
    env.info = _info(attempt=3)
    result = await env.run(acts().call_tool, call("flaky"))
    assert result.error == "ConnectionError: backend down"
    assert CALLS == ["flaky"] * 3


# -- tools: our machinery's failure is never an answer -------------------------------


async def test_a_pool_that_refuses_work_hands_the_call_back() -> None:
    """The sync-tool pool shut down (the interpreter exits): retryable, not run, not answered."""
    activities = acts()
    activities.registry.tool_pool().shutdown()
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(activities.call_tool, call("echo", text="hi"))
    assert info.value.type == "WorkerStopping" and not info.value.non_retryable
    assert "cannot schedule new futures" in info.value.message
    assert CALLS == []


async def test_a_worker_shutdown_cancel_hands_the_call_back() -> None:
    """A call cancelled because its worker stops is retryable, not the tool's answer."""
    env = ActivityEnvironment()
    env.cancellation_details = _cancellation(worker_shutdown=True)  # type: ignore[attr-defined]
    task = asyncio.ensure_future(env.run(acts().call_tool, call("slow_async")))
    await asyncio.sleep(0.05)
    env.cancel(cancellation_details=activity.ActivityCancellationDetails(worker_shutdown=True))
    with pytest.raises(ApplicationError) as info:
        await task
    assert info.value.type == "WorkerStopping" and not info.value.non_retryable


async def test_a_cancel_the_run_asked_for_stays_a_cancel() -> None:
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts().call_tool, call("slow_async")))
    await asyncio.sleep(0.05)
    env.cancel(cancellation_details=activity.ActivityCancellationDetails(cancel_requested=True))
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_sync_call_its_run_cancels_finishes_and_answers() -> None:
    """A thread cannot be stopped: the call's outcome is waited for and returned.

    The run waits for it (WAIT_CANCELLATION_COMPLETED) and records it, so
    `resume` does not run the tool again.
    """
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts().call_tool, call("gated_sync")))
    await asyncio.to_thread(_until, lambda: "gated_sync" in CALLS)
    env.cancel(cancellation_details=activity.ActivityCancellationDetails(cancel_requested=True))
    await asyncio.sleep(0.2)
    assert not task.done()  # waiting for the thread, not abandoning it
    GATE.set()
    result = await asyncio.wait_for(task, 10)
    assert result.result == "paid" and result.error is None
    assert [c for c in CALLS if c.startswith("gated")] == ["gated_sync", "gated_sync finished"]


async def test_a_sync_call_its_run_cancels_as_a_thread_starts_it_finishes_and_answers() -> None:
    """The cancel lands before the loop has seen the thread start the call: it is still
    waited for (before, it was abandoned there, and its result dropped)."""
    env = ActivityEnvironment()
    loop = asyncio.get_running_loop()
    details = activity.ActivityCancellationDetails(cancel_requested=True)
    AT_START[:] = [lambda: loop.call_soon_threadsafe(lambda: env.cancel(details))]
    result = await asyncio.wait_for(env.run(acts().call_tool, call("cancelled_as_it_starts")), 10)
    assert result.result == "done" and result.error is None
    # (an earlier test's abandoned slow_sync thread may still add its line)
    assert [c for c in CALLS if c.startswith("cancelled")] == ["cancelled_as_it_starts finished"]


async def test_a_sync_call_still_running_past_the_cancel_grace_is_answered_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cancel is not held up for ever by a tool that hangs: past CANCEL_GRACE the call is
    abandoned and answered "still running", which the run records before it closes."""
    monkeypatch.setattr(tool_running, "CANCEL_GRACE", timedelta(seconds=0.3))
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts().call_tool, call("gated_sync")))
    await asyncio.to_thread(_until, lambda: "gated_sync" in CALLS)
    env.cancel(cancellation_details=activity.ActivityCancellationDetails(cancel_requested=True))
    result = await asyncio.wait_for(task, 5)
    GATE.set()
    assert result.error is not None
    assert "gated_sync was still running 0.3 s after its run was cancelled" in result.error
    assert "may still have effects" in result.result


async def test_a_sync_call_its_worker_stops_is_handed_back_at_once() -> None:
    """A worker stopping does not wait for the thread: the call goes back to Temporal."""
    env = ActivityEnvironment()
    env.cancellation_details = _cancellation(worker_shutdown=True)  # type: ignore[attr-defined]
    task = asyncio.ensure_future(env.run(acts().call_tool, call("gated_sync")))
    await asyncio.to_thread(_until, lambda: "gated_sync" in CALLS)
    env.cancel(cancellation_details=activity.ActivityCancellationDetails(worker_shutdown=True))
    with pytest.raises(ApplicationError) as info:
        await asyncio.wait_for(task, 5)
    assert info.value.type == "WorkerStopping"
    GATE.set()


def _until(check: Any, limit: float = 10) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- the model: malformed replies, our own errors, encodable text, secrets ---------------


def request(**kw: Any) -> GenerateInput:
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return GenerateInput(run_id="r", agent="A", model="m", **kw)


@pytest.mark.parametrize(
    "body, what",
    [
        ({"id": "x", "object": "chat.completion", "choices": []}, "no choices"),
        ({"id": "x", "choices": [{"index": 0}]}, "has no message"),
        (
            {"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c"}]}}]},
            "tool call 0 has no function name",
        ),
        ({"choices": [{"message": {"role": "assistant", "content": 7}}]}, "not text"),
        ("<html>bad gateway</html>", "malformed"),
        ("not json at all", "malformed"),
    ],
)
async def test_a_malformed_reply_fails_clearly_and_is_retried_only_briefly(
    body: Any, what: str
) -> None:
    with ScriptedModelServer([Raw(body), Raw(body)]) as model:
        env = ActivityEnvironment()
        with pytest.raises(ApplicationError) as info:
            await env.run(acts(model.base_url).generate, request())
        assert info.value.type == "ModelReplyMalformed" and not info.value.non_retryable
        assert what in info.value.message
        assert info.value.next_retry_delay == policies.MALFORMED_REPLY_RETRY_DELAY
        # once the short budget is spent, the same reply is final
        env = ActivityEnvironment()
        env.info = _info(attempt=4, waited=policies.MALFORMED_REPLY_BUDGET + timedelta(seconds=1))
        with pytest.raises(ApplicationError) as info:
            await env.run(acts(model.base_url).generate, request())
        assert info.value.non_retryable and what in info.value.message


async def test_lone_surrogates_are_sent_as_replacement_characters() -> None:
    """A tool result decoded with surrogateescape must not poison every request."""
    with ScriptedModelServer([Reply("ok")]) as model:
        messages = [
            {"role": "user", "content": "list files"},
            {"role": "tool", "tool_call_id": "c", "content": "report-\udcff.txt \ud83d\ude00"},
        ]
        result = await ActivityEnvironment().run(
            acts(model.base_url).generate, request(messages=messages)
        )
        sent = model.requests[0]["messages"][1]["content"]
    assert result.text == "ok"
    assert sent == "report-\ufffd.txt \U0001f600"


async def test_an_error_of_our_own_code_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug building the request fails at once, saying so, instead of five minutes of retries."""
    from agentor_temporal.activities import model as model_module

    def broken(*args: Any) -> Any:
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(model_module, "prepared_request", broken)
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts().generate, request())
    assert info.value.non_retryable and info.value.type == "AgentorInternalError"
    assert "not a provider outage" in info.value.message
    assert "UnicodeEncodeError" in info.value.message


async def test_unknown_model_settings_fail_at_once() -> None:
    with ScriptedModelServer([Reply("never")]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(
                acts(model.base_url).generate, request(model_settings={"no_such_setting": 1})
            )
    assert info.value.non_retryable and "no_such_setting" in info.value.message


async def test_provider_failures_become_final_after_the_budget() -> None:
    with ScriptedModelServer([Fail(503, "busy"), Fail(503, "busy")]) as model:
        env = ActivityEnvironment()
        with pytest.raises(ApplicationError) as info:
            await env.run(acts(model.base_url).generate, request())
        assert not info.value.non_retryable
        env = ActivityEnvironment()
        env.info = _info(attempt=20, waited=policies.MODEL_RETRY_BUDGET + timedelta(seconds=1))
        with pytest.raises(ApplicationError) as info:
            await env.run(acts(model.base_url).generate, request())
        assert info.value.non_retryable and "minutes of retries" in info.value.message


async def test_errors_never_carry_credentials_or_the_key() -> None:
    """URL userinfo and query values are masked, and a body echoing the key is masked too."""
    key = "sk-live-abcdef0123456789"
    with ScriptedModelServer([Fail(401, f"Incorrect API key provided: {key}")]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(acts(model.base_url, api_key=key).generate, request())
    assert key not in info.value.message
    assert "Incorrect API key provided: ***" in info.value.message
    with ScriptedModelServer() as model:
        # the client glues a query into the path, and the server echoes the path
        url = model.base_url.replace("http://", "http://alice:hunter22@") + "?api-key=QUERYSECRET"
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(acts(url).generate, request())
    assert "QUERYSECRET" not in info.value.message and "hunter22" not in info.value.message
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://alice:hunter22@127.0.0.1:{port}/v1?api-key=QUERYSECRET"
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts(url).generate, request())
    message = info.value.message
    assert "unreachable at http://***@127.0.0.1" in message
    assert "hunter22" not in message and "alice" not in message and "QUERYSECRET" not in message


# -- definitions: another agent of the same name never runs the run's tasks -------------


async def test_a_different_definition_leaves_the_task_then_fails_it() -> None:
    runs = acts()
    other = AgentDefinition(name="A", model="m", tools=[echo], api_key="k")
    recorded = runs.registry.get("A").fingerprint()
    assert other.fingerprint() != recorded
    elsewhere = AgentActivities(AgentRegistry([other]))
    inp = CallToolInput("r", "A", "c1", "echo", {"text": "hi"}, fingerprint=recorded)
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(elsewhere.call_tool, inp)
    assert info.value.type == "AgentDefinitionMismatch" and not info.value.non_retryable
    assert "built differently" in info.value.message and "left for a worker" in info.value.message
    env = ActivityEnvironment()
    env.info = _info(attempt=50, waited=policies.DEFINITION_PATIENCE + timedelta(seconds=1))
    with pytest.raises(ApplicationError) as info:
        await env.run(elsewhere.generate, request(fingerprint=recorded))
    assert info.value.non_retryable and "the run stops rather than mix definitions" in (
        info.value.message
    )
    assert CALLS == []
    # the run's own definition runs it
    done = await ActivityEnvironment().run(runs.call_tool, inp)
    assert done.result == "hi"


# -- helpers ---------------------------------------------------------------------------


def _info(attempt: int = 1, waited: timedelta = timedelta(0)) -> activity.Info:
    import dataclasses

    base = ActivityEnvironment().info
    now = datetime.now(timezone.utc)
    return dataclasses.replace(
        base,
        attempt=attempt,
        scheduled_time=now - waited,
        current_attempt_scheduled_time=now,
        started_time=now,
    )


def _cancellation(**flags: bool) -> Any:
    return activity.ActivityCancellationDetails(**flags)
