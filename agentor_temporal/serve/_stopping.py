"""Open streams end themselves, telling their client, when the server stops.

A stream follows a run for as long as it goes (a run waiting hours for
approval), so on SIGTERM uvicorn waited its graceful 3 s, then cancelled
the stream's task: the client read a body cut off mid-transfer ("incomplete
chunked read") with nothing saying why, and the server's log showed a
traceback per stream ("Exception in ASGI application ... Task cancelled,
timeout graceful shutdown exceeded"). Now the signal's handler marks the
server stopping, and each stream sends a last message saying the server
stops and where the run goes on, then ends cleanly, before uvicorn's wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Per event loop (the runtime's, where the app runs): set once its server is stopping.
_stopping: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
    weakref.WeakKeyDictionary()
)


def stopping() -> asyncio.Event:
    """The running loop's server-stopping flag (call on that loop)."""
    loop = asyncio.get_running_loop()
    event = _stopping.get(loop)
    if event is None:
        event = _stopping[loop] = asyncio.Event()
    return event


def stop_streams(loop: asyncio.AbstractEventLoop) -> None:
    """Mark `loop`'s server stopping, from any thread (a signal's handler)."""
    loop.call_soon_threadsafe(lambda: stopping().set())


async def until_stopping(chunks: AsyncIterator[T], last: Callable[[], T]) -> AsyncIterator[T]:
    """`chunks`, until the server stops: then `last()`, and the stream ends."""
    flag = stopping()
    iterator = chunks.__aiter__()
    stop: asyncio.Future[Any] = asyncio.ensure_future(flag.wait())
    pending: asyncio.Future[Any] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            await asyncio.wait({pending, stop}, return_when=asyncio.FIRST_COMPLETED)
            if pending.done():
                try:
                    chunk: T = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                yield chunk
                continue
            yield last()
            return
    finally:
        for task in [stop, pending]:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(BaseException):
                await aclose()


def stopping_note(run_id: str) -> str:
    """What a stream's last message says: the server stops, the run goes on, where to follow."""
    return (
        f"The server is stopping; run {run_id} goes on in Temporal. Follow it at "
        f"GET /runs/{run_id}/events (or read GET /runs/{run_id}) once a server answers."
    )
