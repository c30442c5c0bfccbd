"""Telling a waiting caller that its run's workflow task fails on every try.

A workflow task that fails (a worker without the run's encryption key, a
non-determinism error after a code change, a worker of an older build) is
retried by Temporal for as long as the run lives: the run neither moves nor
ends, and a caller of `arun()`, `resume()` or `stream()` waited in silence.
While it waits, the caller looks at the run's pending workflow task now and
then (`DescribeWorkflowExecution`, no worker needed); once the task has
failed `STUCK_ATTEMPTS` times in a row, it logs one warning naming the run
and the task's failure (its first one, which history records) and goes on
waiting: a worker that can run the task (given the key, the old build) still
finishes the run.

A run whose task queue no worker polls (a plain client's start on a queue
of its own, a worker stopped for good) never fails a task: its task waits,
unstarted. A caller waiting on it is told so, naming the queue, and `show`
says it under the run's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from temporalio.api.enums.v1 import EventType, PendingWorkflowTaskState, TaskQueueType
from temporalio.api.failure.v1 import Failure
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import Client

logger = logging.getLogger("agentor_temporal")

#: Failed attempts of one workflow task before the caller is told (Temporal
#: retries a failed task at once, then about every 10 s: a task failing once
#: under load is not worth a warning).
STUCK_ATTEMPTS = 3
#: How soon the waiting caller first looks at the run's pending workflow task.
#: Each look after one that found the run moving comes `STUCK_BACKOFF` times
#: later, up to `STUCK_POLL_LIMIT` times `STUCK_POLL` (10 s, 15 s, ... 2
#: minutes): one describe per waiting caller, and a thousand callers waiting
#: for a person's decision cost the server 8 a second, not 100.
STUCK_POLL = 10.0
STUCK_BACKOFF = 1.5
STUCK_POLL_LIMIT = 12.0
#: History events read back from the end looking for the task's failure.
FAILURE_LOOKBACK = 200


async def stuck_reason(client: Client, run_id: str) -> str | None:
    """Why the run's pending workflow task keeps failing, or None while it does not."""
    described = await client.get_workflow_handle(run_id).describe()
    raw = described.raw_description
    if described.close_time is not None:
        return None
    attempt = raw.pending_workflow_task.attempt
    if attempt < STUCK_ATTEMPTS:
        return None
    failure = await _last_task_failure(client, run_id, raw.workflow_execution_info.execution.run_id)
    return f"its workflow task has failed {attempt - 1} times in a row: {failure.rstrip('.')}"


async def unpolled_queue(client: Client, run_id: str) -> str | None:
    """The task queue the run's workflow task waits on unstarted with no worker polling it.

    None while the run is closed, its task started or failed (`stuck_reason`),
    or some worker polls the queue.
    """
    raw = (await client.get_workflow_handle(run_id).describe()).raw_description
    task = raw.pending_workflow_task
    if raw.workflow_execution_info.HasField("close_time") or not raw.HasField(
        "pending_workflow_task"
    ):
        return None
    if task.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        return None
    queue = raw.execution_config.task_queue.name
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return None if described.pollers else queue


def unpolled_advice(run_id: str, queue: str) -> str:
    """What to do about a run whose task queue no worker polls."""
    return (
        f"Run {run_id} is not moving: it waits on task queue {queue!r}, which no worker "
        "polls. Start a worker of its agent on that queue (`agentor-temporal worker "
        f"--agents MODULE:ATTR --task-queue {queue}`), or end the run (`temporal workflow "
        f"terminate --workflow-id {run_id}`)"
    )


async def _last_task_failure(client: Client, run_id: str, execution: str) -> str:
    """The message of the latest failed workflow task in the execution's history."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace, maximum_page_size=FAILURE_LOOKBACK
    )
    request.execution.workflow_id = run_id
    request.execution.run_id = execution
    response = await client.workflow_service.get_workflow_execution_history_reverse(request)
    for event in response.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return await _message(client, event.workflow_task_failed_event_attributes.failure)
    return "(its failure is not in the latest history events)"


async def _message(client: Client, failure: Failure) -> str:
    """A failure's message, decoded when its attributes are encoded (an encrypted app)."""
    try:
        error = await client.data_converter.decode_failure(failure)
    except Exception:  # a codec that cannot read it: the raw message is all there is
        return failure.message or "(no message)"
    return str(error) or failure.message or "(no message)"


def poll_intervals() -> Iterator[float]:
    """The waits between looks at the run: `STUCK_POLL`, growing to its cap."""
    interval = STUCK_POLL
    while True:
        yield interval
        interval = min(interval * STUCK_BACKOFF, STUCK_POLL * STUCK_POLL_LIMIT)


async def warn_when_stuck(client: Client, run_id: str) -> None:
    """Log one warning once the run's workflow task fails on every try; then return."""
    for interval in poll_intervals():
        await asyncio.sleep(interval)
        try:
            reason = await stuck_reason(client, run_id)
            queue = None if reason is not None else await unpolled_queue(client, run_id)
        except Exception:  # an outage, a run gone: the caller's own wait says so
            continue
        if queue is not None:
            logger.warning("%s; the caller goes on waiting.", unpolled_advice(run_id, queue))
            return
        if reason is not None:
            logger.warning(
                "Run %s is not moving: %s. Temporal retries the task for as long as the run "
                "lives, so the run waits for a worker that can run it (one with the run's "
                "encryption key, or of the build that started it): fix the worker, or end the "
                "run (`temporal workflow terminate --workflow-id %s`; a cancel needs the same "
                "task to run; `resume` goes on from what it recorded).",
                run_id,
                reason,
                run_id,
            )
            return


@contextlib.asynccontextmanager
async def watching_stuck(client: Client, run_id: str) -> AsyncIterator[None]:
    """Run `warn_when_stuck` while the body waits for the run."""
    watch = asyncio.ensure_future(warn_when_stuck(client, run_id))
    try:
        yield
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
