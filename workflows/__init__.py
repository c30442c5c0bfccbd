"""The workflow side: the agent loop as a deterministic workflow, and its wire contracts.

Contracts (`types`, `activity_types`, `policies`, `payloads`, `formatting`)
are small modules that import nothing heavy, shared by the workflow, the
activities, the worker, the facade and any client. `projection` reads an
`AgentRun` history back into events (`TemporalStore`).
"""

from agentor_temporal.workflows.agent_run import AgentRunWorkflow
from agentor_temporal.workflows.projection import Segment, TemporalStore
from agentor_temporal.workflows.types import (
    AgentRunInput,
    AgentSpec,
    Decision,
    PausedState,
    RunOutcome,
    ToolSpec,
    parse_run_input,
)

__all__ = [
    "AgentRunInput",
    "AgentRunWorkflow",
    "AgentSpec",
    "Decision",
    "PausedState",
    "RunOutcome",
    "Segment",
    "TemporalStore",
    "ToolSpec",
    "parse_run_input",
]
