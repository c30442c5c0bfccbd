"""A mirror store that stops answering (a network store's call that never returns).

The store is a copy: Temporal holds the run. A store call that hangs must not
hold up the run's model requests and tool calls (each waited up to its own
timeout, 10 minutes for a model request, and then again on every retry).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import Event, FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.workflows import policies

from helpers import ANSWER, PROMPT, scripted_agent, until


class HungStore(FileStore):
    """A FileStore whose writes block while `hung` is set (a database call never answered)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.released = threading.Event()
        self.blocked = 0

    def _hang(self) -> None:
        self.blocked += 1
        self.released.wait()

    def append_next(
        self, run_id: str, start: int, events: list[Event]
    ) -> tuple[int, bool, int | None]:
        self._hang()
        return super().append_next(run_id, start, events)

    def append_from(self, run_id: str, start: int, events: list[Event]) -> int:
        self._hang()
        return super().append_from(run_id, start, events)


async def test_a_store_that_stops_answering_never_holds_up_the_run(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run finishes while its store hangs; once the store answers, resume catches it up."""
    # the embedded worker is this process's: its steps wait 3 s for the store, not 20
    monkeypatch.setattr(policies, "STORE_PATIENCE", timedelta(seconds=3), raising=False)
    store = HungStore(tmp_path)
    agent = scripted_agent(model, client, task_queue, store=store)
    try:
        # before: the first model request waited on the store for its 10-minute timeout
        result = await asyncio.wait_for(agent.arun(PROMPT), 120)
        assert result.status == "completed" and result.final_output == ANSWER, result.error
        # one call hung: the run's later steps left the store alone, and said so once
        assert store.blocked == 1
        said = [r for r in caplog.records if "did not answer within 3 s" in r.getMessage()]
        assert len(said) == 1 and result.run_id in said[0].getMessage(), said
    finally:
        store.released.set()
    requests = model.request_count
    again = await asyncio.wait_for(agent.aresume(result.run_id), 60)
    assert again.status == "completed" and model.request_count == requests
    projected = await TemporalStore(client).aload(result.run_id)
    assert [e.to_dict() for e in store.load(result.run_id)] == [e.to_dict() for e in projected]


async def test_runs_whose_store_hangs_leave_the_workers_other_runs_alone(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many runs each holding a thread in a hung store: another agent's run still finishes."""
    monkeypatch.setattr(policies, "STORE_PATIENCE", timedelta(seconds=3), raising=False)
    store = HungStore(tmp_path)
    hung = scripted_agent(model, client, task_queue, store=store)
    try:
        # one thread each blocked in the store: more than asyncio's default executor has
        runs = [asyncio.ensure_future(hung.arun(PROMPT)) for _ in range(12)]
        await until(lambda: store.blocked >= 12 or None, "every run's store call hung", 90)
        with ScriptedModelServer() as other_model:
            other = scripted_agent(other_model, client, task_queue, name="Other Agent")
            # before: its model request waited on a thread the hung store held
            result = await asyncio.wait_for(other.arun(PROMPT), 60)
        assert result.status == "completed" and result.final_output == ANSWER, result.error
        done = await asyncio.wait_for(asyncio.gather(*runs), 90)
        assert all(r.status == "completed" for r in done)
    finally:
        store.released.set()
