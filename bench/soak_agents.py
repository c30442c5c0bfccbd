"""The chaos soak's agent: tools that sleep, record each execution, and one that needs a person.

Every execution of a tool appends one fsynced line to the ledger named by
`SOAK_LEDGER`: `<run_id> <call_id> <idempotency key> <pid> <attempt> <tool>
<epoch seconds>`, so the
soak can count executions across worker processes it killed.
"""

from __future__ import annotations

import os
import time

from agentor_temporal import Agentor, function_tool, tool_context


def _record(tool: str) -> None:
    ledger = os.environ.get("SOAK_LEDGER")
    if not ledger:
        return
    ctx = tool_context()
    fields = (ctx.run_id, ctx.call_id, ctx.idempotency_key, os.getpid(), ctx.attempt, tool)
    line = " ".join(map(str, fields)) + f" {time.time():.3f}\n"
    with open(ledger, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())  # the worker may be SIGKILLed next


@function_tool
def work(step: int, sleep_ms: int) -> str:
    """Do one step of work, taking `sleep_ms` milliseconds.

    Args:
        step: Which step.
        sleep_ms: How long the step takes.
    """
    _record("work")
    time.sleep(min(max(sleep_ms, 0), 3_000) / 1000)
    return f"step {step} done after {sleep_ms} ms"


@function_tool(requires_approval=True)
def transfer(amount: int) -> str:
    """Move money (a person approves or denies it first).

    Args:
        amount: How much.
    """
    _record("transfer")
    return f"transferred {amount}"


soak = Agentor(
    name="Soak Agent",
    model="gpt-4o-mini",
    instructions="You do steps of work, in parallel where you can.",
    tools=[work, transfer],
    embedded_worker=False,
)
