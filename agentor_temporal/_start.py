"""Starting a run's next segment exactly once, however many processes try.

Resuming a closed run starts a new execution under the same workflow id. Two
resumers that read the same closed execution must start one segment between
them, not one each: with `USE_EXISTING` the second attaches while the first's
segment runs, but once that segment has *finished*, a plain start (which
allows a duplicate of a closed execution) would run the agent again from the
second resumer's stale reading. Temporal deduplicates starts by request id, so
every resumer of the same execution sends the same id, derived from what it
continues: the second start then returns the segment the first one started,
finished or not. The SDK's `start_workflow` always sends a random request id,
hence this small direct call.

Temporal deduplicates a start only against the workflow id's *current*
execution, though, and a segment that continued as new is not current any
more: its successor was started by the server, under a request id of its
own. Once that chain had closed, a resumer whose start came late (it read the
run before the first resumer started, then was slow to send: a loaded
process, a start sent again after its answer was lost) started a segment of
its own from its stale reading, paying again for the turns the chain had
run. So a continuing start first checks that the execution it continues is
still the current one (`continues_current`): one that is not was continued
by another resume (or this one's earlier try), whose result is the answer.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.enums.v1 import WorkflowIdConflictPolicy, WorkflowIdReusePolicy
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryRequest,
    StartWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._local_spec import headed, sending, spec_header
from agentor_temporal._outage import riding_outages
from agentor_temporal.activities import AgentDefinition
from agentor_temporal.activities.outcomes import started_agent
from agentor_temporal.store.encoding import standard_value
from agentor_temporal.telemetry import TRACE_HEADER
from agentor_temporal.workflows.formatting import preview_input
from agentor_temporal.workflows.history_reader import RESUME_KEY_MEMO, NotAnAgentRun
from agentor_temporal.workflows.policies import SPEC_HEADER, WORKFLOW_TASK_TIMEOUT, WORKFLOW_TYPE
from agentor_temporal.workflows.types import AgentRunInput

logger = logging.getLogger("agentor_temporal")

#: Namespace of the request ids below (any fixed UUID would do).
_REQUEST_IDS = uuid.UUID("0b4f6a53-1c38-4c8e-9a55-6f6a6e0a7e11")


class MovedOn(Exception):
    """A segment's start not sent: the run moved past the execution it continues."""


def resume_key(run_id: str, key: str) -> str:
    """What a segment's memo records of the client's idempotency key it was started under.

    A digest, not the key: a client's key is its own string, and the memo is
    shown to anyone who lists the run.
    """
    return uuid.uuid5(_REQUEST_IDS, f"resume\x00{run_id}\x00{key}").hex


def resume_memo(run_id: str, key: str | None) -> dict[str, Any] | None:
    """The memo of a segment a resume under `key` starts (None without a key)."""
    return None if key is None else {RESUME_KEY_MEMO: resume_key(run_id, key)}


def segment_request_id(run_id: str, previous_execution: str | None, event_offset: int) -> str:
    """The start request id shared by every resumer continuing the same state.

    Args:
        run_id: the run (workflow id).
        previous_execution: the closed execution being continued, or None
            when the segment is seeded from the store alone.
        event_offset: how many events the resumer read (tells two store-seeded
            continuations of different lengths apart).
    """
    key = f"{run_id}\x00{previous_execution or ''}\x00{event_offset}"
    return str(uuid.uuid5(_REQUEST_IDS, key))


async def start_once(
    client: Client,
    workflow: str,
    arg: Any,
    *,
    id: str,
    task_queue: str,
    request_id: str,
    id_reuse_policy: WorkflowIDReusePolicy,
    id_conflict_policy: WorkflowIDConflictPolicy,
    task_timeout: timedelta,
    static_summary: str | None = None,
    static_details: str | None = None,
    previous_execution: str | None = None,
    spec: Payload | None = None,
    memo: dict[str, Any] | None = None,
    continuing: bool = False,
) -> None:
    """`client.start_workflow` for the fields the facade uses, with a chosen request id.

    `continuing`: the segment continues `previous_execution` (None: a run only
    the store holds); checked last, right before the start is sent.

    A segment that continues `previous_execution` is started with that
    execution's trace context (the header Temporal's tracing interceptor
    wrote, if any), so the run stays one trace: this call passes no client
    interceptor that could carry it.

    Raises:
        WorkflowAlreadyStartedError: as `start_workflow` does.
        MovedOn: the run has moved past `previous_execution` (`continuing`).
    """
    req = StartWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_id=id,
        identity=client.identity,
        request_id=request_id,
        workflow_id_reuse_policy=WorkflowIdReusePolicy.ValueType(int(id_reuse_policy)),
        workflow_id_conflict_policy=WorkflowIdConflictPolicy.ValueType(int(id_conflict_policy)),
    )
    req.workflow_type.name = workflow
    req.task_queue.name = task_queue
    req.input.payloads.extend(await client.data_converter.encode([arg]))
    req.workflow_task_timeout.FromTimedelta(task_timeout)
    if static_summary is not None:
        req.user_metadata.summary.CopyFrom(
            (await client.data_converter.encode([static_summary]))[0]
        )
    if static_details is not None:
        req.user_metadata.details.CopyFrom(
            (await client.data_converter.encode([static_details]))[0]
        )
    if spec is not None:
        req.header.fields[SPEC_HEADER].CopyFrom(spec)
    for name, value in (memo or {}).items():
        req.memo.fields[name].CopyFrom((await client.data_converter.encode([value]))[0])
    header = await _trace_header(client, id, previous_execution)
    if header is not None:
        req.header.fields[TRACE_HEADER].CopyFrom(header)
    if continuing and not await continues_current(client, id, previous_execution):
        raise MovedOn(id)
    try:
        await client.workflow_service.start_workflow_execution(req, retry=True)
    except RPCError as err:
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            raise WorkflowAlreadyStartedError(id, workflow) from None
        raise


async def _trace_header(client: Client, run_id: str, execution: str | None) -> Payload | None:
    """The trace-context header `execution` of `run_id` was started with, if any."""
    if execution is None:
        return None
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=run_id, run_id=execution),
        maximum_page_size=1,  # the started event: not the whole conversation
    )
    try:
        page = await client.workflow_service.get_workflow_execution_history(request, retry=True)
    except RPCError:
        return None  # retention took it: the run's own trace id still joins them
    for event in page.history.events:
        fields = event.workflow_execution_started_event_attributes.header.fields
        return fields[TRACE_HEADER] if TRACE_HEADER in fields else None
    return None


async def start_segment(
    client: Client,
    agent: AgentDefinition,
    task_queue: str,
    run_id: str,
    inp: AgentRunInput,
    reuse: WorkflowIDReusePolicy,
    request_id: str | None = None,
    memo: dict[str, Any] | None = None,
    continuing: bool = False,
) -> WorkflowHandle[Any, Any] | None:
    """Start a segment of `agent`'s run; None when a closed run with that id blocks the start,
    or (`continuing`) the run has moved past the execution the segment continues.

    A `request_id` makes the start happen once per id (see `agentor_temporal._start`);
    `memo` and `continuing` go with it (only a start with a `request_id` takes them).
    """
    tools = ", ".join(t.name for t in agent.tools) or "none"
    # a worker for this queue in this process: its spec saves the run's describe step
    header = spec_header(client, task_queue, agent.name, inp.fingerprint)
    options: dict[str, Any] = {
        "id": run_id,
        "task_queue": task_queue,
        "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
        "id_reuse_policy": reuse,
        "task_timeout": WORKFLOW_TASK_TIMEOUT,
        "static_summary": f"{agent.name}: {preview_input(inp.input)}",
        "static_details": (
            f"**Agent** {agent.name}  \n**Model** {agent.model}  \n**Tools** {tools}"
        ),
    }
    # standard JSON in history: a log a run is continued from may hold NaN
    payload = standard_value(inp.to_dict())
    try:
        if request_id is not None:
            await start_once(
                client,
                WORKFLOW_TYPE,
                payload,
                request_id=request_id,
                previous_execution=inp.previous_execution,
                spec=header,
                memo=memo,
                continuing=continuing,
                **options,
            )
            return client.get_workflow_handle(run_id)
        with sending(header):
            # with a worker for this queue in this process, the first
            # workflow task comes back in the start response (no poll)
            return await (client if header is None else headed(client)).start_workflow(
                WORKFLOW_TYPE, payload, request_eager_start=True, **options
            )
    except WorkflowAlreadyStartedError:
        return None
    except MovedOn:
        logger.info(
            "Run %s was continued by another resume meanwhile; waiting for its result", run_id
        )
        return None


async def start_riding_outages(
    client: Client,
    agent: AgentDefinition,
    task_queue: str,
    run_id: str,
    inp: AgentRunInput,
    reuse: WorkflowIDReusePolicy = WorkflowIDReusePolicy.REJECT_DUPLICATE,
    request_id: str | None = None,
    *,
    what: str,
    memo: dict[str, Any] | None = None,
    continuing: bool = False,
) -> None:
    """`start_segment`, sent again while Temporal is unreachable (see `riding_outages`).

    Safe to repeat: a new run's start (`REJECT_DUPLICATE`, by run id with
    `USE_EXISTING`) attaches to the run an earlier try made, or is blocked by
    it once closed (its result is then waited for); a next segment's start
    is deduplicated by its `request_id`.

    `continuing`: the segment continues `inp.previous_execution` (None: a run
    only the store holds), and is not started once the run has moved past it
    (see the module docstring): the caller then waits for the run's result.
    """
    await riding_outages(
        lambda: start_segment(
            client, agent, task_queue, run_id, inp, reuse, request_id, memo, continuing
        ),
        client,
        what=what,
    )


async def continues_current(client: Client, run_id: str, previous: str | None) -> bool:
    """Whether `previous` is still `run_id`'s current execution (None: it has none).

    A run whose history Temporal no longer holds at all (retention) is taken
    as not moved on: only the store can continue it.
    """
    try:
        described = await client.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=client.namespace, execution=WorkflowExecution(workflow_id=run_id)
            ),
            retry=True,
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return True
        raise
    return previous is not None and described.workflow_execution_info.execution.run_id == previous


async def refuse_other_workflow(client: Client, run_id: str, agent: str | None = None) -> None:
    """Refuse a run id that another type of workflow, or another agent's run, holds.

    A start with an id in use attaches to what holds it: with a caller-chosen id
    (an app's `order-1234`) that may be the app's own workflow, whose end, if it
    ever comes, is no run's, or a run of another `agent`, whose result is no
    answer of this one (and which no worker of this agent may ever run). Asked
    only for ids the caller chose: a new id is free.

    Raises:
        NotAnAgentRun: (a ValueError) naming the workflow's type.
        ValueError: naming the agent whose run holds the id.
    """
    try:
        described = await riding_outages(
            lambda: client.get_workflow_handle(run_id).describe(),
            client,
            what=f"reading run {run_id!r}",
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return  # gone again meanwhile: the wait for it says so
        raise
    if described.workflow_type != WORKFLOW_TYPE:
        raise NotAnAgentRun(run_id, described.workflow_type)
    if agent is None:
        return
    owner = await riding_outages(
        lambda: started_agent(client, run_id, described.run_id),
        client,
        what=f"reading run {run_id!r}",
    )
    if owner is not None and owner != agent:
        raise ValueError(
            f"Run {run_id!r} belongs to agent {owner!r}, not {agent!r}: a run id names one "
            f"run of one agent, so give this run another run id (or run it with {owner!r} "
            "to attach to that run)"
        )
