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
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._dev_server import ConnectionFailed
from agentor_temporal._reconnect import OUTAGE_PATIENCE, OUTAGE_PATIENCE_ENV, outage_patience
from agentor_temporal.activities._redact import clean
from agentor_temporal.workflows.redaction import redact_address

logger = logging.getLogger("agentor_temporal")

T = TypeVar("T")

#: A step that ran this long before failing was connected meanwhile: its
#: failure begins a new outage (each gets the whole patience). A step failing
#: while the server is down fails within the SDK's own retries (~10 s).
_NEW_OUTAGE_AFTER = 60.0
#: Pauses between attempts while the server is down (then the last, repeated).
_BACKOFF = (0.25, 0.5, 1.0, 2.0)
#: How long one probe of the server may take.
_PROBE_TIMEOUT = timedelta(seconds=2)
#: The most a probe may take once probes time out: a server that holds the
#: connection may be slow, not gone (a congested link, an overloaded frontend),
#: and one whose every answer takes longer than `_PROBE_TIMEOUT` is back all
#: the same; the probe's deadline doubles up to this while they time out.
_SLOW_PROBE_TIMEOUT = 60.0
#: A step still unanswered after this long has the server asked whether it is
#: slow (a wait for a run's end may rightly take long: the probe tells them apart);
#: then again every `_SLOW_EVERY` seconds, until it is said once.
_SLOW_AFTER = 10.0
_SLOW_EVERY = 30.0
#: A slow server is said once a client in this long, however many steps wait on it
#: (one `run()` waits in several: the start, the wait for the end, the reading).
_SLOW_SAID_FOR = 300.0
#: How many times in a row a step the server held is asked again at once, unsaid,
#: when the server answers a check right after (a freeze that just ended); past it,
#: the step's own failure (a query no worker takes runs out of time so).
_QUIET_RETRIES = 1
#: When a slow server was last said, by the client's id.
_slow_said: dict[int, float] = {}


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the Temporal server could not be reached (or went away mid-call)."""
    if not isinstance(exc, RPCError):
        return False
    if exc.status == RPCStatusCode.UNAVAILABLE:
        return True
    text = str(exc.message).lower()
    if exc.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED) and (
        "timeout expired" in text
    ):
        # the transport's own deadline: a server that holds the connection and never
        # answers (stopped, overloaded, partitioned away), not one refusing the call
        return True
    if exc.status == RPCStatusCode.DEADLINE_EXCEEDED and "context deadline exceeded" in text:
        # the server's own deadline on the call passed while it did not run it (frozen:
        # a paused VM, SIGSTOP; thawed, it answers so): a held call, as above
        return True
    # a call in flight when the server died: the connection broke under it (or, thawed
    # from a freeze, the server reset the call's stream: "RST_STREAM ... CANCEL")
    return exc.status in (
        RPCStatusCode.UNKNOWN,
        RPCStatusCode.CANCELLED,
        RPCStatusCode.INTERNAL,
    ) and any(
        word in text
        for word in ("transport error", "connection", "broken pipe", "h2 protocol", "rst_stream")
    )


def _held(exc: BaseException) -> bool:
    """Whether a call failed as one the server held unanswered does (its deadline passed,
    its stream reset), not refused: a slow or frozen server, not a gone one."""
    if not isinstance(exc, RPCError):
        return False
    return _timed_out(exc) or any(
        word in str(exc.message).lower() for word in ("deadline exceeded", "rst_stream")
    )


def throttled(exc: BaseException) -> bool:
    """Whether `exc` is the server shedding load (RESOURCE_EXHAUSTED: a namespace or
    frontend rate limit, an overloaded system), which passes as an outage does.

    Not Temporal's caps on one execution's updates or signals: asking again
    meets the same cap (`updates_refused`, `signals_refused` handle those).
    """
    if not isinstance(exc, RPCError) or exc.status != RPCStatusCode.RESOURCE_EXHAUSTED:
        return False
    text = str(exc.message).lower()
    return not any(word in text for word in ("update", "signal"))


def gave_up(
    address: str,
    waited: float,
    run_id: str | None,
    what: str,
    again: str | None = None,
    how: str = "unreachable",
) -> str:
    """What to tell a caller whose wait outlasted the server's outage.

    Args:
        again: how this caller picks the run up again (default: `resume(run_id)`).
    """
    run = f"Run {run_id!r} goes on in Temporal (nothing is lost or cancelled): " if run_id else ""
    if again is None:
        again = f"`resume({run_id!r})` re-attaches to it" if run_id else "try again"
    return (
        f"Temporal at {address} has been {how} for at least {waited:.0f} s while {what}; "
        f"gave up waiting ({OUTAGE_PATIENCE_ENV} sets how long, default {OUTAGE_PATIENCE:g} s). "
        f"{run}{'once' if run else 'Once'} the server is back, {again}. "
        + ("Check that the server is up." if how == "unreachable" else "Check its rate limits.")
    )


@dataclass
class Outage:
    """What a wait that gave up on an unreachable server was about.

    Kept on the `ConnectionFailed` it raises (`outage_of`), so an entry point
    that re-attaches otherwise (the CLI) can say it its own way (`told`).
    """

    address: str
    waited: float
    run_id: str | None
    what: str
    #: what the server was: "unreachable", or "throttling requests (...)"
    how: str = "unreachable"

    def told(self, again: str) -> str:
        """The message, saying `again` for how to pick the run up."""
        return gave_up(self.address, self.waited, self.run_id, self.what, again, self.how)


def outage_of(exc: BaseException) -> Outage | None:
    """The outage a `ConnectionFailed` from `riding_outages` gave up on, if it is one."""
    outage = getattr(exc, "outage", None)
    return outage if isinstance(outage, Outage) else None


class _Downtime:
    """Seconds the server was unreachable while a `patiently` wait went on."""

    def __init__(self, outer: _Downtime | None = None) -> None:
        self.past = 0.0
        self.since: float | None = None
        #: the clock of a `patiently` wait around this one: it counts the same outage
        self.outer = outer

    def total(self) -> float:
        now = time.monotonic()
        return self.past + (now - self.since if self.since is not None else 0.0)

    def begin(self, at: float) -> None:
        if self.since is None:
            self.since = at
        if self.outer is not None:
            self.outer.begin(at)

    def end(self) -> None:
        if self.since is not None:
            self.past += time.monotonic() - self.since
            self.since = None
        if self.outer is not None:
            self.outer.end()


#: The clock of the `patiently` wait a step runs in, if any.
_downtime: ContextVar[_Downtime | None] = ContextVar("agentor_downtime", default=None)
#: How much of a failed step's time counts as the outage (the SDK's own retries).
_SDK_RETRIES = 10.0


async def patiently(aw: Awaitable[T], patience: float, client: Client | None = None) -> T:
    """`asyncio.wait_for(aw, patience)`, its clock stopped while Temporal is unreachable.

    A bound on how long a *worker* may take (to take a decision) is no bound
    on a server outage, which `riding_outages` inside `aw` rides out within
    its own patience: the time it spends on one is not counted.

    Args:
        client: the client `aw` uses. Given, the bound is not reached while it
            cannot reach the server, even before `riding_outages` saw the outage:
            a step spends the SDK's own retries (~10 s) failing first, and a
            bound shorter than that (`approve --wait 5`) ran out in them.

    Raises:
        TimeoutError: past `patience` seconds with the server reachable.
    """
    clock = _Downtime(_downtime.get())
    token = _downtime.set(clock)
    try:
        task = asyncio.ensure_future(aw)  # runs in a copy of this context: with the clock
    finally:
        _downtime.reset(token)
    started = time.monotonic()
    # down time seen here, while no step had yet failed for it (not on `clock`)
    unseen = 0.0
    try:
        while True:
            left = patience + clock.total() + unseen - (time.monotonic() - started)
            if left <= 0:
                asked = time.monotonic()
                if client is None or clock.since is not None or await _answers(client):
                    raise TimeoutError(f"not done within {patience:g} s")
                done, _ = await asyncio.wait({task}, timeout=_BACKOFF[-1])
                unseen += time.monotonic() - asked
                if done:
                    return task.result()
                continue
            done, _ = await asyncio.wait({task}, timeout=left)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def riding_outages(
    step: Callable[[], Awaitable[T]],
    client: Client,
    *,
    what: str,
    run_id: str | None = None,
    again: str | None = None,
    patience: float | None = None,
) -> T:
    """`await step()`, repeated while Temporal is unreachable, within `outage_patience()`.

    `step` must be safe to repeat from its beginning.

    Args:
        step: makes a fresh awaitable each call.
        client: the client the step uses (for the address in messages).
        what: what the caller is doing, for messages ("waiting for run x").
        run_id: the run waited on, if any (the error says how to re-attach).
        again: how this caller re-attaches, for the error (default `resume(run_id)`).
        patience: a shorter bound for this caller (an HTTP read answered 503
            sooner); never past `outage_patience()`.

    Raises:
        ConnectionFailed: when the server stayed unreachable past the patience
            (`outage_of` tells what about).
    """
    patience = min(outage_patience(), patience if patience is not None else math.inf)
    clock = _downtime.get()
    began: float | None = None
    attempt = 0
    slow = _Slowness(client, what, run_id)
    #: steps asked again at once, unsaid, for a server that held them and answers now
    quietly = 0
    while True:
        started = time.monotonic()
        try:
            result = await slow.watching(step())
        except Exception as exc:
            busy = throttled(exc)
            if not (busy or unreachable(exc)):
                raise
            now = time.monotonic()
            how = f"throttling requests ({_short(exc)})" if busy else "unreachable"
            if began is None or now - started > _NEW_OUTAGE_AFTER:
                # a call the server held past its deadline: a freeze that ended (asked
                # again at once, unsaid), or a slow server (said once, as slow)
                reply = await _reply(client) if _held(exc) and not busy else "down"
                if now - started > _NEW_OUTAGE_AFTER:
                    quietly = 0
                if reply == "yes":
                    if quietly >= _QUIET_RETRIES:
                        # the server answers, and the call itself runs out of time (a
                        # query no worker takes): the caller's to handle, as ever
                        raise
                    quietly += 1
                    continue
                goes_on = " (the run goes on in Temporal meanwhile)" if run_id else ""
                if reply != "down":
                    if not slow.said_lately():
                        slow.say(started)
                else:
                    logger.warning(
                        "Temporal at %s is %s while %s; waiting up to %.0f s for it to %s%s",
                        _address(client),
                        how if busy else f"unreachable ({_short(exc)})",
                        what,
                        patience,
                        "take them again" if busy else "come back",
                        goes_on,
                    )
                began, attempt = now, 0
            if clock is not None:
                # down since the step's first failed try, the SDK's retries ago
                clock.begin(max(started, now - _SDK_RETRIES))
            # then asked cheaply, after each pause, whether the server is back:
            # the step itself would spend the SDK's ~10 s of retries on each try
            # (a throttling server answers the probe: the pause is all it gets)
            probe_timeout = _PROBE_TIMEOUT.total_seconds()
            while True:
                waited = time.monotonic() - began
                if waited >= patience:
                    address = _address(client)
                    failed = ConnectionFailed(gave_up(address, waited, run_id, what, again, how))
                    failed.outage = Outage(address, waited, run_id, what, how)  # type: ignore[attr-defined]
                    raise failed from None
                pause = _BACKOFF[min(attempt, len(_BACKOFF) - 1)]
                await asyncio.sleep(min(pause, patience - waited))
                attempt += 1
                if busy:
                    break
                left = patience - (time.monotonic() - began)
                reply = await _reply(client, max(min(probe_timeout, left), 1.0))
                if reply == "yes":
                    break
                if reply == "slow":
                    # it holds the connection: give a slow server the time it takes to
                    # answer, or a run that ended meanwhile is never picked up
                    probe_timeout = min(probe_timeout * 2, _SLOW_PROBE_TIMEOUT)
            if clock is not None:
                clock.end()
            continue
        return result


async def until_reachable(
    client: Client, *, what: str, run_id: str | None = None, again: str | None = None
) -> None:
    """Return once the server answers, as `riding_outages` waits (a warning, then the bound).

    For a caller whose own call failed for an outage and that cannot simply
    repeat it (a stream's subscription): it asks again once the server is back.

    Raises:
        ConnectionFailed: when the server stayed unreachable past the patience.
    """
    await riding_outages(lambda: _probe(client), client, what=what, run_id=run_id, again=again)


async def _probe(client: Client, timeout: float | None = None) -> None:
    """One cheap call to the server, no retries; raises as the call did."""
    await client.workflow_service.get_system_info(
        GetSystemInfoRequest(),
        retry=False,
        timeout=_PROBE_TIMEOUT if timeout is None else timedelta(seconds=timeout),
    )


def _timed_out(exc: RPCError) -> bool:
    """Whether a call ended at its own deadline (the server held it, unanswered)."""
    return exc.status == RPCStatusCode.DEADLINE_EXCEEDED or (
        exc.status == RPCStatusCode.CANCELLED and "timeout expired" in str(exc.message).lower()
    )


async def _reply(client: Client, timeout: float | None = None) -> str:
    """Whether the server answers a probe within `timeout`: "yes", "slow" (the probe ran
    out of time on a connection it holds) or "down" (refused, or the connection broke)."""
    try:
        await _probe(client, timeout)
    except RPCError as exc:
        if _timed_out(exc):
            return "slow"
        return "down" if unreachable(exc) else "yes"
    return "yes"


async def _answers(client: Client) -> bool:
    """Whether the server answers now."""
    return await _reply(client) == "yes"


class _Slowness:
    """Says once, on the logger, that the server is slow while one caller's steps wait on it.

    A step that takes long is no sign of trouble by itself (a wait for a run's
    end lasts as long as the run); a probe that the server does not answer
    within `_PROBE_TIMEOUT` while it goes on is.
    """

    def __init__(self, client: Client, what: str, run_id: str | None) -> None:
        self.client = client
        self.what = what
        self.run_id = run_id
        self.said = False

    def said_lately(self) -> bool:
        """Whether this caller, or another step of its client's, said the server slow lately."""
        return self.said or self._said_lately()

    def _said_lately(self) -> bool:
        said = _slow_said.get(id(self.client))
        return said is not None and time.monotonic() - said < _SLOW_SAID_FOR

    async def watching(self, aw: Awaitable[T]) -> T:
        """`await aw`, the server asked meanwhile whether it is slow (until said once)."""
        if self.said or self._said_lately():
            return await aw
        watcher = asyncio.ensure_future(self._watch(time.monotonic()))
        try:
            return await aw
        finally:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher

    async def _watch(self, started: float) -> None:
        await asyncio.sleep(_SLOW_AFTER)
        while True:
            reply = await _reply(self.client)
            if reply == "down":
                return  # the step fails for it, and the outage is said then
            if reply == "slow":
                break
            await asyncio.sleep(_SLOW_EVERY)
        if not self._said_lately():  # else another step of this client's said it meanwhile
            self.say(started)

    def say(self, started: float) -> None:
        """Say the server slow for this client (a call of it waiting since `started`)."""
        now = time.monotonic()
        for key, said in list(_slow_said.items()):
            if now - said >= _SLOW_SAID_FOR:
                del _slow_said[key]
        _slow_said[id(self.client)] = now
        goes_on = " (the run goes on in Temporal meanwhile)" if self.run_id else ""
        logger.warning(
            "Temporal at %s is slow to answer while %s: a call has waited %.0f s and the "
            "server did not answer a check within %g s; still waiting%s",
            _address(self.client),
            self.what,
            now - started,
            _PROBE_TIMEOUT.total_seconds(),
            goes_on,
        )
        self.said = True


def _address(client: Client) -> str:
    return redact_address(client.service_client.config.target_host)


def _short(exc: BaseException) -> str:
    """The first line of the server's message, masked, then cut for a line: cut first, a key
    or a URL's password across the cut was left in part, which no later masking knew."""
    message = str(getattr(exc, "message", exc)).strip()
    text = clean(message.splitlines()[0]) if message else ""
    return text[:200] or type(exc).__name__
