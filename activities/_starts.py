"""Starts of one tool call that never ended, counted on the server across processes.

A call whose worker is lost runs again on the next worker: the tool may have
done its work, but its answer never reached the server. A tool that itself
kills its process (`os._exit`, a crash in native code, memory the kernel
kills the process for) or holds the GIL past the heartbeat timeout looks
exactly like that, and would be started again on every worker of a fleet,
for ever. Temporal's attempt count cannot bound it: handbacks (a busy or
stopping worker, a worker built differently) are attempts too, and a rolling
deploy makes hundreds of them.

So every attempt after the first records in its heartbeat details, before it
starts the tool and acknowledged by the server, that it did; it records the
start as ended before it hands the task back or asks for a retry. The next
attempt reads those details: a recorded start not ended was lost with its
worker. Once `policies.LOST_TOOL_STARTS` starts were lost, the call is not
started again and the model is told why. The first attempt records nothing,
so a call that ends on its first attempt (nearly every call) costs no extra
request, and a tool is started at most `LOST_TOOL_STARTS + 1` times.

Every heartbeat of an attempt carries the details it holds (`beat_details`):
a heartbeat without details would erase them on the server.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.workflowservice.v1 import RecordActivityTaskHeartbeatRequest

logger = logging.getLogger(__name__)

#: Key of the count in the heartbeat details (a dict, so other keys can join it).
_LOST = "agentor_lost_starts"
_RUNNING = "agentor_running"
#: Seconds an acknowledged heartbeat may take before the attempt goes on without it.
_RECORD_TIMEOUT = 5.0


@dataclass
class _Held:
    """The details one attempt beats with: what it received, or what it recorded since."""

    value: dict[str, Any]
    payloads: list[Payload] = field(default_factory=list)


#: By task token: the details each attempt's heartbeats carry.
_HELD: dict[bytes, _Held] = {}


@dataclass
class Starts:
    """What one attempt knows of the call's earlier starts."""

    lost: int = 0
    #: this attempt recorded its own start (so must record its end)
    recorded: bool = False


def received() -> dict[str, Any] | None:
    """The details the running attempt was started with, if they are ours."""
    if not activity.in_activity():
        return None
    details = activity.info().heartbeat_details
    if details and isinstance(details[0], dict) and _LOST in details[0]:
        return details[0]
    return None


async def hold_received() -> bool:
    """Keep the details this attempt received in its heartbeats; whether it has any.

    An attempt that beats before it reaches the tool (a late attempt beats at
    once), or never reaches it (handed back), must not erase the count.
    """
    value = received()
    if value is None:
        return False
    await _hold(value)
    return True


def beat_payloads(token: bytes) -> list[Payload]:
    """The details the heartbeats of the attempt with task `token` carry (from any thread)."""
    held = _HELD.get(token)
    return held.payloads if held is not None else []


def beat_values() -> list[Any]:
    """The running attempt's details, for `activity.heartbeat(*values)`."""
    held = _HELD.get(activity.info().task_token)
    return [held.value] if held is not None else []


def release() -> None:
    """The running attempt stops beating: forget what it held."""
    _HELD.pop(activity.info().task_token, None)


async def begin(limit: int) -> Starts:
    """Before the tool starts: how many starts were lost, and record this one (attempt 2 on).

    With `limit` or more lost, nothing is recorded: the caller does not start the tool.
    """
    if not activity.in_activity() or activity.info().is_local or activity.info().attempt < 2:
        return Starts()
    value = received() or {}
    lost = int(value.get(_LOST, 0)) + (1 if value.get(_RUNNING) else 0)
    if lost >= limit:
        return Starts(lost=lost)
    recorded = await _record({_LOST: lost, _RUNNING: True})
    return Starts(lost=lost, recorded=recorded)


async def end(starts: Starts) -> None:
    """The start this attempt recorded ended: the tool is not what the next attempt retries."""
    if starts.recorded:
        starts.recorded = not await _record({_LOST: starts.lost, _RUNNING: False})


async def _hold(value: dict[str, Any]) -> None:
    held = _Held(value)
    try:
        held.payloads = await activity.client().data_converter.encode([value])
    except RuntimeError:  # no client (a test environment)
        held.payloads = activity.payload_converter().to_payloads([value])
    _HELD[activity.info().task_token] = held


async def _record(value: dict[str, Any]) -> bool:
    """Hold `value` and have the server record it now; whether it acknowledged."""
    await _hold(value)
    info = activity.info()
    try:
        client = activity.client()
    except RuntimeError:
        return False  # no client (a test environment): nothing to record on
    request = RecordActivityTaskHeartbeatRequest(
        task_token=info.task_token,
        details=Payloads(payloads=_HELD[info.task_token].payloads),
        identity=client.identity,
        namespace=client.namespace,
    )
    try:
        await asyncio.wait_for(
            client.workflow_service.record_activity_task_heartbeat(request),
            _RECORD_TIMEOUT,
        )
    except Exception as exc:  # the count is a bound, not the call's outcome
        logger.warning(
            "Could not record the start of %s attempt %d of run %s: %s",
            info.activity_type,
            info.attempt,
            info.workflow_id,
            exc,
        )
        return False
    return True
