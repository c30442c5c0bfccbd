"""A mirror store that raises: the run finishes, Temporal keeps all, the mirror catches up."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import Event, FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from helpers import (
    ANSWER,
    PROMPT,
    chunk_reader,
    chunk_tool,
    coder,
    ledger_lines,
    scripted_agent,
    until,
)


class FlakyStore:
    """A FileStore whose `append` raises while `failures` lasts (None: always)."""

    def __init__(self, directory: Path, failures: int | None) -> None:
        self.inner = FileStore(directory)
        self.failures = failures
        self.raised = 0

    def append(self, run_id: str, event: Event) -> None:
        if self.failures is None or self.raised < self.failures:
            self.raised += 1
            raise OSError(28, "No space left on device")
        self.inner.append(run_id, event)

    def load(self, run_id: str) -> list[Event]:
        return self.inner.load(run_id)

    def list_runs(self) -> list[str]:
        return self.inner.list_runs()


async def test_store_failing_for_a_while_is_caught_up_by_the_next_step(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Appends that fail for the first steps are retried later: the mirror ends exact."""
    store = FlakyStore(tmp_path, failures=2)
    agent = scripted_agent(model, client, task_queue, store=store)
    with caplog.at_level(logging.ERROR, logger="activities.journal"):
        result = await agent.arun(PROMPT)

    assert result.status == "completed" and result.final_output == ANSWER
    assert store.raised == 2
    projected = await TemporalStore(client).aload(result.run_id)
    assert [e.to_dict() for e in store.load(result.run_id)] == [e.to_dict() for e in projected]
    assert len(projected) == 7
    assert f"Mirroring run {result.run_id} into" in caplog.text
    assert "OSError: [Errno 28] No space left on device" in caplog.text


@pytest.mark.slow
async def test_store_failing_to_the_end_is_logged_and_does_not_fail_the_run(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store that never recovers does not fail the run; the missing tail is logged by name."""
    store = FlakyStore(tmp_path, failures=None)
    agent = scripted_agent(model, client, task_queue, store=store)
    with caplog.at_level(logging.WARNING):
        result = await agent.arun(PROMPT)

    assert result.status == "completed" and result.final_output == ANSWER, result.error
    projected = await TemporalStore(client).aload(result.run_id)
    assert [e.to_dict() for e in result.events] == [e.to_dict() for e in projected]
    assert len(projected) == 7 and store.load(result.run_id) == []
    assert (
        f"The store mirror of run {result.run_id} is missing its last 7 events; "
        "Temporal has them all" in caplog.text
    )
    # each failure said in one line, not again by the SDK with a traceback
    assert "Completing activity as failed" not in caplog.text


async def test_resume_catches_up_a_mirror_left_behind(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """Resuming a completed run whose mirror lacks its tail writes the tail, running nothing."""
    store = FileStore(tmp_path)
    agent = scripted_agent(model, client, task_queue, store=store)
    result = await agent.arun(PROMPT)
    path = tmp_path / f"{result.run_id}.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:4]))  # the mirror stopped after the tool result

    requests = model.request_count
    again = await agent.aresume(result.run_id)

    assert again.status == "completed" and model.request_count == requests
    assert path.read_text() == "".join(lines)


class StoppingStore(FlakyStore):
    """A store whose `load` does `next()` on nothing while `stops` (a StopIteration)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, failures=0)
        self.stops = True

    def load(self, run_id: str) -> list[Event]:
        if self.stops:
            return next(iter([]))  # type: ignore[no-any-return]
        return self.inner.load(run_id)


async def test_a_store_raising_stop_iteration_is_a_failing_store_not_a_hung_run(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """A StopIteration from a store is its error, logged; the run and its resume finish."""
    store = StoppingStore(tmp_path)
    agent = scripted_agent(model, client, task_queue, store=store)
    # a thread's StopIteration never reached its awaiter: the first model call hung
    result = await asyncio.wait_for(agent.arun(PROMPT), 60)
    assert result.status == "completed" and result.final_output == ANSWER, result.error
    with pytest.raises(RuntimeError, match=r"load raised StopIteration"):
        await asyncio.wait_for(agent.aresume(f"not-{result.run_id}"), 30)

    store.stops = False
    again = await asyncio.wait_for(agent.aresume(result.run_id), 30)
    assert again.status == "completed"
    projected = await TemporalStore(client).aload(result.run_id)
    assert [e.to_dict() for e in store.load(result.run_id)] == [e.to_dict() for e in projected]


class FullDisk(FileStore):
    """A FileStore refusing every step while `full`; notes how many events each step sent."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.full = True
        self.sent: list[int] = []

    def append_next(
        self, run_id: str, start: int, events: list[Event]
    ) -> tuple[int, bool, int | None]:
        self.sent.append(len(events))
        if self.full:
            raise OSError(28, "No space left on device")
        return super().append_next(run_id, start, events)


async def test_a_store_down_for_many_turns_is_sent_a_bounded_catch_up(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that fails turn after turn is not sent every event it lacks at every step (the
    workflow encoded them all again in each task: its CPU grew with the square of the turns);
    once it works again, it is caught up whole, what it was not sent read from history."""
    monkeypatch.setattr(policies, "MAX_CATCH_UP_EVENTS", 8, raising=False)
    ledger = str(tmp_path / "ledger")
    store = FullDisk(tmp_path / "runs")
    with ScriptedModelServer(chunk_reader(24)) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 10)], store=store)
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Read.", max_turns=40)
            await until(lambda: len(ledger_lines(ledger)) >= 16, "16 chunks read")
            store.full = False
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert result.status == "completed" and result.final_output == "Read 24 chunks."
    # a turn adds 3 or 4 events: a step sends them and at most 8 the store lacks
    assert max(store.sent) <= 8 + 8, store.sent
    record = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in store.load(run_id)] == [e.to_dict() for e in record]
