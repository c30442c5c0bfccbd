"""One writer thread for the mirror's usual step, its fsyncs grouped per batch.

`asyncio.to_thread` per step woke a pool thread for each step and the event
loop once for each result; at 100 runs in flight on a busy worker each of
those hand-offs is a context switch or two and a wait for the GIL. Here one
daemon thread takes every step queued meanwhile as one batch: it makes each
step's writes, then fsyncs the files the batch wrote in one pass, and only
then hands the batch's results back, one `call_soon_threadsafe` per event
loop. A step's caller still wakes only once its events are on disk, so the
mirror's guarantee (a step's events are durable before the step goes on)
holds; what is saved is the hand-offs, not the fsyncs. A store opts in to
grouped fsyncs by asking `deferred_syncs()` from inside a step (`FileStore`
does); any other store's code simply runs in the thread.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

#: (file descriptor, what undoes the step's bookkeeping if its fsync fails)
Sync = tuple[int, Callable[[], None]]

_local = threading.local()


def deferred_syncs() -> list[Sync] | None:
    """The batch's list of files still to fsync, in the writer thread; None elsewhere.

    A store that appends `(fd, undo)` leaves the descriptor open: the writer
    fsyncs and closes it before the step's caller is woken, and for a failed
    fsync calls `undo` and raises the error to that step instead.
    """
    found: list[Sync] | None = getattr(_local, "syncs", None)
    return found


class _Job:
    __slots__ = ("args", "error", "fn", "future", "loop", "value")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> None:
        self.loop, self.future, self.fn, self.args = loop, future, fn, args
        self.value: Any = None
        self.error: BaseException | None = None


class Writer:
    """A single thread that runs queued steps in batches (see the module)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[..., _T], /, *args: Any) -> _T:
        """`fn(*args)` in the writer thread; returns once its fsyncs are done."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._jobs.put(_Job(loop, future, fn, args))
        self._ensure_thread()
        return await future

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._guard:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="agentor-store-writer", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            batch = [self._jobs.get()]
            while True:
                try:
                    batch.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Job]) -> None:
        owners: list[tuple[_Job, Sync]] = []
        for job in batch:
            syncs: list[Sync] = []
            _local.syncs = syncs
            try:
                job.value = job.fn(*job.args)
            except BaseException as exc:  # handed to the caller, as to_thread does
                job.error = exc
            finally:
                _local.syncs = None
            owners.extend((job, sync) for sync in syncs)
        # the batch's files in one pass: each caller wakes after its own are durable
        for job, (fd, undo) in owners:
            try:
                # fsync: a crash is the case a mirror exists for
                os.fsync(fd)
            except OSError as exc:
                undo()
                if job.error is None:
                    job.error, job.value = exc, None
            finally:
                os.close(fd)
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        for job in batch:
            by_loop.setdefault(job.loop, []).append(job)
        for loop, jobs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, jobs)
            except RuntimeError:  # that loop closed meanwhile: nobody waits for these
                pass


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.cancelled():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.value)


#: the process's writer: one thread for every store's usual step
WRITER = Writer()
