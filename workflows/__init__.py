"""Workflow code: the agent loop as a deterministic Temporal workflow."""

from workflows.agent_run import AgentRunWorkflow
from workflows.types import AgentRunInput, AgentSpec, RunOutcome, ToolSpec, parse_run_input

__all__ = [
    "AgentRunInput",
    "AgentRunWorkflow",
    "AgentSpec",
    "RunOutcome",
    "ToolSpec",
    "parse_run_input",
]
