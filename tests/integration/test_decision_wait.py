"""A decision's patience (`approve --wait`, serve's 30 s) starts when it is sent.

Before sending it, `send_decision` reads the run's history (the turn of the call
waiting, its execution): a long history takes a while to read and decode, on a
loaded machine more. The bound counted those reads, so a short --wait ran out
in them: the person was told no worker took the decision and that Temporal held
it for the run, though it was never sent; the call went on waiting.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import _runs
from agentor_temporal._runs import make_decision
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, payer

#: how long reading the run's history takes here, and the decision's patience
READING, PATIENCE = 8.0, 6.0

pytestmark = pytest.mark.slow


def slow_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading which turn waits for the call takes `READING` s (a long history's)."""
    real = _runs.waiting_call

    async def slow(*args: Any) -> Any:
        await asyncio.sleep(READING)
        return await real(*args)

    monkeypatch.setattr(_runs, "waiting_call", slow)


async def test_the_reads_before_a_decision_is_sent_are_not_its_wait(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decided, by the facade with a patience (the CLI's --wait) and by serve's route
    (before: TimeoutError, and 504, after the reads, the decision never sent)."""
    import httpx

    from agentor_temporal.serve import app, create_app

    ledger = str(tmp_path / "ledger")
    calls = [
        CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0"),
        CallTool("transfer", {"amount": 6, "to": "bob"}, id="call_1"),
    ]
    monkeypatch.setattr(app, "DECISION_TIMEOUT", PATIENCE)
    with ScriptedModelServer([calls, Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            slow_reads(monkeypatch)
            # call id only: the turn is read from history (what `approve RUN CALL` sends)
            decided = await agent._decide(
                paused.run_id, *make_decision("call_0", True, None, "alice"), patience=PATIENCE
            )
            assert decided["approved"] and decided["turn"] == 1
            transport = httpx.ASGITransport(app=create_app([agent]))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://serve", timeout=60
            ) as http:
                answer = await http.post(
                    f"/runs/{paused.run_id}/approvals/call_1", json={"approve": True}
                )
            assert answer.status_code == 200, answer.text
            monkeypatch.undo()
            done = await agent.aresume(paused.run_id)
    assert done.status == "completed" and done.final_output == "Paid."
    assert len(ledger_lines(ledger)) == 2
