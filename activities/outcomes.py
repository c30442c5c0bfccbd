"""The `run_outcome` activity: how a run that `run_agent` found already started ended.

`run_agent(run_id=X)` with an X that ran before (its workflow started again,
a redelivered message) attaches to that run, as `Agentor.run` does, instead of
running the agent a second time. Workflow code cannot read another workflow's
result, so this activity does, through the worker's client: a closed run's
outcome at once, a running one by failing the try (Temporal asks again with
backoff, `RUN_OUTCOME_RETRY_POLICY`) until it closes.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.workflows.activity_types import RunOutcomeInput
from agentor_temporal.workflows.formatting import failure_message
from agentor_temporal.workflows.history_reader import NotAnAgentRun
from agentor_temporal.workflows.policies import WORKFLOW_TYPE
from agentor_temporal.workflows.types import RunOutcome

#: The error type of a try that found the run still running (retried).
STILL_RUNNING = "RunStillRunning"


async def run_outcome(inp: RunOutcomeInput) -> RunOutcome:
    """The run's outcome once its latest execution has closed.

    Raises:
        ApplicationError: `STILL_RUNNING` while it runs (Temporal retries it).
    """
    handle = activity.client().get_workflow_handle(inp.run_id)
    described = await handle.describe()
    if described.workflow_type != WORKFLOW_TYPE:
        # the user's own workflow under the id: its end, if it comes, is no run's,
        # and its result no outcome (read as one, every try failed, for ever)
        error = str(NotAnAgentRun(inp.run_id, described.workflow_type))
        return RunOutcome(run_id=inp.run_id, status="failed", final_output=None, error=error)
    if inp.agent is not None:
        # another agent's run under the id: its result is no answer of this agent's,
        # and one no worker serves was asked again, for ever
        owner = await started_agent(activity.client(), inp.run_id, described.run_id)
        if owner is not None and owner != inp.agent:
            error = (
                f"Run {inp.run_id!r} belongs to agent {owner!r}, not {inp.agent!r}: a run id "
                "names one run of one agent, so give this run another run id"
            )
            return RunOutcome(run_id=inp.run_id, status="failed", final_output=None, error=error)
    if described.status in (None, WorkflowExecutionStatus.RUNNING):
        raise ApplicationError(
            f"run {inp.run_id!r} is still running; its outcome is read once it ends",
            type=STILL_RUNNING,
            category=ApplicationErrorCategory.BENIGN,
        )
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        return RunOutcome(
            run_id=inp.run_id, status="failed", final_output=None, error=failure_message(exc)
        )
    return RunOutcome.from_dict(result)


async def started_agent(client: Client, run_id: str, execution: str) -> str | None:
    """The agent `execution` of `run_id` was started for (None: an input naming none)."""
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=run_id, run_id=execution),
        maximum_page_size=1,  # the started event: not the whole conversation
    )
    try:
        page = await client.workflow_service.get_workflow_execution_history(request, retry=True)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None  # gone meanwhile: the wait for it says so
        raise
    for event in page.history.events:
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        if not payloads:
            return None
        try:
            (raw,) = await client.data_converter.decode([payloads[0]])
        except Exception:  # an input this client cannot read: the run says what it is
            return None
        name = raw.get("agent") if isinstance(raw, dict) else None
        return name if isinstance(name, str) else None
    return None
