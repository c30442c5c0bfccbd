"""agentor-temporal: durable LLM agent runs on Temporal, with Agentor's API.

    from agentor_temporal import Agentor, function_tool, FileStore

Every run is a Temporal workflow (id = run_id); every model generation and
tool call an activity; every step an `Event` in Agentor's JSONL format.
"""

from agentor_temporal.activities.tooldef import Tool, ToolContext, function_tool, tool_context
from agentor_temporal.agent import Agentor
from agentor_temporal.connection import ConnectionFailed, connect
from agentor_temporal.store import (
    Event,
    FileStore,
    MemoryStore,
    PendingApproval,
    RunResult,
    Store,
    TemporalStore,
    Usage,
)

__all__ = [
    "Agentor",
    "ConnectionFailed",
    "Event",
    "FileStore",
    "MemoryStore",
    "PendingApproval",
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
