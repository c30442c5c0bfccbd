"""A worker's memory returns to where it started once its runs end.

What a run holds is released when it ends: the workflow (its journal and
its stream window, see `workflows.stream_window`) is evicted, and its
conversation leaves the worker's cache (`activities.conversations`). But a
long run's conversation passes through the worker many times over (requests,
history pages, journal payloads, stream items), and glibc's allocator keeps
freed memory mapped: large buffers raise its mmap threshold until they land
in the heap, and each thread of the SDK's runtime gets an arena of its own,
so a worker's RSS only ever grew. `tune_allocator` fixes the mmap threshold
(large buffers are mapped and unmapped, never fragment the heap) and bounds
the arenas, `keep_memory_trimmed` hands freed heap pages back
(`malloc_trim`) whenever RSS has grown since the last time or memory was
freed since (a run that ends frees what it held without RSS growing), and
`preload` imports at start what the first model call would import anyway.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import sys
from typing import Any

logger = logging.getLogger(__name__)

#: How often a worker looks at its RSS (a trim costs milliseconds; its
#: absence cost hundreds of megabytes after long runs).
TRIM_INTERVAL = 5.0
#: RSS growth since the last trim that makes the next one worth it.
TRIM_GROWTH = 1.05
#: Bytes freed into the allocator since the last trim that make the next one
#: worth it (what a run held is freed when it ends, after its peak was trimmed).
TRIM_FREED = 1024 * 1024
#: Allocations from this size on are mapped alone and unmapped when freed
#: (glibc's default starts here too, but rises up to 32 MB after each large
#: free, after which a long run's buffers fragment the heap).
MMAP_THRESHOLD = 128 * 1024
#: Malloc arenas in all (glibc's default is 8 per core, one per busy thread).
ARENA_MAX = 2

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

_libc: Any = None
_trimmers = 0


def _glibc() -> Any:
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _libc = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
            except OSError:
                _libc = False
    return _libc or None


def _malloc_trim() -> Any:
    lib = _glibc()
    return lib.malloc_trim if lib is not None else None


def tune_allocator(*, arenas: bool = True) -> bool:
    """Fix glibc's mmap and trim thresholds and bound its arenas (before threads start).

    Settings the operator made (`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`,
    `MALLOC_TRIM_THRESHOLD_`) are left as they are. Returns whether it applied.

    Args:
        arenas: bound the arenas too (a process of our own: `python worker.py`;
            an application embedding a worker keeps its threads' arenas).
    """
    lib = _glibc()
    if lib is None:
        return False
    for env, option, value in (
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, MMAP_THRESHOLD),
        ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
    ):
        if env not in os.environ and (arenas or option != _M_ARENA_MAX):
            lib.mallopt(option, value)
    return True


def rss_bytes() -> int | None:
    """This process's resident set size, where the platform says (Linux)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def free_heap_bytes() -> int | None:
    """Bytes the allocator holds free in its arenas (glibc 2.33 on), trimmed or not."""
    lib = _glibc()
    info = getattr(lib, "mallinfo2", None) if lib is not None else None
    if info is None:
        return None
    info.restype = _MallInfo2
    return int(info().fordblks)


def release_free_memory() -> bool:
    """Give memory the allocator holds but nobody uses back to the OS (glibc only)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)  # ctypes releases the GIL for the call
    return True


#: What the first model request imports: the chat resource and its stream
#: parser, and the HTTP transport's connection machinery (openai's httpx2).
_FIRST_REQUEST_MODULES = (
    "openai.types.chat",
    "openai.resources.chat.completions",
    "openai.lib.streaming.chat",
    "openai.pagination",
    "jiter",
    "httpcore2",
    "httpcore2._async.http11",
    "httpcore2._backends.anyio",
    "anyio._backends._asyncio",
    "h11",
)


def preload() -> None:
    """Import what the first model request would, so the idle baseline includes it."""
    import importlib

    for name in _FIRST_REQUEST_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # pragma: no cover - a dependency's layout; harmless to skip
            pass


async def keep_memory_trimmed(interval: float = TRIM_INTERVAL) -> None:
    """Trim freed memory whenever RSS grew or memory was freed since the last trim.

    One loop per process. Freed is measured from the least the allocator
    held free since the last trim, so memory used and freed again counts.
    """
    global _trimmers
    _trimmers += 1
    try:
        if _trimmers > 1 or _malloc_trim() is None:
            await asyncio.Event().wait()  # another loop trims, or nothing can
        floor = rss_bytes() or 0
        least_free = free_heap_bytes()
        while True:
            await asyncio.sleep(interval)
            now = rss_bytes()
            free = free_heap_bytes()
            if least_free is not None and free is not None:
                least_free = min(least_free, free)
            grew = now is not None and now > floor * TRIM_GROWTH
            freed = free is not None and least_free is not None and free - least_free >= TRIM_FREED
            if not (grew or freed):
                continue
            await asyncio.to_thread(release_free_memory)
            floor = rss_bytes() or now or floor
            least_free = free_heap_bytes()
    finally:
        _trimmers -= 1
