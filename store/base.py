"""The `Store` protocol and the run-id rule every entry point shares.

A store is any object with `append`, `load` and `list_runs`: the seed's
three-method contract, so a Postgres or S3 store is a small class. Run ids
become file names and Temporal workflow ids, so one validator guards both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import itertools
import threading
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentor_temporal.store.events import Event

#: Longest run id accepted, in bytes of UTF-8: `<id>.jsonl` and the name a
#: damaged log is set aside under (`<id>.jsonl.damaged-<time>`, 40 bytes more)
#: must fit the 255-byte file-name limit of common file systems, and a
#: Temporal workflow id (1,000 bytes by default) must hold it.
MAX_RUN_ID_BYTES = 200
#: Kept for callers that read the old name; the limit is in bytes now.
MAX_RUN_ID_LENGTH = MAX_RUN_ID_BYTES
#: Unicode categories refused anywhere in a run id: controls (C0, DEL, C1 such
#: as U+0085), format characters (bidi overrides like U+202E, zero-width
#: joiners), lone surrogates (no file system can name them) and the line and
#: paragraph separators, which break terminals, logs and visibility queries.
_REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


@runtime_checkable
class Store(Protocol):
    """Append-only event log per run."""

    def append(self, run_id: str, event: Event) -> None:
        """Save one event. Called once per event, in order."""

    def load(self, run_id: str) -> list[Event]:
        """Return every event of a run, in order ([] for an unknown run)."""
        ...

    def list_runs(self) -> list[str]:
        """Return every known run id."""
        ...


_T = TypeVar("_T")

#: Threads for store calls in one process (`in_thread`): a store that stops answering
#: holds one per run at most (`activities._store_patience`), and only these
STORE_THREADS = 64


async def in_thread(fn: Callable[..., _T], /, *args: Any) -> _T:
    """`asyncio.to_thread(fn, *args)` for a store's code: what it raises is an error.

    asyncio cannot take a StopIteration into a Future (a TypeError in the
    loop's callback), so its caller was never woken: a store whose `load`
    did `next()` on nothing hung the run's model call until its timeout,
    every attempt, and `resume` for ever. A `SystemExit` or
    `KeyboardInterrupt` (a store's client calling `sys.exit` on a bad
    setting) reached the awaiting task, and asyncio re-raises either out of
    the event loop when it ends a task: the worker's loop stopped, every
    call in flight on it ran again on the next worker, and that worker's
    retry of the mirror stopped it too. Raised in a thread, neither is a
    signal to this process (Python handles signals in the main thread).

    Raises:
        RuntimeError: for a StopIteration, SystemExit or KeyboardInterrupt,
            naming the function.
        Exception: whatever else `fn` raised.
    """
    # the store's own threads, not the loop's default executor: a store call that never
    # returns held one of its few threads (6 on 2 cores), and once a handful of runs' calls
    # had, every getaddrinfo of the worker (each new model connection) waited behind them
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, _stopped_raises, fn, *args)
    return await loop.run_in_executor(_store_threads(), call)


_POOL: list[concurrent.futures.ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _store_threads() -> concurrent.futures.ThreadPoolExecutor:
    """The process's threads for store calls (made at first use)."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(
                concurrent.futures.ThreadPoolExecutor(
                    max_workers=STORE_THREADS, thread_name_prefix="agentor-store"
                )
            )
        return _POOL[0]


def _stopped_raises(fn: Callable[..., _T], *args: Any) -> _T:
    try:
        return fn(*args)
    except (StopIteration, SystemExit, KeyboardInterrupt) as exc:
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        try:
            detail = f": {exc}" if str(exc) else ""
        except Exception:
            detail = ""
        raise RuntimeError(f"{name} raised {type(exc).__name__}{detail}") from exc


def new_run_id() -> str:
    """A fresh run id: uuid4 hex, as Agentor makes them."""
    return uuid.uuid4().hex


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is safe as a file name and a workflow id.

    Refuses what could land a file outside a runs directory (`../x`,
    `/tmp/x`, `a\\b`, `C:x`), hide it (`.x`), name no file at all (longer
    than MAX_RUN_ID_BYTES as UTF-8, or only whitespace), or break a terminal,
    a log or a visibility query (quotes, and Unicode control, format and
    separator characters: C0/C1 controls, bidi overrides, zero-width
    characters). Real ids are uuid hex, so this refuses nothing legitimate.
    Every entry point (facade, CLI, stores, the workflow itself) uses it.

    Raises:
        ValueError: naming the id and the rule it breaks.
    """
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"Invalid run id {run_id!r}: it must be a non-empty string.")
    if not run_id.strip():
        raise ValueError(f"Invalid run id {run_id!r}: it is only whitespace.")
    if run_id.startswith("."):
        raise ValueError(f"Invalid run id {run_id!r}: it must not start with '.'.")
    bad = sorted({c for c in run_id if c in "/\\:'\"" or _refused(c)})
    if bad:
        shown = ", ".join(f"U+{ord(c):04X}" if _refused(c) else repr(c) for c in bad)
        raise ValueError(
            f"Invalid run id {_preview(run_id)}: it must not contain {shown} (path "
            "separators, ':', quotes, and Unicode control, format and separator "
            "characters are refused)."
        )
    size = len(run_id.encode("utf-8"))
    if size > MAX_RUN_ID_BYTES:
        raise ValueError(
            f"Invalid run id {_preview(run_id)}: {size} bytes as UTF-8, over the "
            f"{MAX_RUN_ID_BYTES} a run id may have (it names a file, and file names "
            "are limited to 255 bytes)."
        )
    return run_id


def _refused(char: str) -> bool:
    return unicodedata.category(char) in _REFUSED_CATEGORIES


def _preview(run_id: str) -> str:
    """The id as it can be shown safely: escaped, and cut when long."""
    text = run_id if len(run_id) <= 40 else run_id[:40] + "..."
    return ascii(text)


def read_events(store: Store, run_id: str, limit: int | None = None) -> list[Event]:
    """`store.load(run_id)` (its first `limit` events), memory in proportion to the run.

    A generation's line holds its whole request, so a long run's log grows
    with the square of its turns (500 turns of 2 KB results: 260 MB), and
    loading it held every request whole: resuming or forking a long run, or
    reading one whose first events only the store holds (a store-seeded run,
    a fork's parent), took gigabytes. Read an event at a time where the store
    can (`FileStore.iterate`), stopping at `limit`, and each request shares
    the messages it repeats of the one before: equal values, for this
    package's reading only (the facade's `load` returns lists a caller may
    change).
    """
    iterate = getattr(store, "iterate", None)
    if not callable(iterate):  # held already, as the store's own objects: left as they are
        loaded = _stopped_raises(store.load, run_id)  # its error names the store's load
        return loaded if limit is None else loaded[:limit]
    source: Iterator[Event] = iterate(run_id)
    events: list[Event] = []
    last: list[dict[str, Any]] = []
    try:
        for event in itertools.islice(source, limit):
            if event.messages:
                event.messages = _sharing(event.messages, last)
                last = event.messages
            events.append(event)
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()  # the file, at once
    return events


def _sharing(messages: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages`, its leading messages equal to `earlier`'s replaced by those."""
    shared = list(messages)
    for index, (mine, theirs) in enumerate(zip(messages, earlier, strict=False)):
        if mine != theirs:
            break
        shared[index] = theirs
    return shared
