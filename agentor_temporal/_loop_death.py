"""Running a worker's serving coroutine so that user code stopping its loop ends the process.

A callback a tool schedules on the worker's loop (`loop.call_soon`, `call_later`: not a
task, so `activities._contained` does not reach it) that raises SystemExit or
KeyboardInterrupt stops the loop, as one that calls `loop.stop()` does. Under
`asyncio.run` that cancelled every call in flight (the tool that had just returned was
reported failed, and ran again on the next worker) and ended the process with a traceback
from inside asyncio, or with a signal's status. Here the loop is started again to drain:
the calls in flight finish and are handed back as a requested stop's are, then the caller
ends the process with exit status 1 and one line naming the cause, for its supervisor to
start it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

logger = logging.getLogger("agentor_temporal")

#: How many times the loop is started again to drain before giving up (each stop is user
#: code's: a callback that keeps scheduling itself to stop the loop would never let it end).
_RESTARTS = 20


def loop_stopped_line(exc: BaseException | None) -> str:
    """What stopped the loop, in words (`exc` None: `loop.stop()`)."""
    if exc is None:
        what = "stopped (loop.stop())"
    else:
        detail = f": {exc}" if str(exc) else ""
        what = f"stopped by {type(exc).__name__}{detail}"
    return (
        f"the worker's event loop was {what}, from user code (a callback a tool or "
        "agent scheduled on it with loop.call_soon/call_later); the calls in flight were "
        "finished and handed back, and the worker exits so that its supervisor starts it again"
    )


def serve_on_own_loop(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> str | None:
    """Run `main(stop)` to its end on a new event loop, as `asyncio.run` would.

    When user code stops the loop, `stop` is set (`main` drains as on a stop signal) and
    the loop is run again until `main` ends. Returns the line naming what stopped it, or
    None when nothing did. Any other exception (a stop signal's `StoppedStarting`) cancels
    what is left and propagates, as under `asyncio.run`.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    task = loop.create_task(main(stop))
    cause: str | None = None
    try:
        for _ in range(_RESTARTS):
            try:
                loop.run_until_complete(task)
                return cause
            except (SystemExit, KeyboardInterrupt) as exc:
                if task.done():
                    raise
                cause = cause or loop_stopped_line(exc)
            except RuntimeError:
                if task.done():
                    raise
                # "Event loop stopped before Future completed": loop.stop() was called
                cause = cause or loop_stopped_line(None)
            stop.set()
        return cause
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks left on `loop` and let them end (as `asyncio.run` does)."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def run_forever_kept(loop: asyncio.AbstractEventLoop, closing: Callable[[], bool]) -> None:
    """`loop.run_forever()` for the process's background loop, until `closing()` says it was
    asked to stop: user code stopping it (see above) is logged in one line, and it runs on.

    That loop is a script's or `serve --worker`'s embedded worker's: its thread ended
    silently, and every agent call of the process (the one in flight too) waited for ever.
    """
    while True:
        try:
            loop.run_forever()
        except (SystemExit, KeyboardInterrupt) as exc:
            stopped_by: BaseException | None = exc
        else:
            if closing():
                return
            stopped_by = None
        line = loop_stopped_line(stopped_by).split(";")[0]
        logger.error("%s; it serves on (an embedded worker's loop is the process's)", line)
