"""agentor-temporal: durable LLM agent runs on Temporal, with Agentor's API.

    from agentor_temporal import Agentor, function_tool, FileStore

Every run is a Temporal workflow (id = run_id); every model generation and
tool call an activity; every step an `Event` in Agentor's JSONL format.

Names are imported on first use: the workflow sandbox imports this package
afresh for every run it executes (it is the parent of the modules workflows
use), so importing it must cost nothing and touch no state.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentor_temporal.activities import Tool, ToolContext, function_tool, tool_context
    from agentor_temporal.agent import Agentor
    from agentor_temporal.connection import ConnectionFailed, connect
    from agentor_temporal.plugin import AgentorPlugin
    from agentor_temporal.store import (
        Event,
        FileStore,
        MemoryStore,
        PendingApproval,
        RunResult,
        Store,
        Usage,
    )
    from agentor_temporal.workflows import RunOutcome, TemporalStore

#: public name -> the module that defines it
_EXPORTS = {
    "Agentor": "agentor_temporal.agent",
    "AgentorPlugin": "agentor_temporal.plugin",
    "ConnectionFailed": "agentor_temporal.connection",
    "Event": "agentor_temporal.store",
    "FileStore": "agentor_temporal.store",
    "MemoryStore": "agentor_temporal.store",
    "PendingApproval": "agentor_temporal.store",
    "RunOutcome": "agentor_temporal.workflows",
    "RunResult": "agentor_temporal.store",
    "Store": "agentor_temporal.store",
    "TemporalStore": "agentor_temporal.workflows",
    "Tool": "agentor_temporal.activities",
    "ToolContext": "agentor_temporal.activities",
    "Usage": "agentor_temporal.store",
    "connect": "agentor_temporal.connection",
    "function_tool": "agentor_temporal.activities",
    "tool_context": "agentor_temporal.activities",
}

__all__ = [
    "Agentor",
    "AgentorPlugin",
    "ConnectionFailed",
    "Event",
    "FileStore",
    "MemoryStore",
    "PendingApproval",
    "RunOutcome",
    "RunResult",
    "Store",
    "TemporalStore",
    "Tool",
    "ToolContext",
    "Usage",
    "connect",
    "function_tool",
    "tool_context",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentor_temporal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
