"""A model provider's huge error body stalls no other call of the worker.

A provider (or a proxy before it) may answer a request with an error whose message quotes
megabytes: the request echoed back, a stack trace, a page of HTML. Its text is masked
before it is shown; masked whole, a 30 MB message held the interpreter's lock for seconds
on end in single regular-expression searches, the heartbeats of every other call on that
worker stopped: the server timed the failed request's own call out and it was sent again
(attempts 6 and 10 seen, the test timing out), and timed a live tool call out and gave it
to another worker, which ran the tool a second time.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import RunResult
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import PROCS, ledger_lines, stop_process, until, wait_line, worker_cli

pytestmark = pytest.mark.slow

#: characters of the provider's error message: whole, masking it held the lock 8-14 s
#: at a time, past the 5 s heartbeat timeout
ERROR_CHARS = 30_000_000

_PROSE = "field messages[3].content is invalid, see https://example.com/docs?x=1 and retry. "


def _answer(request: dict[str, Any]) -> Any:
    """The huge error for the run asked "fail", a tool call then an answer for the other."""
    messages = request.get("messages") or []
    if any(m.get("content") == "fail" for m in messages):
        return Fail(400, "Invalid request: " + (_PROSE * (ERROR_CHARS // len(_PROSE) + 1)))
    if any(m.get("role") == "tool" for m in messages):
        return Reply("done")
    return CallTool("wait_a_while")


async def test_a_huge_provider_error_does_not_run_a_tool_beside_it_again(
    client: Client,
    temporal_address: str,
    task_queue: str,
    ledger: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's model request answered 400 with a 30 MB message, in the worker running
    another run's tool: the tool runs once (before: a second ledger line, attempt 2, on the
    worker polling beside it), the failing request is sent once, both runs end."""
    if str(PROCS) not in sys.path:
        monkeypatch.syspath_prepend(str(PROCS))
    big_result = importlib.import_module("big_result")
    monkeypatch.setenv("AGENT_LEDGER", ledger)
    monkeypatch.setenv("BIG_WAIT", "0")  # this process's tool, if it ran again, is quick
    with ScriptedModelServer(_answer) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "AGENT_TASK_QUEUE": task_queue,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_LEDGER": ledger,
            "BIG_WAIT": "12",
        }
        first = worker_cli(env, tmp_path / "first.log", "big_result:agent")
        try:
            await asyncio.to_thread(wait_line, first, "worker ready", 120)
            agent = big_result.build(model.base_url, client, task_queue, embedded_worker=False)
            tag = uuid.uuid4().hex[:8]
            waiting = asyncio.ensure_future(agent.arun("wait", run_id=f"wait-{tag}"))
            await until(lambda: ledger_lines(ledger), "the tool's first run", 120)
            failing = asyncio.ensure_future(agent.arun("fail", run_id=f"fail-{tag}"))
            await until(lambda: model.request_count >= 2, "the failing request", 60)
            async with build_worker(client, [agent], task_queue=task_queue):
                done: RunResult = await asyncio.wait_for(waiting, 180)
                failed: RunResult = await asyncio.wait_for(failing, 180)
        finally:
            stop_process(first)
    ran = ledger_lines(ledger)
    assert len(ran) == 1, f"the tool ran again: {ran}"
    assert done.status == "completed", done.error
    assert failed.status == "failed"
    assert failed.error is not None and "400" in failed.error
    assert len(failed.error) < 20_000
    # the wait's two requests and the failing one, never sent again
    assert model.request_count == 3
