"""The steps a `ScriptedModelServer` plays, and the default agent it plays without them.

A step is what the scripted model does with one request: answer (`Reply`,
`CallTool`, a list of `CallTool`), fail (`Fail`, `Drop`, `Raw`), wait
(`Hang`), or decide from the request (a function). Steps are plain
dataclasses, so a test reads as the conversation it scripts; how each is
written as chat-completions HTTP is the server's business
(`agentor_temporal.testing`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass
class Reply:
    """Answer with text (and optionally reasoning)."""

    text: str
    reasoning: str | None = None


@dataclass
class CallTool:
    """Ask for one tool call; `args` may be a dict or a raw (even invalid) JSON string."""

    name: str
    args: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass
class Fail:
    """Answer with an HTTP error (OpenAI's error body)."""

    status: int
    message: str = "scripted failure"
    #: the Retry-After header: seconds, or its text as sent (an HTTP date)
    retry_after: float | str | None = None


@dataclass
class Raw:
    """Answer with exactly this body (a dict is sent as JSON): for malformed replies."""

    body: Any
    status: int = 200
    content_type: str = "application/json"
    #: More response headers (a `Set-Cookie` the endpoint sets).
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Drop:
    """Close the connection without answering (a connection error)."""


@dataclass
class Hang:
    """Wait `seconds` before playing `then` (a read timeout, or a slow model)."""

    seconds: float
    then: Step | None = None


Step = Union[
    Reply, CallTool, Fail, Drop, Hang, Raw, "list[CallTool]", Callable[[dict[str, Any]], Any]
]


def _guess_args(tool: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Arguments for the default agent: strings from the prompt ("... in London")."""
    users = [m for m in messages if m.get("role") == "user"]
    prompt = str(users[-1].get("content") or "") if users else ""
    match = re.search(r"\bin ([A-Z][\w-]*(?: [A-Z][\w-]*)*)", prompt)
    words = re.findall(r"[A-Za-z][\w-]*", prompt)
    guess = match.group(1) if match else (words[-1] if words else "x")
    params = (tool.get("function") or {}).get("parameters") or {}
    args: dict[str, Any] = {}
    for name in params.get("required") or []:
        kind = ((params.get("properties") or {}).get(name) or {}).get("type")
        args[name] = 1 if kind in ("integer", "number") else guess
    return args


def tool_then_answer(request: dict[str, Any]) -> Step:
    """The default agent: call the first tool offered, then answer with its result."""
    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(f"Answer based on tool: {last.get('content')}")
    tools = request.get("tools") or []
    if tools:
        tool = tools[0]
        return CallTool(tool["function"]["name"], _guess_args(tool, messages))
    return Reply("Hello! No tools were offered, so this is a plain answer.")


def assistant_message(step: Any) -> dict[str, Any]:
    """The assistant message a `Reply`, a `CallTool` or a list of them answers with.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(step, Reply):
        message: dict[str, Any] = {"role": "assistant", "content": step.text}
        if step.reasoning:
            message["reasoning_content"] = step.reasoning
        return message
    calls = step if isinstance(step, list) else [step]
    if not calls or not all(isinstance(c, CallTool) for c in calls):
        raise TypeError(f"not a scripted step: {step!r}")
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c.id or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.args if isinstance(c.args, str) else json.dumps(c.args),
                },
            }
            for c in calls
        ],
    }
