"""An order workflow of your own that asks an agent, then acts on its answer.

    python examples/order_workflow.py A-1001

`OrderWorkflow` is ordinary Temporal code: it calls `run_agent`, which runs the
support agent as a child `AgentRun` workflow (its own durable run, with a
JSONL log, resumable and visible in the UI), then refunds the order or not.
One worker serves both, because `AgentorPlugin` adds the agent runs to it.
Without OPENAI_API_KEY a scripted model plays the agent's part.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agentor_temporal.workflow import run_agent

TASK_QUEUE = "orders"


@dataclass
class OrderDecision:
    order_id: str
    refunded: bool
    reason: str
    #: the agent run that decided: `agentor-temporal show <agent_run_id>`
    agent_run_id: str


@activity.defn
async def issue_refund(order_id: str) -> str:
    """Your payment system's refund call (here it only says what it would do)."""
    return f"refund issued for {order_id}"


@workflow.defn
class OrderWorkflow:
    @workflow.run
    async def run(self, order_id: str) -> OrderDecision:
        outcome = await run_agent(
            "Support Agent",
            f"The customer asks for a refund of order {order_id}. Decide.",
            run_id=f"{workflow.info().workflow_id}-support",
        )
        answer = (outcome.final_output or "").strip()
        if outcome.status != "completed":
            return OrderDecision(
                order_id, False, f"agent {outcome.status}: {outcome.error}", outcome.run_id
            )
        verdict, _, reason = answer.partition("\n")
        if verdict.strip().upper() == "REFUND":
            await workflow.execute_activity(
                issue_refund, order_id, start_to_close_timeout=timedelta(seconds=30)
            )
            return OrderDecision(order_id, True, reason.strip(), outcome.run_id)
        return OrderDecision(order_id, False, reason.strip(), outcome.run_id)


async def main(order_id: str) -> None:
    from temporalio.worker import Worker

    from agentor_temporal import AgentorPlugin, connect

    server = None
    if not os.environ.get("OPENAI_API_KEY"):
        from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

        server = ScriptedModelServer(
            [CallTool("lookup_order", {"order_id": order_id}), Reply("REFUND\nIt arrived broken.")]
        ).start()
        os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="scripted")
        print(f"No OPENAI_API_KEY: a scripted model at {server.base_url} plays the agent.")

    from support_agent import agent

    client = await connect()
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[OrderWorkflow],
        activities=[issue_refund],
        plugins=[AgentorPlugin(agents=[agent])],
    ):
        decision = await client.execute_workflow(
            OrderWorkflow.run,
            order_id,
            id=f"order-{order_id}-{uuid.uuid4().hex[:6]}",
            task_queue=TASK_QUEUE,
        )
    print(decision)
    print(f"the agent's run: agentor-temporal show {decision.agent_run_id}")
    if server is not None:
        server.stop()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "A-1001"))
