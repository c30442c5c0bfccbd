"""The mirror's writer thread: one thread, batched steps, fsyncs grouped but done first."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agentor_temporal.activities.journal import _next_in_line
from agentor_temporal.store import Event, FileStore
from agentor_temporal.store._writer import Writer
from agentor_temporal.store.base import in_writer


def events(n: int, start: int = 0) -> list[Event]:
    return [
        Event(type="tool_result", call_id=f"c{i}", result=str(i)) for i in range(start, start + n)
    ]


async def test_many_runs_steps_go_through_one_thread_and_wake_after_their_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent mirror steps all write and fsync in one thread, each woken after its fsync.

    A thread per step (`asyncio.to_thread`) woke a pool thread and the event
    loop once per step: at 100 runs in flight that cost the busy worker CPU.
    """
    store = FileStore(tmp_path)
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append((threading.current_thread().name, fd))

    monkeypatch.setattr(os, "fsync", fsync)
    lock = threading.Lock()

    async def step(run: str, start: int, n: int) -> tuple[int, bool, int | None]:
        done = await in_writer(_next_in_line, store, run, start, events(n, start), lock)
        # woken only once this step's file is durable
        assert len(synced) >= 1
        return done

    runs = [f"r{i}" for i in range(20)]
    first = await asyncio.gather(*(step(r, 0, 2) for r in runs))
    assert first == [(0, True, 2)] * 20
    second = await asyncio.gather(*(step(r, 2, 3) for r in runs))
    assert second == [(2, True, 5)] * 20
    assert {name for name, _ in synced} == {"agentor-store-writer"}
    assert len(synced) == 40
    for r in runs:
        assert [e.call_id for e in store.load(r)] == [f"c{i}" for i in range(5)]


async def test_two_steps_of_one_run_in_one_batch_do_not_wait_on_each_other(
    tmp_path: Path,
) -> None:
    """A batch holding two steps of the same run writes both (the file lock is let go first)."""
    store = FileStore(tmp_path)
    lock = threading.Lock()
    writer = Writer()
    gate = threading.Event()
    # the first job holds the thread, so the next two queue up as one batch
    held = asyncio.ensure_future(writer.run(gate.wait, 10))
    one = asyncio.ensure_future(writer.run(_next_in_line, store, "r", 0, events(2), lock))
    two = asyncio.ensure_future(writer.run(_next_in_line, store, "r", 2, events(2, start=2), lock))
    await asyncio.sleep(0)
    gate.set()
    done = await asyncio.wait_for(asyncio.gather(held, one, two), 10)
    assert done[1:] == [(0, True, 2), (2, True, 4)]
    assert [e.call_id for e in store.load("r")] == ["c0", "c1", "c2", "c3"]


async def test_a_failed_grouped_fsync_fails_its_step_and_the_file_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync that fails in the grouped pass raises to its step, and the store
    no longer trusts its copy as its own (the next step checks it first)."""
    store = FileStore(tmp_path)
    lock = threading.Lock()
    assert await in_writer(_next_in_line, store, "r", 0, events(2), lock) == (0, True, 2)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output"):
        await in_writer(_next_in_line, store, "r", 2, events(2, start=2), lock)
    monkeypatch.undo()
    # as after a failed fsync inline: not this store's copy any more, so not extended blind
    have, same, written = await in_writer(_next_in_line, store, "r", 4, events(1, start=4), lock)
    assert (same, written) == (False, None)


async def test_a_writer_job_that_raises_reaches_its_caller_alone(tmp_path: Path) -> None:
    """One step's error goes to that step; the rest of its batch completes."""

    def boom() -> Any:
        raise StopIteration

    results = await asyncio.gather(in_writer(boom), in_writer(lambda: 7), return_exceptions=True)
    assert isinstance(results[0], RuntimeError) and "StopIteration" in str(results[0])
    assert results[1] == 7
