"""A worker's stop signals: the first drains the calls it holds, a second abandons them.

The design decision: plain `signal.signal` handlers, not the event loop's. The loop's
own handler runs only once the loop is free, so with a tool blocking it (an `async def`
tool that sleeps or computes without awaiting) neither the first signal's line nor a
second signal's abandoning came until the tool returned: past a container's grace the
worker was SIGKILLed mid-call with no word, and the call ran again elsewhere. A plain
handler runs in the main thread, where the loop runs, even while the loop is blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from agentor_temporal import telemetry
from agentor_temporal._ending import end_by
from agentor_temporal.plugin import graceful_shutdown

logger = logging.getLogger("agentor_temporal.worker")


def stopping_line() -> str:
    """What a worker says as it starts to drain: how long, and the grace a container needs."""
    seconds = graceful_shutdown().total_seconds()
    return (
        f"Stopping: no new work is taken; finishing in-flight activities (up to {seconds:g} s; "
        "interrupt again to abandon them; a container's stop grace must be longer, "
        f"`docker stop -t {int(seconds) + 5}`, or a call still running is killed and runs "
        "again elsewhere)"
    )


def on_stop_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """SIGTERM, SIGINT and SIGHUP (its terminal closed): the first sets `stop` (on `loop`),
    the same or another again abandons the calls in flight and ends the process by it.

    One the caller ignores (`nohup`) stays ignored. The caller puts the handlers before
    these back once the worker is done (`stopped_while_starting`). Main thread only.
    """
    received: list[signal.Signals] = []

    def on_signal(signum: int, frame: object) -> None:
        sig = signal.Signals(signum)
        received.append(sig)
        if len(received) == 1:
            logger.info("%s", stopping_line())
            with contextlib.suppress(RuntimeError):  # the loop closed: the worker is done
                loop.call_soon_threadsafe(stop.set)
            return
        # Asked twice, as Ctrl+C twice, or SIGTERM then SIGINT: the calls in flight are
        # abandoned, as a script's are (another worker runs them again). Before, a second
        # signal did nothing, and only SIGKILL cut the drain short, silently.
        logger.warning(
            "%s again: abandoning the calls in flight (another worker runs them again)",
            sig.name,
        )
        telemetry.flush()
        end_by(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, on_signal)
