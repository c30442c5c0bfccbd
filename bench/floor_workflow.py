"""Floor A's workflow: 3 empty activities in sequence, what any Temporal app pays for 3 steps.

In a module of its own that imports only temporalio: the workflow sandbox
re-imports a workflow's module for every run, and doing so with the
benchmark's heavy imports would charge floor A for work no app does.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow


@activity.defn(name="bench_empty")
async def empty_activity(n: int) -> int:
    """Floor A's activity: does nothing."""
    return n


@workflow.defn(name="BareThree")
class BareThreeWorkflow:
    """3 empty activities in sequence (the agent does 3: gen, tool, gen)."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(3):
            await workflow.execute_activity(
                empty_activity, i, start_to_close_timeout=timedelta(seconds=30)
            )
        return n


@workflow.defn(name="BareThreeLocal")
class BareThreeLocalWorkflow:
    """The same 3 steps as local activities: one workflow task per run."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(3):
            await workflow.execute_local_activity(
                empty_activity, i, start_to_close_timeout=timedelta(seconds=30)
            )
        return n


@workflow.defn(name="BareModelLocal")
class BareModelLocalWorkflow:
    """The agent's shape with its 2 model calls local and its tool call an activity."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(3):
            options: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=30)}
            if i == 1:
                await workflow.execute_activity(empty_activity, i, **options)
            else:
                await workflow.execute_local_activity(empty_activity, i, **options)
        return n
