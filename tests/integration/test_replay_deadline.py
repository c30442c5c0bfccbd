"""A run's whole history replays within its workflow task timeout on a worker without it.

A worker that did not hold the run in its cache (a restart, a deploy, another
worker of the fleet) replays the execution's history in the workflow task it
takes, and Temporal gives that task the run's task timeout. Each workflow
task of history costs a few milliseconds to replay (the SDK's round trip, not
the run's code), so a run waiting for a person that signals had reached one at
a time (5,000 here: 2,900 workflow tasks, 1.5 MB, far under the caps it stops
at) took 9 to 13 s to replay under load: every attempt timed out at the 5 s
the facade set, the approval was refused ("Workflow Task in failed state")
and the run was wedged for good.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, payer

pytestmark = pytest.mark.slow

PAY = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")
#: signals sent one at a time to the waiting run: each mostly a workflow task of its own
SIGNALS = 5_000


async def test_a_waiting_run_with_a_long_history_is_decided_on_a_fresh_worker(
    client: Client, task_queue: str, ledger: str
) -> None:
    with ScriptedModelServer([[PAY], Reply("Paid.")]) as model:
        agent = payer(model, client, task_queue, ledger)
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval"
            handle = client.get_workflow_handle(paused.run_id)
            first = (await handle.describe()).run_id  # the execution the signals go to
            for n in range(SIGNALS):  # one at a time: a workflow task each, mostly
                await handle.signal("nudge", n)
        # a worker that never held the run replays all of it in its first task
        async with build_worker(client, [agent], task_queue=task_queue):
            decided = await asyncio.wait_for(
                agent.aapprove(paused.run_id, "call_pay", by="alice"), 180
            )
            assert decided["approved"]
            # the run's end, across the continue-as-new its long history asks for next
            outcome = await asyncio.wait_for(handle.result(), 120)
        asked = model.request_count
    assert outcome["status"] == "completed", outcome
    assert outcome["final_output"] == "Paid." and asked == 2
    assert len(ledger_lines(ledger)) == 1
    history = await client.get_workflow_handle(paused.run_id, run_id=first).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT not in kinds
