"""A tool returning a large structure (a query's rows) runs once, however large it is.

What a tool returns is written as JSON for the model, then cut to 256 kB. Written by
`json.dumps`, a few million rows held the interpreter's lock for the whole dump, seconds on
end: the heartbeat thread could not beat, the server timed the live call out and gave it
to another worker, which ran the tool again (and every other call of the stalled worker
went the same way). Written a piece at a time, the lock is let go between pieces and the
call beats throughout.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import PROCS, ledger_lines, stop_process, until, wait_line, worker_cli

pytestmark = pytest.mark.slow

#: rows whose C dump takes several seconds of the lock: past the 5 s heartbeat timeout
ROWS = 8_000_000


async def test_a_tool_returning_millions_of_rows_runs_once(
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker writing the rows keeps its call: the second worker polling beside it never
    runs the tool again (before: two ledger lines, the second its attempt 2)."""
    if str(PROCS) not in sys.path:
        monkeypatch.syspath_prepend(str(PROCS))
    big_result = importlib.import_module("big_result")
    monkeypatch.setenv("AGENT_LEDGER", ledger)  # this process's worker's tool writes there too
    with ScriptedModelServer([CallTool("query_rows"), Reply("done")]) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "AGENT_TASK_QUEUE": task_queue,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_LEDGER": ledger,
            "BIG_ROWS": str(ROWS),
        }
        writer = worker_cli(env, tmp_path / "writer.log", "big_result:agent")
        try:
            await asyncio.to_thread(wait_line, writer, "worker ready", 120)
            agent = big_result.build(model.base_url, client, task_queue, embedded_worker=False)
            run_id = f"rows-{uuid.uuid4().hex[:8]}"
            running = asyncio.ensure_future(agent.arun("go", run_id=run_id))
            await until(lambda: ledger_lines(ledger), "the tool's first run", 120)
            # a second worker, polling while the first writes the rows
            async with build_worker(client, [agent], task_queue=task_queue):
                result = await asyncio.wait_for(running, 180)
        finally:
            stop_process(writer)
    ran = ledger_lines(ledger)
    assert len(ran) == 1, f"the tool ran again: {ran}"
    assert result.status == "completed", result.error
    assert model.request_count == 2
