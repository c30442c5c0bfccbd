"""Agentor 0.1.1's `/chat` wire format, for clients written against `agentor.serve()`.

Agentor's streamed `/chat` answers with a `text/event-stream` whose body is
not SSE messages but one indented JSON object per event (`AgentOutput`
serialized as `json.dumps(..., indent=2) + "\\n"`), each projected from an
engine event: a `message` is its text, a `tool_call` a `tool_called`
action, a `tool_result` a `tool_output` action with the result, a run that
did not complete its error. The same bytes come out here, so those clients
keep working; `GET /runs/{run_id}/events` is the stream with real SSE framing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agentor_temporal.agent import Agentor, MessageInput
from agentor_temporal.store import Event
from agentor_temporal.workflows.formatting import call_summary


def agent_output(
    message: str | None = None, tool: str | None = None, action: str | None = None
) -> dict[str, Any]:
    """An `AgentOutput` as Agentor serializes it (its fields, in its order)."""
    return {
        "type": "run_item_stream_event",
        "message": message,
        "chunk": None,
        "tool_action": {"name": tool, "type": action} if action else None,
        "reasoning": None,
        "raw_event": None,
    }


def project(event: Event, run_id: str) -> dict[str, Any] | None:
    """What Agentor's stream says for one event (None: it says nothing)."""
    if event.type == "message":
        return agent_output(event.text)
    if event.type == "tool_call":
        return agent_output(tool=event.name, action="tool_called")
    if event.type == "tool_result":
        return agent_output(event.result, event.name, "tool_output")
    if event.type == "approval_request":
        # Agentor has no approvals; a chat client is at least told why it waits
        return agent_output(
            f"Waiting for approval of {call_summary(event.name or '?', event.args)} "
            f"(run {run_id}, call {event.call_id})"
        )
    if event.type == "run_end" and event.status != "completed":
        return agent_output(event.error or "Run did not complete.")
    return None


async def chat_chunks(agent: Agentor, input: MessageInput, run_id: str) -> AsyncIterator[str]:
    """The body of a streamed `POST /chat`, byte for byte Agentor's."""
    async for event in agent.stream_chat(input, run_id=run_id):
        output = project(event, run_id)
        if output is not None:
            yield json.dumps(output, indent=2) + "\n"
