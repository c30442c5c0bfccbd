"""Waiting for a run's execution to close, and what its close event carries.

`closed` is `WorkflowHandle.result()` (following continued and retried
executions, and reset ones, the same errors for a run that did not complete) that also hands
back the run's whole log when the result's payload carries it
(`policies.RESULT_EVENTS`): the caller then has the run's `RunResult` from
the close event it waited for, with no read of the run's history after it.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHistoryEventFilterType,
)
from temporalio.exceptions import CancelledError, TerminatedError, TimeoutError, TimeoutType
from temporalio.service import RPCError

from agentor_temporal.store import Event
from agentor_temporal.workflows.policies import RESULT_EVENTS


async def closed(client: Client, run_id: str) -> tuple[Any, list[Event] | None]:
    """(the run's result, its whole log when the result carries it, else None).

    Raises:
        WorkflowFailureError: as `WorkflowHandle.result()` does, for an
            execution that failed, was cancelled or terminated, or timed out.
    """
    execution: str | None = None
    converter = client.data_converter
    while True:
        following = execution
        handle = client.get_workflow_handle(run_id, run_id=execution)
        async for event in handle.fetch_history_events(
            wait_new_event=True,
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT,
            skip_archival=True,
        ):
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                done = event.workflow_execution_completed_event_attributes
                if done.new_execution_run_id:  # a cron run's next
                    execution = done.new_execution_run_id
                    break
                values = await converter.decode_wrapper(done.result)
                payload = done.result.payloads[0] if done.result.payloads else None
                return (values[0] if values else None), whole_log(payload)
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                failed = event.workflow_execution_failed_event_attributes
                if failed.new_execution_run_id:  # retried
                    execution = failed.new_execution_run_id
                    break
                raise WorkflowFailureError(cause=await converter.decode_failure(failed.failure))
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
                details = event.workflow_execution_canceled_event_attributes.details
                cause = CancelledError(
                    "Workflow cancelled", *await converter.decode_wrapper(details)
                )
                raise WorkflowFailureError(cause=cause)
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                reset_into = await _reset_into(client, run_id, execution)
                if reset_into is not None:
                    execution = reset_into
                    break
                ended = event.workflow_execution_terminated_event_attributes
                reason = ended.reason or "Workflow terminated"
                raise WorkflowFailureError(
                    cause=TerminatedError(reason, *await converter.decode_wrapper(ended.details))
                )
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
                timed_out = event.workflow_execution_timed_out_event_attributes
                if timed_out.new_execution_run_id:
                    execution = timed_out.new_execution_run_id
                    break
                raise WorkflowFailureError(
                    cause=TimeoutError(
                        "Workflow timed out",
                        type=TimeoutType.START_TO_CLOSE,
                        last_heartbeat_details=[],
                    )
                )
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                execution = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
                break
        if execution == following:
            raise RuntimeError(f"Temporal returned no close event for run {run_id!r}")


async def _reset_into(client: Client, run_id: str, execution: str | None) -> str | None:
    """The execution a reset (`temporal workflow reset`) ended this one for, if it did.

    A reset terminates the execution it starts from, and the run goes on in
    the new one: a caller waiting on the run was told it had failed (with the
    reset's reason) while it ran on. The close event does not link the two:
    the terminated execution, asked by id, names the new one; asked as the
    latest (`execution` None), the new one answers, running since a reset.
    """
    try:
        description = await client.get_workflow_handle(run_id, run_id=execution).describe()
    except RPCError:
        return None  # told as terminated, as before
    info = description.raw_description.workflow_extended_info
    if info.reset_run_id:
        return str(info.reset_run_id)
    if (
        execution is None
        and description.status != WorkflowExecutionStatus.TERMINATED
        and info.HasField("last_reset_time")
    ):
        return str(description.run_id)
    return None


def whole_log(payload: Payload | None) -> list[Event] | None:
    """The events a result's payload carries as the run's whole log, or None."""
    raw = payload.metadata.get(RESULT_EVENTS) if payload is not None else None
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return [Event.from_dict(item) for item in data] if isinstance(data, list) else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # not ours to trust: the run's history is read instead
