"""A run's events as server-sent events, numbered by their place in the run.

Every recorded event gets `id:` = its 1-based position in the run's whole
log, so `Last-Event-ID: N` (what a browser's `EventSource` sends by itself
when it reconnects) is exactly `Agentor.stream(run_id, after=N)`. Text
deltas and retry markers are live-only: they carry no id, so a reconnect
never skips a recorded event because of them. A comment line every few
seconds keeps idle connections (a run waiting hours for approval) open
through proxies, and lets the server notice a client that went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from agentor_temporal.activities import _redact
from agentor_temporal.agent import Agentor
from agentor_temporal.store import Event
from agentor_temporal.store.events import EventJson
from agentor_temporal.streaming import RunFailedError

#: Event types a stream passes on that are not in the run's record: text
#: deltas, and the `error` marker of a retried streamed model attempt (neither
#: this project's workflow nor Agentor 0.1.1 ever records an `error` event).
LIVE_ONLY = frozenset({"text_delta", "error"})

#: Seconds between keep-alive comments on an idle stream.
KEEPALIVE_INTERVAL = 10.0

#: How soon (ms) a browser reconnects after losing the stream (its own default is 3 s).
RECONNECT_MS = 500


async def positioned(
    agent: Agentor, run_id: str, after: int, text: bool
) -> AsyncIterator[tuple[int | None, Event]]:
    """(position, event) from `after` on; position None for live-only events.

    Raises:
        KeyError: when Temporal does not know the run.
        RunFailedError: when the run's workflow ended without a `run_end`.
    """
    position = after
    async for event in agent.stream(run_id, after=after, text=text):
        if event.type in LIVE_ONLY:
            yield None, event
        else:
            position += 1
            yield position, event


def frame(data: Any, *, id: int | None = None, event: str | None = None) -> bytes:
    """One SSE message whose data is `data` as JSON (one line)."""
    return encoded_frame(json.dumps(data, separators=(",", ":"), default=str), id=id, event=event)


def encoded_frame(text: str, *, id: int | None = None, event: str | None = None) -> bytes:
    """One SSE message whose data is `text`, JSON already encoded (one line)."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append("data: " + text)
    return ("\n".join(lines) + "\n\n").encode()


async def keepalive(frames: AsyncIterator[bytes], interval: float) -> AsyncIterator[bytes]:
    """`frames`, with a comment whenever nothing was sent for `interval` seconds."""
    iterator = frames.__aiter__()
    pending: asyncio.Task[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield b": keep-alive\n\n"
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield chunk
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(BaseException):
                await aclose()


async def run_frames(agent: Agentor, run_id: str, after: int, text: bool) -> AsyncIterator[bytes]:
    """The SSE body of `GET /runs/{run_id}/events`: each event's JSONL form as `data:`.

    A workflow that ended without a `run_end` (terminated, cancelled) ends
    the stream with an unnumbered `event: run_failed` message, `{"error": ...}`.
    """
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    # a long run read from offset 0: each generation's request is most of the one before
    event_json = EventJson()
    try:
        async for position, event in positioned(agent, run_id, after, text):
            yield encoded_frame(event_json(event), id=position)
    except RunFailedError as exc:
        # its reason may quote anything (a termination's, typed by a person)
        yield frame({"error": _redact.clean(str(exc))}, event="run_failed")
