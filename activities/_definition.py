"""Which definition runs a task: the run's, never a different one of the same name.

A run records its agent's spec (with a fingerprint of model, instructions and
tool schemas) at the start of each segment, and every activity it schedules
carries that fingerprint. A worker whose agent of that name is built
differently (or that has no such agent) does not run the task: it hands it
back to Temporal, naming what differs, so that a worker with the run's
definition takes it (during a deploy, old and new workers poll the same
queue). If none does within DEFINITION_PATIENCE, the error becomes final and
the run fails with that message: waiting for ever would look like a hang, and
mixing definitions is never an option.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agentor_temporal.activities._private import waited
from agentor_temporal.activities.registry import AgentDefinition, AgentRegistry, UnknownAgentError
from agentor_temporal.workflows import policies

logger = logging.getLogger(__name__)

#: Error types (written into history, shown in the UI).
MISMATCH = "AgentDefinitionMismatch"
UNKNOWN = "UnknownAgent"

#: (run, fingerprint) pairs this process already warned about.
_warned: set[tuple[str, str]] = set()
_WARNED_MAX = 10_000


async def definition_for(
    registry: AgentRegistry, name: str, fingerprint: str | None, what: str
) -> AgentDefinition:
    """The worker's agent `name`, if it is built as the run recorded it.

    Args:
        registry: this worker's agents.
        name: the run's agent.
        fingerprint: the run's recorded fingerprint ("" or None: not checked,
            as for activities scheduled before fingerprints were sent).
        what: the task, for the message ("turn 3", "get_weather(...)").

    Raises:
        ApplicationError: retryable while a matching worker may still take the
            task, non-retryable once DEFINITION_PATIENCE has passed.
    """
    try:
        agent = registry.get(name)
    except UnknownAgentError as exc:
        raise _refusal(str(exc), UNKNOWN, what, fingerprint or "") from None
    if not fingerprint or agent.fingerprint() == fingerprint:
        return agent
    differences = await _differences(agent, fingerprint)
    problem = (
        f"This worker's agent {name!r} is built differently from the one this run was "
        f"started with ({differences})"
    )
    raise _refusal(problem, MISMATCH, what, fingerprint)


def _refusal(problem: str, kind: str, what: str, fingerprint: str) -> ApplicationError:
    patience = policies.DEFINITION_PATIENCE.total_seconds()
    final = waited() > patience
    run_id = (activity.info().workflow_id or "") if activity.in_activity() else ""
    if final:
        message = (
            f"{problem}. No worker with the run's definition took {what} within "
            f"{patience / 60:g} minutes, so the run stops rather than mix definitions; "
            "run a worker built as the run was, then resume(run_id); or go on with the new "
            "build in a new run that copies this one: fork(run_id)."
        )
    else:
        message = (
            f"{problem}. {what} is left for a worker with the run's definition "
            "(definitions are never mixed within a run)."
        )
    key = (run_id, fingerprint)
    if key not in _warned:
        if len(_warned) > _WARNED_MAX:
            _warned.clear()
        _warned.add(key)
        logger.warning("Run %s: %s", run_id, message)
    return ApplicationError(
        message,
        type=kind,
        non_retryable=final,
        next_retry_delay=None if final else policies.DEFINITION_RETRY_DELAY,
        # a task left for another worker is expected, about once a second for
        # DEFINITION_PATIENCE: said once above, not with a traceback each time
        category=(
            ApplicationErrorCategory.UNSPECIFIED if final else ApplicationErrorCategory.BENIGN
        ),
    )


async def _differences(agent: AgentDefinition, fingerprint: str) -> str:
    """What differs, read from the run's recorded spec (or the fingerprints alone)."""
    spec: dict[str, Any] | None = None
    if activity.in_activity():
        try:
            from agentor_temporal.workflows.projection import TemporalStore

            run_id = activity.info().workflow_id or ""
            latest = await TemporalStore(activity.client()).latest(run_id)
            spec = latest.spec if latest is not None else None
        except Exception:  # the message is still clear without the details
            spec = None
    if spec and spec.get("fingerprint") == fingerprint:
        return "; ".join(agent.differences(spec))
    return f"definition {agent.fingerprint()} here, {fingerprint} in the run"
