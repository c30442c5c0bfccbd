"""A resume whose read of the run's latest execution spans that execution's continue-as-new.

Temporal hands a long history over in pages (256 event batches each by
default). A read of "the run's current execution" keeps to the execution its
first page came from, and a workflow task in flight when that page was read
is written, when it completes, as one batch with the commands it made: a
later page holds them all. When that task continued the run as new, the last
page ended at the continue-as-new event, and the reader saw a latest
execution "continued as new" with no successor, which a resume took for a
run that stopped: it started a segment of its own from that execution's
events. So a run just decided, continued as new and completed was asked for
its model's answer a third time (a new segment, a second final answer), and
a follower (`stream`) was told the run had ended "continued_as_new", which
its app would resume.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import Event, FileStore, TemporalStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import chunk_tool, coder, ledger_lines, tool_results, transfer_tool

pytestmark = pytest.mark.slow

#: a history budget the results of the paused turn alone pass: decided, the
#: run continues as new before its next model request
PAUSE_BUDGET = 20_000
#: event batches a page of the resumer's reads holds (a long run's 256, in little)
PAGE = 3


def respond(request: dict[str, Any]) -> Any:
    """Four 8 KB results in one turn with a transfer (it waits), then an answer."""
    if tool_results(request) == 0:
        return [
            *(CallTool("read_chunk", {"n": n}, id=f"call_{n}") for n in range(1, 5)),
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
        ]
    return Reply("Read, and did not pay.")


class GatedStore(FileStore):
    """A FileStore whose writes, once `armed`, wait for `released`: the workflow task
    whose journal step writes them stays in flight until then."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.armed = False
        self.entered = threading.Event()
        self.released = threading.Event()

    def _gate(self) -> None:
        if self.armed and not self.released.is_set():
            self.entered.set()
            self.released.wait(120)

    def append_next(
        self, run_id: str, start: int, events: list[Event]
    ) -> tuple[int, bool, int | None]:
        self._gate()
        return super().append_next(run_id, start, events)

    def append_from(self, run_id: str, start: int, events: list[Event]) -> int:
        self._gate()
        return super().append_from(run_id, start, events)


class HeldPages:
    """The resumer's reads of a run's current execution, in pages, one read's second page held.

    Wraps `get_workflow_execution_history` of one client's service: a read
    naming no execution (the run's latest) gets pages of `PAGE` event batches,
    and the second page of its `nth` such read waits for `release`, so the run
    can move on in between.
    """

    def __init__(self, client: Client, run_id: str, nth: int) -> None:
        self.run_id = run_id
        self.nth = nth
        self.reads = 0
        # threading's: the facade reads on its runtime's own loop and thread
        self.held = threading.Event()
        self.release = threading.Event()
        service = client.workflow_service
        self.inner = service.get_workflow_execution_history
        service.get_workflow_execution_history = self  # type: ignore[method-assign]

    async def __call__(self, req: Any, *args: Any, **kwargs: Any) -> Any:
        current = req.execution.workflow_id == self.run_id and not req.execution.run_id
        if current:
            req.maximum_page_size = PAGE
            if not req.next_page_token:
                self.reads += 1
            elif self.reads == self.nth and not self.release.is_set():
                self.held.set()
                await asyncio.to_thread(self.release.wait, 120)
        return await self.inner(req, *args, **kwargs)


async def _followed(agent: Any, run_id: str) -> list[Event]:
    return [event async for event in agent.stream(run_id)]


@pytest.mark.parametrize("reader", ["resume", "stream"])
async def test_a_read_across_the_runs_continue_as_new_reads_on_into_its_successor(
    reader: str,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(PAUSE_BUDGET))
    ledger = str(tmp_path / "ledger")
    store = GatedStore(tmp_path / "runs")
    with ScriptedModelServer(respond) as model:
        tools = [chunk_tool(ledger, 8000), transfer_tool(ledger)]
        agent = coder(model, client, task_queue, tools=tools, store=store)
        try:
            async with build_worker(client, [agent], task_queue=task_queue):
                paused = await asyncio.wait_for(agent.arun("Read and pay.", max_turns=10), 120)
                assert paused.status == "awaiting_approval", paused.error
                run_id = paused.run_id
                assert run_id is not None
                handle = client.get_workflow_handle(run_id)
                first = (await handle.describe()).run_id
                assert model.request_count == 1
                # the denial's workflow task journals it (held by the store), then
                # continues the run as new
                store.armed = True
                deciding = asyncio.create_task(
                    agent.adeny(run_id, "call_pay", reason="not today", by="carol")
                )
                assert await asyncio.to_thread(store.entered.wait, 60), "nothing journaled"
                # the resumer, with its own client, whose reads of the run are paged and
                # held after the first page, read while that task is in flight
                resumer_client = await Client.connect(temporal_address)
                # a follower reads the run's latest execution first to know whether
                # to serve it, then follows it from its segments: the second is held
                pages = HeldPages(resumer_client, run_id, 1 if reader == "resume" else 2)
                resumer = coder(model, resumer_client, task_queue, tools=tools)
                reading: asyncio.Task[Any] = asyncio.create_task(
                    resumer.aresume(run_id) if reader == "resume" else _followed(resumer, run_id)
                )
                assert await asyncio.to_thread(pages.held.wait, 60), "no second page read"
                # between its pages: the task done, the run continued as new and done
                store.released.set()
                await asyncio.wait_for(deciding, 60)
                done = await asyncio.wait_for(handle.result(), 120)
                assert done["status"] == "completed", done
                assert (await handle.describe()).run_id != first
                pages.release.set()
                # a follower was told the run had ended "continued_as_new" (a
                # RunFailedError), which its app would resume
                read = await asyncio.wait_for(reading, 120)
                segments = await TemporalStore(client).segments(run_id)
        finally:
            store.released.set()
    if reader == "resume":
        assert read.status == "completed", read.error
        assert read.final_output == "Read, and did not pay."
    else:
        assert read[-1].type == "run_end" and read[-1].text == "Read, and did not pay."
    # two model requests: the first turn's and the one after the denial; no third
    assert model.request_count == 2, model.request_count
    # the run's own two executions, and no segment a resume started
    assert [s.status for s in segments] == ["continued_as_new", "completed"]
    assert len(ledger_lines(ledger)) == 4
