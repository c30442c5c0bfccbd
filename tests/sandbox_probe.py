"""A workflow that opts out of the sandbox as `AgentRun` does, and says where it ran.

In a module of its own: the sandbox re-imports a workflow's module, and the
test modules import things it refuses.
"""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="SandboxProbe", sandboxed=False)
class SandboxProbe:
    """Returns whether it ran inside the workflow sandbox."""

    @workflow.run
    async def run(self) -> bool:
        return workflow.unsafe.in_sandbox()
