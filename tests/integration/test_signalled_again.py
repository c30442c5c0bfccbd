"""A decision sent by signal again under its request id, once its outcome is kept in brief.

`decide_by_signal` sends its signal again after a server outage, under the same
request id, "taken once": the run answers the second delivery with what the first
came to. It kept that answer only for the latest SIGNALLED_DECISIONS_KEPT (100)
outcomes whole: one pushed to the brief outcomes by a crowd deciding meanwhile was
checked again, refused as already decided (by its own sender) and the refusal put
in its place, so the sender was told its decision had lost to its own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.workflows import policies

from helpers import scripted_agent, transfer_tool


async def test_a_decision_delivered_again_past_the_kept_outcomes_keeps_its_own(
    client: Client, task_queue: str, ledger: str
) -> None:
    script = [
        [
            CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
            CallTool("transfer", {"amount": 7, "to": "eve"}, id="call_wait"),
        ],
        Reply("Paid."),
    ]
    approve = {"call_id": "call_pay", "approved": True, "by": "alice"}
    with ScriptedModelServer(script) as model:
        agent: Any = scripted_agent(model, client, task_queue, tools=[transfer_tool(ledger)])
        paused = await asyncio.wait_for(agent.arun("Pay bob 5 and eve 7."), 60)
        assert paused.status == "awaiting_approval", paused.error
        handle = client.get_workflow_handle(paused.run_id)
        async with agent._serving(client):
            await handle.signal("decide_signal", {"request_id": "alice-1", "decision": approve})

            async def outcome(request_id: str, timeout: float = 90) -> Any:
                deadline = time.monotonic() + timeout
                while True:
                    taken = await handle.query("signalled_decision", request_id)
                    if taken is not None:
                        return taken
                    assert time.monotonic() < deadline, f"no outcome for {request_id}"
                    await asyncio.sleep(0.1)

            first = await outcome("alice-1")
            assert first["decided"]["call_id"] == "call_pay", first
            # a crowd decides meanwhile (calls that are not waiting: refused)
            others = policies.SIGNALLED_DECISIONS_KEPT + 5
            for start in range(0, others, 20):
                await asyncio.gather(
                    *(
                        handle.signal(
                            "decide_signal",
                            {
                                "request_id": f"c{n}",
                                "decision": approve | {"call_id": f"call_x{n}"},
                            },
                        )
                        for n in range(start, min(start + 20, others))
                    )
                )
            await outcome(f"c{others - 1}")
            # alice's signal delivered again (sent again after an outage)
            await handle.signal("decide_signal", {"request_id": "alice-1", "decision": approve})
            await handle.signal("decide_signal", {"request_id": "last", "decision": approve})
            await outcome("last")
            again = await outcome("alice-1")
            assert "refused" not in again, again
            assert again["decided"]["call_id"] == "call_pay", again
            await handle.terminate("test over")
