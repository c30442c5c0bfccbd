"""Connecting to a Temporal server that went away while the connect was under way.

A process that cannot connect at all fails at once when nothing listens at
the address (a wrong address is told in a second, not after minutes). But a
server that took the connection and then died before it answered (killed,
restarting, its host failing over) is an outage, like one that a connected
caller rides out: the process waits for it to come back, says so once on the
`agentor_temporal` logger, within `outage_patience()` seconds.

The main decision: "went away" is told by the address itself, not by the
client's error text: it accepted a TCP connection just before the connect,
the connect failed, and now it refuses one. A server that still accepts
connections but fails the connect (a TLS mismatch, a proxy in front of
nothing) is no outage and fails at once, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

logger = logging.getLogger("agentor_temporal")

T = TypeVar("T")

#: How long a caller waits for an unreachable Temporal server to come back, by
#: default: a server restart (a crash, an upgrade, a Postgres failover) takes
#: seconds to a minute or two; a caller held much longer is better told.
OUTAGE_PATIENCE = 300.0
#: The environment variable that changes it (seconds; 0 gives up at once).
OUTAGE_PATIENCE_ENV = "AGENTOR_OUTAGE_PATIENCE"
#: How long a TCP check of the address may take: one that does not answer in it
#: tells nothing (a slow link), and the connect then goes as it did before.
_TCP_CHECK_TIMEOUT = 2.0
#: Pauses between checks while the server is away (then the last, repeated).
_BACKOFF = (0.25, 0.5, 1.0, 2.0)


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


def _endpoint(address: str) -> tuple[str, int] | None:
    """The TCP host and port of a Temporal address (`host:port`, `[v6]:port`, a URL,
    with `user:password@`), or None when it names none plainly."""
    rest = address.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


async def accepts(address: str) -> bool | None:
    """Whether `address` accepts a TCP connection now: None when that is not known
    (an address of another form, or a check that went unanswered)."""
    endpoint = _endpoint(address)
    if endpoint is None:
        return None
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*endpoint), _TCP_CHECK_TIMEOUT)
    except TimeoutError:
        return None
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def through_restart(
    connecting: Callable[[], Awaitable[T]], address: str, shown: str, failure: str
) -> T:
    """`connecting()` again once the server at `address`, which went away while it
    connected, accepts connections again; within `outage_patience()` seconds.

    Args:
        connecting: makes a fresh connect each call.
        address: the address to check.
        shown: the address as messages show it (credentials masked).
        failure: why the first connect failed, in one clause.

    Raises:
        TimeoutError: past the patience with the server still away.
        Exception: what a connect made while the server accepts raised.
    """
    patience = outage_patience()
    began = time.monotonic()
    logger.warning(
        "Temporal at %s went away while this process connected (%s): it took the "
        "connection, then stopped listening; waiting up to %.0f s for it to come back",
        shown,
        failure,
        patience,
    )
    attempt = 0
    while True:
        left = patience - (time.monotonic() - began)
        if left <= 0:
            raise TimeoutError(f"away for {time.monotonic() - began:.0f} s")
        await asyncio.sleep(min(_BACKOFF[min(attempt, len(_BACKOFF) - 1)], left))
        attempt += 1
        if await accepts(address) is False:
            continue
        try:
            return await connecting()
        except Exception as exc:
            # gone again (it restarts once more), or back but its frontend not yet
            # healthy: still the outage; anything else is told at once
            if await accepts(address) is not False and not _starting(exc):
                raise


def _starting(exc: BaseException) -> bool:
    """Whether a connect failed as one to a server still starting does."""
    text = str(exc).lower()
    return any(word in text for word in ("not healthy", "unavailable", "connection refused"))
