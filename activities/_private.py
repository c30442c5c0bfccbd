"""Helpers shared by the activities: heartbeating and error text."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from temporalio import activity

from agentor_temporal.activities import _redact, _starts
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.policies import HEARTBEAT_INTERVAL

logger = logging.getLogger(__name__)

#: Longest error text passed back to the model or into an event.
MAX_ERROR_CHARS = 4_000
#: Characters of a long text's start and end a log line keeps (`excerpt`):
#: a message's cause is as often at its end (the last line of a traceback).
LOG_HEAD_CHARS = 2_000
LOG_TAIL_CHARS = 1_000
#: Characters beyond each end `clip` and `excerpt` keep that are masked with what they
#: keep (as `tools.failure_text` masks a tool's long error): a key across the cut is
#: still whole, and no more is read (`_ends`).
MASKED_MARGIN = 64_000


@contextlib.asynccontextmanager
async def heartbeating(interval: float = HEARTBEAT_INTERVAL.total_seconds()) -> AsyncIterator[None]:
    """Heartbeat from a thread while the body awaits one long call.

    A model request or a tool is one long await; without this, a worker that
    dies mid-call is noticed only when start-to-close expires (minutes), not
    after the short heartbeat timeout. Calls shorter than `interval` never
    heartbeat at all, which keeps the server's load flat at high concurrency.
    The beats do not wait for the event loop: a loop blocked for seconds (a
    tool calling `time.sleep`) does not make a live call look dead and run
    again elsewhere; one blocked past `STALLED_LOOP_LIMIT` does.
    """
    from agentor_temporal.activities._joining import IN_SHARED_CALL

    # a shared call (see LiveCalls) is beaten for by the attempts awaiting it;
    # a local activity has no heartbeat (its workflow task is kept alive)
    if not activity.in_activity() or IN_SHARED_CALL.get() or activity.info().is_local:
        yield
        return
    # The heartbeat timeout runs from when the server handed the task out;
    # a busy worker may start the body seconds later. Beating on the
    # server's clock (at once, if late) keeps such a call from being timed
    # out while it runs, and costs nothing when the worker is idle.
    started = activity.info().started_time
    lag = max(0.0, time.time() - started.timestamp()) if started else 0.0
    await _starts.hold_received()  # the beats must not erase an earlier attempt's count
    try:
        send = _core_heartbeat()
        if send is not None:
            pulse = _Pulse.of(asyncio.get_running_loop())
            beating = _BEATER.add(send, interval, max(0.0, interval - lag), pulse)
            try:
                yield
            finally:
                _BEATER.remove(beating)
                pulse.release()
            return

        # an SDK without the path `_core_heartbeat` takes: beat from the loop
        async def beat() -> None:
            await asyncio.sleep(max(0.0, interval - lag))
            while True:
                activity.heartbeat(*_starts.beat_values())
                await asyncio.sleep(interval)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        _starts.release()


@contextlib.contextmanager
def tool_heartbeats(name: str) -> Iterator[None]:
    """Inside: a tool's own `activity.heartbeat(...)` beats with the attempt's details.

    A tool's details replace the attempt's on the server, erasing the start
    count `_starts` keeps there; and details the worker cannot encode (any
    object) would fail the call, which Temporal then runs again, for ever.
    So a tool's beat says only that it is alive: its details are not sent.
    It works from a sync tool's thread too.
    """
    if not activity.in_activity() or activity.info().is_local:
        yield
        return
    from agentor_temporal.activities._joining import IN_SHARED_CALL

    context = activity._Context.current()
    # a shared call is beaten for by the attempts awaiting it (see `heartbeating`)
    shared = IN_SHARED_CALL.get()
    send = None if shared else _core_heartbeat()
    original = None if shared else context.heartbeat
    loop = asyncio.get_running_loop()
    warned = False

    def beat(*details: Any) -> None:
        nonlocal warned
        if details and not warned:
            warned = True
            # cut here, redacted first (`clip`): `%.200r` would cut inside a key
            logger.debug(
                "Tool %s heartbeat details are not recorded: %s", name, clip(repr(details), 200)
            )
        if send is not None:
            send()
        elif original is not None and _on_loop(loop):
            original(*_starts.beat_values())

    token = activity._Context.set(dataclasses.replace(context, heartbeat=beat))
    try:
        yield
    finally:
        activity._Context.reset(token)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the caller runs on `loop`'s thread (the SDK's heartbeat works only there)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _core_heartbeat() -> Callable[[], None] | None:
    """Send the running activity's heartbeat from any thread (None if unsupported).

    It carries the details the attempt holds (`_starts`), usually none.

    `activity.heartbeat()` only schedules a task on the worker's event loop,
    so a blocked loop sends none. This reaches the SDK core the same way that
    task ends (`record_activity_heartbeat` on the bridge worker), without the
    loop; `tests/integration/test_live_retry.py` fails if an SDK release takes
    the path away, rather than letting heartbeats fall back unnoticed.
    """
    try:
        from temporalio.bridge.proto import ActivityHeartbeat

        outbound: Any = activity._Context.current().heartbeat
        outbound = getattr(outbound, "__self__", None)
        while outbound is not None and not hasattr(outbound, "_worker"):
            outbound = getattr(outbound, "next", None)
        bridge: Callable[[], Any] = outbound._worker._bridge_worker
        token = activity.info().task_token
    except (AttributeError, ImportError, RuntimeError):
        return None

    def send() -> None:
        beat = ActivityHeartbeat(task_token=token, details=_starts.beat_payloads(token))
        bridge().record_activity_heartbeat(beat)

    return send


class _Pulse:
    """Shows that one event loop runs: a task that notes the time every second.

    Only while calls on that loop are beating; the heartbeat thread stops
    beating for them once the loop has not run for `STALLED_LOOP_LIMIT`.
    """

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pulse] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.seen = time.monotonic()
        self.users = 0
        self.task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Pulse:
        pulse = cls._of.get(loop)
        if pulse is None:
            pulse = cls._of[loop] = cls()
        pulse.users += 1
        pulse.seen = time.monotonic()
        if pulse.task is None or pulse.task.done():
            pulse.task = loop.create_task(pulse._run())
        return pulse

    def release(self) -> None:
        self.users -= 1

    async def _run(self) -> None:
        while self.users > 0:
            self.seen = time.monotonic()
            await asyncio.sleep(1.0)


@dataclass(eq=False)
class _Beating:
    send: Callable[[], None]
    interval: float
    due: float
    pulse: _Pulse


class _Beater:
    """One daemon thread sending the heartbeats of every call that is beating."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: set[_Beating] = set()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(
        self, send: Callable[[], None], interval: float, first: float, pulse: _Pulse
    ) -> _Beating:
        beating = _Beating(send, interval, time.monotonic() + first, pulse)
        with self._lock:
            self._calls.add(beating)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="agentor-heartbeats", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return beating

    def remove(self, beating: _Beating) -> None:
        with self._lock:
            self._calls.discard(beating)

    def _run(self) -> None:
        while True:
            with self._lock:
                calls = list(self._calls)
            now = time.monotonic()
            stalled = policies.STALLED_LOOP_LIMIT.total_seconds()
            for beating in calls:
                if now < beating.due:
                    continue
                beating.due = now + beating.interval
                if now - beating.pulse.seen > stalled:
                    continue  # a hung loop: let the server time the call out
                with contextlib.suppress(Exception):  # a worker shutting down
                    beating.send()
            soonest = min((b.due for b in calls), default=now + 1.0)
            self._wake.wait(max(0.05, min(soonest - time.monotonic(), 1.0)))
            self._wake.clear()


_BEATER = _Beater()


def waited() -> float:
    """Seconds since the running activity was first scheduled (0 outside a worker).

    Retries of one call share this clock, so budgets measured on it (how long
    a provider may keep failing, how long a task waits for the right worker)
    do not restart with each attempt.
    """
    if not activity.in_activity():
        return 0.0
    first = activity.info().scheduled_time.timestamp()
    return max(0.0, time.time() - first) if first > 0 else 0.0


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` cut to `limit` characters, saying so when it was cut.

    Redacted first (`_redact.clean`): a cut inside a key or a URL's credentials
    would leave a piece that no later redaction recognises.
    """
    size = len(text)
    text = _redact.clean(_ends(text, limit, 0))
    if len(text) <= limit:
        return text
    cut = max(len(text), size) - limit
    return text[:limit] + f"... [truncated {cut} characters]"


def _ends(text: str, head: int, tail: int) -> str:
    """Of a long `text`, only what is masked to show its first `head` and last `tail`
    characters: those and `MASKED_MARGIN` more each side of the cut.

    Masked whole, a model provider's 30 MB error message held the interpreter's lock up
    to 14 s at a time in single regular-expression searches: every call of the worker
    stopped beating, the server timed them out (the failed request itself, sent again
    each time, 10 times over) and gave a live tool call to another worker, which ran it
    again. A line break stands for the middle, so no key is made of the two ends.
    """
    if len(text) <= head + tail + 2 * MASKED_MARGIN:
        return text
    start = text[: head + MASKED_MARGIN]
    return start + "\n\n" + text[-(tail + MASKED_MARGIN) :] if tail else start


def excerpt(
    text: str, head: int = LOG_HEAD_CHARS, tail: int = LOG_TAIL_CHARS, size: int | None = None
) -> str:
    """`text` for a log line: whole if short, else its start, its end and its size.

    Redacted first, as `clip` is: the log filter cannot mask a key cut in two.
    `size`: the whole text's, when `text` is its two ends already.
    """
    whole = len(text)
    text = _redact.clean(_ends(text, head, tail))
    if len(text) <= head + tail:
        return text
    size = max(len(text), whole) if size is None else size
    return (
        f"{text[:head]} ... [{size - head - tail} of {size} characters cut] ... " + (text[-tail:])
    )


def token_count(value: Any) -> int:
    """A provider's token count as a search attribute can hold it (0 when it is no count)."""
    try:
        return min(max(int(value or 0), 0), policies.MAX_TOKEN_COUNT)
    except (TypeError, ValueError, OverflowError):
        return 0


def non_finite_number(arguments: str) -> str | None:
    """The first number in a call's JSON `arguments` that no float holds, if any.

    `1e400` is standard JSON, but Python reads it as Infinity (and reads the
    non-standard `NaN` and `Infinity` too): the tool got `inf`, and the call's
    arguments went into history, the UI and the JSONL's readers as the token
    `Infinity`, which no other SDK or the temporal CLI decodes. Text that is
    not JSON is left to the run, which tells the model so.
    """
    if not any(c in arguments for c in "eENI"):
        return None  # no exponent, NaN or Infinity: every number fits
    found: list[str] = []

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) and not found:
            found.append(text)
        return value

    def constant(text: str) -> float:
        if not found:
            found.append(text)
        return math.nan

    try:
        json.loads(arguments, parse_float=number, parse_constant=constant)
    except (ValueError, RecursionError):
        return None
    return found[0] if found else None
