"""Riding out a Temporal server outage while a caller waits on a run.

The run itself survives a server restart (its state is in the server's
database, its workers reconnect), but the client SDK gives up on a call
after about 10 s of failed retries. A caller waiting in `run()`, `resume()`,
a stream or a decision would then fail for an outage the run does not even
notice. `riding_outages` repeats such a wait, or one idempotent step of it,
while Temporal is unreachable, for up to `outage_patience()` seconds per
outage; it says so once on the `agentor_temporal` logger, and past the bound
raises `ConnectionFailed` naming the address and what to do.

Only steps that are safe to repeat are wrapped: reads, waits, a start by
workflow id (a repeated start attaches to the run the first one made, or is
deduplicated by its request id), and an update sent again under its id.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._dev_server import ConnectionFailed

logger = logging.getLogger("agentor_temporal")

T = TypeVar("T")

#: How long a caller waits for an unreachable Temporal server to come back, by
#: default: a server restart (a crash, an upgrade, a Postgres failover) takes
#: seconds to a minute or two; a caller held much longer is better told.
OUTAGE_PATIENCE = 300.0
#: The environment variable that changes it (seconds; 0 gives up at once).
OUTAGE_PATIENCE_ENV = "AGENTOR_OUTAGE_PATIENCE"
#: A step that ran this long before failing was connected meanwhile: its
#: failure begins a new outage (each gets the whole patience). A step failing
#: while the server is down fails within the SDK's own retries (~10 s).
_NEW_OUTAGE_AFTER = 60.0
#: Pauses between attempts while the server is down (then the last, repeated).
_BACKOFF = (0.25, 0.5, 1.0, 2.0)
#: How long one probe of the server may take.
_PROBE_TIMEOUT = timedelta(seconds=2)


def outage_patience() -> float:
    """Seconds to wait for an unreachable server (`AGENTOR_OUTAGE_PATIENCE`, else 300)."""
    raw = os.environ.get(OUTAGE_PATIENCE_ENV)
    if not raw:
        return OUTAGE_PATIENCE
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"{OUTAGE_PATIENCE_ENV}={raw!r} is not a number of seconds (default "
            f"{OUTAGE_PATIENCE:g})"
        ) from None
    if not value >= 0:  # NaN too
        raise ValueError(f"{OUTAGE_PATIENCE_ENV} must be 0 or more seconds, got {raw!r}")
    return value


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the Temporal server could not be reached (or went away mid-call)."""
    if not isinstance(exc, RPCError):
        return False
    if exc.status == RPCStatusCode.UNAVAILABLE:
        return True
    text = str(exc.message).lower()
    # a call in flight when the server died: the connection broke under it
    return exc.status in (RPCStatusCode.UNKNOWN, RPCStatusCode.CANCELLED) and any(
        word in text for word in ("transport error", "connection", "broken pipe", "h2 protocol")
    )


def gave_up(address: str, waited: float, run_id: str | None, what: str) -> str:
    """What to tell a caller whose wait outlasted the server's outage."""
    run = f"Run {run_id!r} goes on in Temporal (nothing is lost or cancelled): " if run_id else ""
    again = f"`resume({run_id!r})` re-attaches to it" if run_id else "try again"
    return (
        f"Temporal at {address} has been unreachable for at least {waited:.0f} s while {what}; "
        f"gave up waiting ({OUTAGE_PATIENCE_ENV} sets how long, default {OUTAGE_PATIENCE:g} s). "
        f"{run}once the server is back, {again}. Check that the server is up."
    )


async def riding_outages(
    step: Callable[[], Awaitable[T]],
    client: Client,
    *,
    what: str,
    run_id: str | None = None,
) -> T:
    """`await step()`, repeated while Temporal is unreachable, within `outage_patience()`.

    `step` must be safe to repeat from its beginning.

    Args:
        step: makes a fresh awaitable each call.
        client: the client the step uses (for the address in messages).
        what: what the caller is doing, for messages ("waiting for run x").
        run_id: the run waited on, if any (the error says how to re-attach).

    Raises:
        ConnectionFailed: when the server stayed unreachable past the patience.
    """
    patience = outage_patience()
    began: float | None = None
    attempt = 0
    while True:
        started = time.monotonic()
        try:
            result = await step()
        except Exception as exc:
            if not unreachable(exc):
                raise
            now = time.monotonic()
            if began is None or now - started > _NEW_OUTAGE_AFTER:
                goes_on = " (the run goes on in Temporal meanwhile)" if run_id else ""
                logger.warning(
                    "Temporal at %s is unreachable (%s) while %s; waiting up to %.0f s for it "
                    "to come back%s",
                    _address(client),
                    _short(exc),
                    what,
                    patience,
                    goes_on,
                )
                began, attempt = now, 0
            # then asked cheaply, after each pause, whether the server is back:
            # the step itself would spend the SDK's ~10 s of retries on each try
            while True:
                waited = time.monotonic() - began
                if waited >= patience:
                    raise ConnectionFailed(
                        gave_up(_address(client), waited, run_id, what)
                    ) from None
                pause = _BACKOFF[min(attempt, len(_BACKOFF) - 1)]
                await asyncio.sleep(min(pause, patience - waited))
                attempt += 1
                if await _answers(client):
                    break
            continue
        return result


async def until_reachable(client: Client, *, what: str, run_id: str | None = None) -> None:
    """Return once the server answers, as `riding_outages` waits (a warning, then the bound).

    For a caller whose own call failed for an outage and that cannot simply
    repeat it (a stream's subscription): it asks again once the server is back.

    Raises:
        ConnectionFailed: when the server stayed unreachable past the patience.
    """
    await riding_outages(lambda: _probe(client), client, what=what, run_id=run_id)


async def _probe(client: Client) -> None:
    """One cheap call to the server, no retries; raises as the call did."""
    await client.workflow_service.get_system_info(
        GetSystemInfoRequest(), retry=False, timeout=_PROBE_TIMEOUT
    )


async def _answers(client: Client) -> bool:
    """Whether the server answers now."""
    try:
        await _probe(client)
    except RPCError as exc:
        return not unreachable(exc) and exc.status != RPCStatusCode.DEADLINE_EXCEEDED
    return True


def _address(client: Client) -> str:
    return client.service_client.config.target_host


def _short(exc: BaseException) -> str:
    message = str(getattr(exc, "message", exc)).strip()
    text = message.splitlines()[0] if message else ""
    return text[:200] or type(exc).__name__
