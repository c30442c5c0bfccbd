"""What one execution of a run starts from: its agent's spec, its budget, its names.

The spec is asked of the worker (the `describe_agent` local activity), so the
history records how the agent was built when the run ran; the names the run
is found by in visibility (agent, model, the run a fork came from) are set
once, in one upsert command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import DescribeAgentInput
from agentor_temporal.workflows.carry import Carry
from agentor_temporal.workflows.formatting import SUMMARY_BYTES, failure_message, fit
from agentor_temporal.workflows.status import Attributes
from agentor_temporal.workflows.types import AgentRunInput, AgentSpec

#: Search attributes set on every run when the namespace has them.
AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
AGENT_MODEL = SearchAttributeKey.for_keyword("AgentModel")
#: Set on a fork's first segment: the run it was forked from.
FORKED_FROM = SearchAttributeKey.for_keyword("ForkedFrom")


@dataclass
class Setup:
    """What one execution of the run works with once it has started."""

    spec: AgentSpec
    budget: int
    started: float
    stream_text: bool
    #: what a continued execution took over (None in a segment's first execution)
    carry: Carry | None = None

    @property
    def history_budget(self) -> int:
        return self.spec.history_budget or policies.HISTORY_BUDGET_BYTES

    @property
    def inline_bytes(self) -> int:
        return self.spec.inline_bytes or policies.INLINE_CONVERSATION_BYTES


async def describe(agent: str, fingerprint: str | None) -> AgentSpec:
    """The agent's spec as the worker has it.

    Raises:
        ApplicationError: non-retryable (the workflow fails, not its task,
            which would retry forever): the agent is unknown here, or built
            otherwise than `fingerprint`.
    """
    try:
        spec: AgentSpec = await workflow.execute_local_activity(
            policies.DESCRIBE_AGENT,
            DescribeAgentInput(agent=agent, fingerprint=fingerprint or ""),
            result_type=AgentSpec,
            start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
            retry_policy=policies.LOCAL_RETRY_POLICY,
            summary=fit(f"describe {agent}", SUMMARY_BYTES),
        )
    except (ActivityError, ApplicationError, TemporalTimeoutError) as exc:
        # a local activity's failure arrives unwrapped (its own
        # ApplicationError naming the known agents), not as ActivityError
        kind = exc.type if isinstance(exc, ApplicationError) and exc.type else "UnknownAgent"
        raise ApplicationError(failure_message(exc), type=kind, non_retryable=True) from None
    return spec


def set_names(spec: AgentSpec, inp: AgentRunInput, attributes: Attributes) -> None:
    """Set the run's agent, model and (for a fork) parent where the namespace has them."""
    updates: list[SearchAttributeUpdate[Any]] = []
    if spec.search_attributes:
        updates += [AGENT_NAME.value_set(spec.name), AGENT_MODEL.value_set(spec.model)]
    # a spec recorded before `fork_attribute` had ForkedFrom with the names;
    # continued executions keep it (continue-as-new carries attributes over)
    forked_from = spec.search_attributes if spec.fork_attribute is None else spec.fork_attribute
    if inp.fork is not None and forked_from:
        updates.append(FORKED_FROM.value_set(inp.fork.run_id))
    if updates:
        attributes.upsert(updates)
