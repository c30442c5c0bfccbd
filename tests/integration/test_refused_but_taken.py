"""A decision whose update Temporal refused after taking it is its sender's, not too late.

Temporal admits a `decide` update, hands it to the worker, then may lose it
(the execution's state reloaded under a crowd of updates: "workflow update was
aborted"); the client sends it again under the same id, and a run at its cap
on updates refuses that second sending ("limit on number of total updates has
been reached"), though the worker took the first. The sender then decides by
signal, and was told its own decision came too late: "already approved by
alice" (seen among 120 people deciding at once, test_signalled_outcomes.py).
Here the server's answer is given as it was, after the real update was taken.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, payer

CAP = "limit on number of total updates has been reached (2)"


async def test_a_refused_update_that_was_taken_is_its_senders_decision(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender hears the decision it took (before: ValueError 'already approved by
    alice'); the transfer runs once and the run completes."""
    ledger = str(tmp_path / "ledger")
    real = WorkflowHandle.execute_update
    taken: list[Any] = []

    async def taken_then_refused(self: Any, update: Any, *args: Any, **kwargs: Any) -> Any:
        result = await real(self, update, *args, **kwargs)
        if update != "decide":
            return result
        taken.append(result)
        # what the client heard from its second sending of the same update id
        raise RPCError(CAP, RPCStatusCode.FAILED_PRECONDITION, b"")

    monkeypatch.setattr(WorkflowHandle, "execute_update", taken_then_refused)
    calls = [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_0")]
    with ScriptedModelServer([calls, Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            outcome = await agent.aapprove(paused.run_id, paused.pending_approvals[0], by="alice")
            assert len(taken) == 1 and taken[0]["approved"]
            assert outcome["approved"] and outcome["call_id"] == "call_0"
            assert outcome["turn"] == 1
            done = await agent.aresume(paused.run_id)
    assert done.status == "completed" and done.final_output == "Paid."
    assert len(ledger_lines(ledger)) == 1
