"""Activities: model generation, tool calls, and recording a run's events."""

from agentor_temporal.activities.bundle import AgentActivities
from agentor_temporal.activities.registry import AgentDefinition, AgentRegistry, UnknownAgentError
from agentor_temporal.activities.tooldef import (
    Tool,
    ToolContext,
    as_tool,
    function_tool,
    tool_context,
)

__all__ = [
    "AgentActivities",
    "AgentDefinition",
    "AgentRegistry",
    "Tool",
    "ToolContext",
    "UnknownAgentError",
    "as_tool",
    "function_tool",
    "tool_context",
]
