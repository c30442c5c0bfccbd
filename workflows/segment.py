"""What one execution of a run starts from: its agent's spec, its budget, its names.

The spec is recorded in history, so a replay sees how the agent was built
when the run ran. A starter with a worker for the run's queue in its own
process (`Agentor.run` beside its worker) puts that worker's spec in a
header of the run's start (`policies.SPEC_HEADER`); a worker whose own spec
for the agent is the same takes it from there, which saves a local activity
and a workflow activation at the start of every segment. Otherwise (no
header, or a worker that would record another spec) the worker is asked (the
`describe_agent` local activity), and a refused header leaves a marker that
replays read. The
names the run is found by in visibility (agent, model, the run a fork came
from) are set once, in one upsert command.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from agentor_temporal.workflows import policies, steady
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


#: This worker's spec for an agent (name, the fingerprint the starter expects), or None
LocalSpec = Callable[[str, str | None], AgentSpec | None]


def canonical(spec: AgentSpec) -> str:
    """A spec as JSON with sorted keys: two specs record the same iff these are equal."""
    return _sorted(dataclasses.asdict(spec))


def header_spec(agent: str, fingerprint: str | None, local: LocalSpec | None) -> AgentSpec | None:
    """The spec the run's starter put in its start header, when this run takes it.

    Taken when this worker's own spec for the agent is the same; decided once,
    at the execution's first task: a refusal is recorded (a patch marker) and
    a replay reads that instead of asking the worker again, whose definition
    or settings may have changed since.
    """
    header = workflow.info().headers.get(policies.SPEC_HEADER)
    if header is None:
        return None
    if workflow.unsafe.is_replaying():
        if workflow.patched(policies.PATCH_SPEC_HEADER_REFUSED):
            return None
        taken: AgentSpec = workflow.payload_converter().from_payload(header, AgentSpec)
        return taken
    try:
        # as JSON: decoding into an AgentSpec costs ~0.7 ms, and `mine` is one
        given = json.loads(header.data)
    except ValueError:
        given = None  # not JSON: refused below, as a spec the worker does not have
    mine = local(agent, fingerprint) if local is not None else None
    if mine is not None and isinstance(given, dict) and canonical(mine) == _sorted(given):
        return mine
    workflow.patched(policies.PATCH_SPEC_HEADER_REFUSED)
    return None


def _sorted(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, default=str)


async def describe(
    agent: str, fingerprint: str | None, local: LocalSpec | None = None
) -> AgentSpec:
    """The agent's spec as the worker has it.

    Raises:
        ApplicationError: non-retryable (the workflow fails, not its task,
            which would retry forever): the agent is unknown here, or built
            otherwise than `fingerprint`.
    """
    given = header_spec(agent, fingerprint, local)
    if given is not None:
        return given
    try:
        spec: AgentSpec = await steady.local(
            workflow.start_local_activity(
                policies.DESCRIBE_AGENT,
                DescribeAgentInput(agent=agent, fingerprint=fingerprint or ""),
                result_type=AgentSpec,
                start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
                retry_policy=policies.LOCAL_RETRY_POLICY,
                summary=fit(f"describe {agent}", SUMMARY_BYTES),
            )
        )
    except (ActivityError, ApplicationError, TemporalTimeoutError) as exc:
        # a local activity's failure arrives unwrapped (its own
        # ApplicationError naming the known agents), not as ActivityError
        kind = exc.type if isinstance(exc, ApplicationError) and exc.type else "UnknownAgent"
        raise ApplicationError(failure_message(exc), type=kind, non_retryable=True) from None
    return spec


#: The describe step's refusals a continued execution goes on past with its carried spec
_REFUSED_DEFINITIONS = ("AgentDefinitionMismatch", "UnknownAgent")


async def describe_continued(
    agent: str, fingerprint: str | None, carry: Carry | None, local: LocalSpec | None = None
) -> AgentSpec:
    """`describe`, but a continued execution refused by its worker goes on with its carried spec.

    A continued execution is the same segment, already begun with the run's
    definition: its first task coming to a worker built differently (a
    deploy, old workers still polling) is no reason to fail the run, as it
    is at a segment's start. Its steps carry the run's fingerprint, so that
    worker leaves them for one built as the run was, and the run fails only
    when none comes within `DEFINITION_PATIENCE` (`activities._definition`).

    Raises:
        ApplicationError: as `describe`, for a segment's first execution, or a
            continued one carrying no spec of the run's fingerprint.
    """
    try:
        return await describe(agent, fingerprint, local)
    except ApplicationError as exc:
        carried = _carried_spec(carry, fingerprint)
        # asked only here: runs recorded before replay as they were (they failed);
        # a spec carried from CARRIED_SPEC_TAKEN on is taken unasked (asked after
        # the refused step, the patch could replay unknown)
        if (
            carried is None
            or exc.type not in _REFUSED_DEFINITIONS
            or not (
                carried.behaviour >= policies.CARRIED_SPEC_TAKEN
                or workflow.patched(policies.PATCH_CARRIED_SPEC)
            )
        ):
            raise
        workflow.logger.warning(
            "Run %s continues with its recorded definition of %r; its steps wait for a "
            "worker built as it was: %s",
            workflow.info().workflow_id,
            agent,
            exc.message,
        )
        return carried


def _carried_spec(carry: Carry | None, fingerprint: str | None) -> AgentSpec | None:
    """The spec a continued execution carries, if it is of the run's fingerprint.

    Only an execution continued as new carries one for the run (a plain
    client's start could put anything in its input), and only a spec of the
    fingerprint its steps carry: those are checked by every worker.
    """
    if carry is None or carry.spec is None or not fingerprint:
        return None
    if not workflow.info().continued_run_id or carry.spec.get("fingerprint") != fingerprint:
        return None
    try:
        converter = workflow.payload_converter()
        spec: AgentSpec = converter.from_payload(converter.to_payload(carry.spec), AgentSpec)
    except Exception:
        return None
    return spec if spec.fingerprint == fingerprint and spec.name else None


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
