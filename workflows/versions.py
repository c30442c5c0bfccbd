"""Which of the workflow's changes a run takes: by the level in its spec, else by patch.

A run records the behaviour level of the build that began it
(`AgentSpec.behaviour`, set by the describe step; `policies.BEHAVIOUR`).
Changes adopted at or below that level are taken without a patch marker; a
run recorded before levels existed (level 0) asks `workflow.patched` as it
always did, so old histories replay unchanged.
"""

from __future__ import annotations

from temporalio import workflow

from agentor_temporal.workflows import policies


def level() -> int:
    """The behaviour level of the running workflow's run (0 until its spec is recorded)."""
    return int(getattr(workflow.instance(), "behaviour", 0))


def adopted(patch: str) -> bool:
    """`workflow.patched(patch)`, answered by the run's level where it covers the patch."""
    at = policies.ADOPTED.get(patch)
    if at is not None and level() >= at:
        return True
    return workflow.patched(patch)
