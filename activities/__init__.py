"""Activities: model generation, tool calls, and recording a run's events."""

from activities.bundle import AgentActivities
from activities.registry import AgentDefinition, AgentRegistry, UnknownAgentError
from activities.tooldef import Tool, ToolContext, as_tool, function_tool, tool_context

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
