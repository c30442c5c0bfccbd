"""An agent whose tool returns a large structure (rows of a query, say).

`worker.py --agents big_result:agent` serves it. Configured through the environment:
TEMPORAL_ADDRESS, MODEL_BASE_URL, AGENT_TASK_QUEUE, AGENT_LEDGER, and BIG_ROWS: how many
rows the tool returns in this process (unset: three), BIG_ERROR: how many characters
of a dotted list `fail_loudly`'s error quotes before a URL (unset: a short error), and
BIG_LOG: how many characters of log lines `fail_reading`'s error quotes (unset: a
line), BIG_WAIT: how many seconds `wait_a_while` runs (unset: none).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from agentor_temporal import Agentor, function_tool

from helpers import ledger_write


@function_tool
def query_rows() -> list[Any]:
    """Rows of a query."""
    ledger_write(os.environ.get("AGENT_LEDGER"), "query_rows")
    # one small row many times over: the list costs 8 bytes a row, its JSON 10 characters
    return [{"a": 1}] * int(os.environ.get("BIG_ROWS", "3"))


@function_tool
def fail_loudly() -> str:
    """Fails, quoting what it read."""
    ledger_write(os.environ.get("AGENT_LEDGER"), "fail_loudly")
    dotted = "a." * (int(os.environ.get("BIG_ERROR", "2")) // 2)
    raise RuntimeError(f"bad versions {dotted} (see https://example.com/versions)")


def _log_lines() -> str:
    lines = int(os.environ.get("BIG_LOG", "60")) // 60 + 1
    return "".join(
        f"2026-12-05 12:30:{i % 60:02d},123 INFO job {i} ok id={i * 7919:08x}\n"
        for i in range(lines)
    )


@function_tool
def fail_reading() -> str:
    """Fails, quoting the log it read."""
    ledger_write(os.environ.get("AGENT_LEDGER"), "fail_reading")
    raise RuntimeError(f"the job failed; its log:\n{_log_lines()}")


@function_tool
async def wait_a_while() -> str:
    """Waits, as a long job does."""
    ledger_write(os.environ.get("AGENT_LEDGER"), "wait_a_while")
    await asyncio.sleep(float(os.environ.get("BIG_WAIT", "0")))
    return "waited"


def build(base_url: str, temporal: Any, task_queue: str, **options: Any) -> Agentor:
    """The agent, built alike in the worker process and the test's."""
    return Agentor(
        name="Rows",
        model="m",
        tools=[query_rows, fail_loudly, fail_reading, wait_a_while],
        base_url=base_url,
        api_key="k",
        temporal=temporal,
        task_queue=task_queue,
        **options,
    )


agent = build(
    os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
    os.environ.get("AGENT_TASK_QUEUE", "agentor"),
)
