"""Activity admission: slots are granted only while granted calls are starting in Python."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from temporalio.worker import SlotPermit, SlotReleaseContext

from agentor_temporal._admission import PromptStartSlots, admission
from agentor_temporal.plugin import AgentorPlugin, tune
from agentor_temporal.workflows.policies import ACTIVITY_BACKLOG

CTX: Any = None  # the supplier reads nothing from its contexts


def _release(slots: PromptStartSlots) -> None:
    slots.release_slot(SlotReleaseContext(slot_info=None, permit=SlotPermit()))


async def test_no_slot_while_the_backlog_is_full() -> None:
    """A full backlog of calls not yet started blocks polls and refuses eager calls."""
    slots = PromptStartSlots(maximum=100, backlog=2)
    await slots.reserve_slot(CTX)
    assert slots.try_reserve_slot(CTX) is not None
    assert slots.try_reserve_slot(CTX) is None
    waiting = asyncio.ensure_future(slots.reserve_slot(CTX))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    slots.started()  # one call reached Python: it is no longer backlog
    await asyncio.wait_for(waiting, 2)
    assert slots.pending == 2


async def test_a_release_from_another_thread_wakes_a_waiting_poll() -> None:
    """The SDK core releases slots on its own threads; a waiting reservation still wakes."""
    slots = PromptStartSlots(maximum=2, backlog=2)
    await slots.reserve_slot(CTX)
    await slots.reserve_slot(CTX)
    waiting = asyncio.ensure_future(slots.reserve_slot(CTX))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    thread = threading.Thread(target=_release, args=(slots,))
    thread.start()
    thread.join()
    await asyncio.wait_for(waiting, 2)


async def test_running_calls_are_bounded_by_maximum() -> None:
    """Calls running in Python are not backlog, but they count against the maximum."""
    slots = PromptStartSlots(maximum=3, backlog=1)
    for _ in range(3):
        await asyncio.wait_for(slots.reserve_slot(CTX), 2)
        slots.started()
    assert slots.try_reserve_slot(CTX) is None
    slots.finished()
    _release(slots)
    assert slots.try_reserve_slot(CTX) is not None


def test_bad_sizes_are_refused() -> None:
    """A backlog of zero (no poll could ever run) or above the maximum is a mistake."""
    with pytest.raises(ValueError, match="backlog"):
        PromptStartSlots(maximum=10, backlog=0)
    with pytest.raises(ValueError, match="backlog"):
        PromptStartSlots(maximum=2, backlog=3)


def test_the_plugin_installs_admission_only_on_an_unsized_worker() -> None:
    """Admission replaces the SDK's fixed slots, never sizes the user chose."""
    config: Any = tune({})
    assert config["tuner"]._get_activity_task_slot_supplier().backlog == ACTIVITY_BACKLOG
    assert len(config["interceptors"]) == 1
    sized: Any = tune({"max_concurrent_activities": 7})
    assert sized.get("tuner") is None and not sized.get("interceptors")
    tuner, _, _ = admission()
    own: Any = tune({"tuner": tuner})
    assert own["tuner"] is tuner and not own.get("interceptors")
    assert AgentorPlugin(tune_worker=False).tune_worker is False


def test_a_stopping_worker_waits_as_long_as_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AGENTOR_GRACEFUL_SHUTDOWN sets how long calls may finish; a bad value is a ConfigError."""
    from datetime import timedelta

    from agentor_temporal.plugin import ConfigError
    from agentor_temporal.workflows.policies import GRACEFUL_SHUTDOWN

    monkeypatch.delenv("AGENTOR_GRACEFUL_SHUTDOWN", raising=False)
    assert tune({})["graceful_shutdown_timeout"] == GRACEFUL_SHUTDOWN
    monkeypatch.setenv("AGENTOR_GRACEFUL_SHUTDOWN", "90")
    assert tune({})["graceful_shutdown_timeout"] == timedelta(seconds=90)
    # a worker the user sized keeps its own
    own: Any = {"graceful_shutdown_timeout": timedelta(seconds=5)}
    assert tune(own)["graceful_shutdown_timeout"] == timedelta(seconds=5)
    for bad in ("0", "-3", "soon", "nan", "1e9"):
        monkeypatch.setenv("AGENTOR_GRACEFUL_SHUTDOWN", bad)
        with pytest.raises(ConfigError, match="AGENTOR_GRACEFUL_SHUTDOWN must be"):
            tune({})


def test_a_script_exit_waits_for_its_calls_as_long_as_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exit hook's drain outlasts AGENTOR_GRACEFUL_SHUTDOWN (a fixed 40 s cut a 90 s grace
    short, and the next worker ran the abandoned call again); a bad value leaves the default."""
    from agentor_temporal._exit import calls_grace, exit_drain
    from agentor_temporal.workflows.policies import GRACEFUL_SHUTDOWN

    monkeypatch.setenv("AGENTOR_GRACEFUL_SHUTDOWN", "90")
    assert calls_grace() == 90 and exit_drain() > 90
    monkeypatch.setenv("AGENTOR_GRACEFUL_SHUTDOWN", "soon")
    assert calls_grace() == GRACEFUL_SHUTDOWN.total_seconds() < exit_drain()
