"""How long a run's steps wait for its mirror store, and what they do once it stops answering.

The store is a copy; Temporal holds the run. A store call that never returns (a
database or network filesystem that took the request and went quiet) left the
model request or tool call that mirrored first waiting with it: up to the
request's 10-minute timeout, then again on each retry, and the worker's thread
stayed blocked. Each mirror now waits `policies.STORE_PATIENCE`; past it the
step goes on without the store (logged once), the store's call is left to end
when it does (a thread cannot be stopped), and the run's later steps skip its
store until that call has ended, so one run never piles up blocked threads. The
next step after that catches the copy up, as it does after a store error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentor_temporal.workflows import policies

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: (id of the store, run id) of each store call still running past its patience
_LATE: set[tuple[int, str]] = set()


class StoreSilent(Exception):
    """The run's store has not answered a call within `policies.STORE_PATIENCE`."""


def waiting_on(store: Any, run_id: str) -> bool:
    """Whether a call of this run to `store` is still running past its patience."""
    return (id(store), run_id) in _LATE


async def patiently(store: Any, run_id: str, work: Callable[[], Awaitable[T]]) -> T:
    """`work()` (mirroring `run_id` into `store`), waited for `policies.STORE_PATIENCE` at most.

    Raises:
        StoreSilent: the store did not answer in time, or a call of this run
            to it that did not is still running: the step goes on without it.
    """
    key = (id(store), run_id)
    if key in _LATE:
        raise StoreSilent(
            f"the store has not answered a call of this run for over "
            f"{policies.STORE_PATIENCE.total_seconds():g} s"
        )
    task = asyncio.ensure_future(work())
    patience = policies.STORE_PATIENCE.total_seconds()
    try:
        done, _ = await asyncio.wait({task}, timeout=patience)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    # the task is left to finish: cancelling it would end only its wait, not the
    # store's thread, and the end of that thread is what this run waits for before
    # it calls the store again (its late writes go by position, as any step's do)
    _LATE.add(key)
    task.add_done_callback(lambda done: _ended_late(key, done))
    logger.warning(
        "The store %r did not answer within %g s while mirroring run %s; the run goes on "
        "without it (Temporal has every event) and its copy is caught up once it answers",
        store,
        patience,
        run_id,
    )
    raise StoreSilent(f"the store did not answer within {patience:g} s")


def _ended_late(key: tuple[int, str], task: asyncio.Future[Any]) -> None:
    """A late store call ended: the run's steps call the store again."""
    _LATE.discard(key)
    if not task.cancelled() and task.exception() is not None:
        # retrieved, so asyncio prints no 'exception was never retrieved'; the
        # mirror logged its store's error itself
        logger.debug("A late mirror of run %s ended: %s", key[1], task.exception())
