"""A user's workflow that asks an agent once (`run_agent`): the agent's run is its child.

In a module of its own: the golden scenarios run it in the workflow sandbox,
which re-imports a workflow's module, and the test modules import things it
refuses.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentor_temporal.workflow import run_agent


@workflow.defn(name="AskAgent", sandboxed=False)
class AskAgent:
    """Asks `agent` the weather in London; returns the agent run's id."""

    @workflow.run
    async def run(self, agent: str) -> str:
        outcome = await run_agent(agent, "What is the weather in London?")
        assert outcome.status == "completed", outcome
        return outcome.run_id
