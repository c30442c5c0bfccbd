"""Sync-tool threads: a timed-out call is abandoned, and only calls that run count.

`ToolThreads` through `Tool.call` and the `call_tool` activity, with real
threads. A call abandoned by its timeout frees its place at once and its
thread rejoins the pool if it ever returns; a call's timeout runs from when
a thread starts it; a call that finds no thread in time, or a pool that is
shut down, hands the call back unstarted (never answered "timed out").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import agentor_temporal.activities._tool_running as tool_running
import agentor_temporal.activities.registry as registry_module
from agentor_temporal.activities import AgentActivities, AgentDefinition, AgentRegistry
from agentor_temporal.activities._threads import ToolThreads
from agentor_temporal.activities.tooldef import NoThreadFree, ToolTimedOut, function_tool
from agentor_temporal.workflows.activity_types import CallToolInput

#: Released at the end of each test: the threads blocked on it end.
RELEASE = threading.Event()
STARTED: list[str] = []


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    RELEASE.clear()
    STARTED.clear()
    yield
    RELEASE.set()


@function_tool
def blocked(name: str) -> str:
    """Blocks until the test ends.

    Args:
        name: what to record.
    """
    STARTED.append(name)
    RELEASE.wait(30)
    return f"{name} released"


@function_tool
def sleeper(seconds: float) -> str:
    """Sleeps.

    Args:
        seconds: how long.
    """
    STARTED.append(f"sleeper {seconds:g}")
    time.sleep(seconds)
    return f"slept {seconds:g}"


def until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


async def test_abandoned_calls_free_their_places_at_once() -> None:
    """With every thread's call abandoned by its timeout, the next call starts at once."""
    threads = ToolThreads(2)
    for n in range(4):  # twice the limit: abandoned calls never count
        with pytest.raises(ToolTimedOut, match="thread is still running and was abandoned"):
            await blocked.call({"name": f"hung {n}"}, threads=threads, timeout=0.1)
    assert threads.abandoned == 4 and threads.running == 0
    started = time.monotonic()
    assert await sleeper.call({"seconds": 0}, threads=threads, timeout=1) == "slept 0"
    assert time.monotonic() - started < 0.5
    assert STARTED == [f"hung {n}" for n in range(4)] + ["sleeper 0"]


async def test_an_abandoned_thread_rejoins_the_pool_when_it_returns() -> None:
    threads = ToolThreads(1)
    with pytest.raises(ToolTimedOut):
        await blocked.call({"name": "late"}, threads=threads, timeout=0.1)
    RELEASE.set()
    until(lambda: threads.abandoned == 0, "the abandoned call to end")
    assert await sleeper.call({"seconds": 0}, threads=threads, timeout=1) == "slept 0"
    alive = [t for t in threading.enumerate() if t.name.startswith("agentor-tool")]
    assert all(t.daemon for t in alive)


async def test_the_timeout_runs_from_when_a_thread_starts_the_call() -> None:
    """Waiting behind a running call is not the waiting call's time."""
    threads = ToolThreads(1)
    first = asyncio.ensure_future(sleeper.call({"seconds": 0.8}, threads=threads, timeout=5))
    await asyncio.to_thread(until, lambda: STARTED, "the first call to start")
    # 0.5 s of its own, after ~0.8 s of waiting for the only thread
    second = await sleeper.call({"seconds": 0.1}, threads=threads, timeout=0.5)
    assert second == "slept 0.1" and await first == "slept 0.8"


async def test_a_call_that_finds_no_thread_in_time_never_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tool_running, "SYNC_TOOL_THREAD_WAIT", _seconds(0.2))
    threads = ToolThreads(1)
    first = asyncio.ensure_future(blocked.call({"name": "first"}, threads=threads, timeout=30))
    await asyncio.to_thread(until, lambda: STARTED, "the first call to start")
    with pytest.raises(NoThreadFree, match="it did not start"):
        await blocked.call({"name": "second"}, threads=threads, timeout=30)
    RELEASE.set()
    assert await first == "first released"
    assert STARTED == ["first"]  # the second call was withdrawn, not run late


async def test_a_cancelled_wait_withdraws_the_call_and_a_cancelled_run_frees_its_place() -> None:
    threads = ToolThreads(1)
    running = asyncio.ensure_future(blocked.call({"name": "running"}, threads=threads))
    await asyncio.to_thread(until, lambda: STARTED, "the first call to start")
    waiting = asyncio.ensure_future(blocked.call({"name": "waiting"}, threads=threads))
    await asyncio.sleep(0)  # let it submit
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert threads.abandoned == 0 and threads.running == 1
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert threads.abandoned == 1 and threads.running == 0
    assert await sleeper.call({"seconds": 0}, threads=threads, timeout=1) == "slept 0"
    assert STARTED == ["running", "sleeper 0"]


async def test_a_shut_down_pool_fails_queued_calls_unstarted() -> None:
    threads = ToolThreads(1)
    running = asyncio.ensure_future(blocked.call({"name": "running"}, threads=threads))
    await asyncio.to_thread(until, lambda: STARTED, "the first call to start")
    queued = asyncio.ensure_future(blocked.call({"name": "queued"}, threads=threads))
    await asyncio.sleep(0.05)
    threads.shutdown()
    with pytest.raises(tool_running.PoolUnavailable, match="cannot schedule new futures"):
        await queued
    with pytest.raises(tool_running.PoolUnavailable):
        await blocked.call({"name": "after"}, threads=threads)
    RELEASE.set()
    assert await running == "running released"  # a running call runs to its end
    assert STARTED == ["running"]


async def test_no_thread_free_hands_the_call_back_as_worker_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The activity raises a retryable WorkerBusy: the call did not run, nothing is answered."""
    monkeypatch.setattr(tool_running, "SYNC_TOOL_THREAD_WAIT", _seconds(0.2))
    monkeypatch.setattr(registry_module, "SYNC_TOOL_THREADS", 1)
    acts = AgentActivities(
        AgentRegistry([AgentDefinition(name="A", model="m", tools=[blocked], api_key="k")])
    )
    first = asyncio.ensure_future(ActivityEnvironment().run(acts.call_tool, _call("first", "c1")))
    await asyncio.to_thread(until, lambda: STARTED, "the first call to start")
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.call_tool, _call("second", "c2"))
    assert info.value.type == "WorkerBusy" and not info.value.non_retryable
    assert "did not start" in info.value.message
    RELEASE.set()
    assert (await first).result == "first released"
    assert STARTED == ["first"]


def _call(name: str, call_id: str) -> CallToolInput:
    return CallToolInput("r", "A", call_id, "blocked", {"name": name})


def _seconds(value: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value)
