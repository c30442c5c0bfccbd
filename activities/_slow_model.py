"""Saying once that a model endpoint holds a request unanswered.

A provider (or a proxy before it) that takes a request and never answers
held a run silent for up to `MODEL_REPLY_LIMIT` (570 s) an attempt: the
caller's `run()`, the worker's log, nothing said a word. A request still
unanswered after `MODEL_SILENT_SAY_AFTER` seconds is said once, on the
`agentor_temporal` logger of the process running the request (the worker;
a script's own embedded worker): which endpoint, which run and turn, and how
long it is waited for before the request is given up and asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

from agentor_temporal.workflows.redaction import redact_url

logger = logging.getLogger("agentor_temporal")

T = TypeVar("T")

#: A request unanswered this long is said (a long reply from a reasoning model
#: takes a minute or two: said sooner, every such reply would be).
MODEL_SILENT_SAY_AFTER = 60.0


async def said_when_silent(ask: Awaitable[T], *, base_url: str, what: str, limit: float) -> T:
    """`await ask`, said once on the logger when it goes `MODEL_SILENT_SAY_AFTER` unanswered.

    Args:
        what: the request, for the line ("turn 2 of run 'x'").
    """
    task = asyncio.ensure_future(ask)
    started = time.monotonic()
    try:
        done, _ = await asyncio.wait({task}, timeout=min(MODEL_SILENT_SAY_AFTER, limit))
        if not done and MODEL_SILENT_SAY_AFTER < limit:
            logger.warning(
                "The model endpoint at %s has not answered %s after %.0f s "
                "(the connection is open: a provider or proxy holding the request); waiting "
                "up to %.0f s in all, then the request is given up and asked again",
                redact_url(base_url),
                what,
                time.monotonic() - started,
                limit,
            )
        return await task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class QuietReply:
    """Says once, on the logger, that a streamed reply went `MODEL_SILENT_SAY_AFTER`
    without a part (however many such gaps it has): `part()` at each one.

    A watcher task notes the time, so a part costs no task of its own.
    """

    def __init__(self, *, base_url: str, what: str, limit: float) -> None:
        self.base_url = base_url
        self.what = what
        self.limit = limit
        self.parts = 0
        self.last = time.monotonic()
        self._watcher: asyncio.Future[None] | None = None

    def part(self) -> None:
        self.parts += 1
        self.last = time.monotonic()

    async def __aenter__(self) -> QuietReply:
        if MODEL_SILENT_SAY_AFTER < self.limit:
            self._watcher = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(BaseException):
                await self._watcher

    async def _watch(self) -> None:
        while (quiet := time.monotonic() - self.last) < MODEL_SILENT_SAY_AFTER:
            await asyncio.sleep(MODEL_SILENT_SAY_AFTER - quiet)
        logger.warning(
            "The model endpoint at %s went quiet in the middle of its streamed reply to %s: "
            "no part of it for %.0f s after %d %s (the connection is open: a provider or "
            "proxy hanging mid-reply); waiting up to %.0f s since its last part, then the "
            "request is given up and asked again",
            redact_url(self.base_url),
            self.what,
            quiet,
            self.parts,
            "part" if self.parts == 1 else "parts",
            self.limit,
        )


def request_of(run_id: str | None = None, turn: int | None = None) -> str:
    """What a request is, for the line: its turn and run (else the activity's run)."""
    if run_id is None:
        from temporalio import activity

        run_id = activity.info().workflow_id if activity.in_activity() else None
    turn_said = f"turn {turn} of " if turn is not None else "a request of "
    return f"{turn_said}run {run_id!r}" if run_id else "a request"
