"""Workflow code: the agent loop as a deterministic Temporal workflow."""

from agentor_temporal.workflows.agent_run import AgentRunWorkflow
from agentor_temporal.workflows.types import (
    AgentRunInput,
    AgentSpec,
    RunOutcome,
    ToolSpec,
    parse_run_input,
)

__all__ = [
    "AgentRunInput",
    "AgentRunWorkflow",
    "AgentSpec",
    "RunOutcome",
    "ToolSpec",
    "parse_run_input",
]
