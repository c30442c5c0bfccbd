"""The `call_tool` activity: one tool call, one activity execution.

A tool that raises answers the model with the error (Agentor's behaviour)
and the activity succeeds, so Temporal never retries a tool's own failure.
Only a lost worker or a timeout makes Temporal run the call again, and then
the tool sees the same idempotency key through `tool_context()`.
"""

from __future__ import annotations

import logging
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentor_temporal.activities._private import clip, heartbeating
from agentor_temporal.activities.registry import AgentRegistry, UnknownAgentError
from agentor_temporal.activities.tooldef import ToolContext
from agentor_temporal.workflows.activity_types import (
    ApprovalCheckInput,
    CallToolInput,
    CallToolResult,
)
from agentor_temporal.workflows.payloads import clip_to_size
from agentor_temporal.workflows.policies import MAX_TOOL_RESULT_BYTES

logger = logging.getLogger(__name__)


def error_result(error: str, **extra: float | None) -> CallToolResult:
    """The result a failed call answers the model with (`result` = "Error: ...")."""
    error = clip(error)
    return CallToolResult(result=f"Error: {error}", error=error, **extra)  # type: ignore[arg-type]


async def call_tool(registry: AgentRegistry, inp: CallToolInput) -> CallToolResult:
    """Run one tool call with heartbeats; never raise for the tool's own errors."""
    try:
        agent = registry.get(inp.agent)
    except UnknownAgentError as exc:
        raise ApplicationError(str(exc), type="UnknownAgent", non_retryable=True) from None
    tool = agent.tool(inp.name)
    if tool is None:
        known = ", ".join(sorted(t.name for t in agent.tools)) or "none"
        return CallToolResult(
            result=f"Error: unknown tool {inp.name!r}. Available tools: {known}.",
            error="unknown tool",
        )
    attempt = activity.info().attempt if activity.in_activity() else 1
    context = ToolContext(
        run_id=inp.run_id, call_id=inp.call_id, agent=inp.agent, turn=inp.turn, attempt=attempt
    )
    started = time.time()
    try:
        async with heartbeating():
            text = await tool.call(inp.args, context, registry.tool_pool())
    except Exception as exc:
        logger.warning("Tool %s failed in run %s: %s", inp.name, inp.run_id, exc)
        return error_result(
            f"{type(exc).__name__}: {exc}", started_at=started, ended_at=time.time()
        )
    ended = time.time()
    clipped = clip_to_size(text, MAX_TOOL_RESULT_BYTES)
    if clipped != text:
        logger.warning(
            "Tool %s returned %d characters in run %s; cut to %d bytes as encoded",
            inp.name,
            len(text),
            inp.run_id,
            MAX_TOOL_RESULT_BYTES,
        )
    return CallToolResult(
        result=clipped, started_at=started, ended_at=ended, truncated=clipped != text
    )


async def needs_approval(registry: AgentRegistry, inp: ApprovalCheckInput) -> bool:
    """Whether this call of the tool waits for a person.

    A predicate that raises, or a tool this worker does not know, asks a
    person: failing safe is the point of an approval gate.
    """
    try:
        tool = registry.get(inp.agent).tool(inp.name)
        if tool is None:
            return True
        return tool.needs_approval(tool.validate(inp.args))
    except Exception as exc:
        logger.warning("Approval predicate of %s failed (%s); asking a person", inp.name, exc)
        return True
