"""What a run holds in a worker is bounded while it runs and released when it ends."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from temporalio.api.common.v1 import Payload

from agentor_temporal._memory import release_free_memory, tune_allocator
from agentor_temporal.activities.conversations import ConversationCache, Known
from agentor_temporal.workflows.stream_window import StreamWindow


class Item:
    def __init__(self, size: int) -> None:
        self.data = Payload(data=b"x" * size)


class FakeStream:
    """The parts of WorkflowStream the window reads."""

    def __init__(self) -> None:
        self._log: list[Any] = []
        self._base_offset = 0

    def publish(self, size: int) -> None:
        self._log.append(Item(size))

    def truncate(self, up_to: int) -> None:
        self._log = self._log[up_to - self._base_offset :]
        self._base_offset = up_to


def test_the_stream_keeps_a_bounded_tail_of_items_history_has() -> None:
    """Items go only once history has their events, and only past the bound."""
    stream = FakeStream()
    window = StreamWindow(stream, max_bytes=10_000)  # type: ignore[arg-type]
    for _ in range(8):
        stream.publish(1_000)
    assert window.release(recorded_before=8) == 0  # under the bound: all kept
    for _ in range(8):
        stream.publish(1_000)
    # over the bound, but only the first 4 items are in history
    assert window.release(recorded_before=4) == 4
    assert stream._base_offset == 4 and window.end() == 16
    assert window.release(recorded_before=16) == 8  # down to half the bound
    assert sum(i.data.ByteSize() for i in stream._log) <= 5_000 and window.end() == 16


def known(size: int) -> Known:
    return Known([{"role": "user", "content": "x" * size}], b"x" * size)


def test_an_ended_or_idle_runs_conversation_leaves_the_cache() -> None:
    cache = ConversationCache(idle=60)
    cache.put("a", "d1", known(100))
    cache.put("b", "d2", known(100))
    cache.forget("a")
    assert cache.get("a", "d1") is None and cache.get("b", "d2") is not None
    assert cache.expire(now=1e12) == 1  # long unused
    assert cache.get("b", "d2") is None and cache._bytes == 0


def test_the_allocator_can_be_tuned_and_trimmed_here() -> None:
    assert tune_allocator(arenas=False) is True
    assert release_free_memory() is True


#: Run alone: in a test process other threads (an earlier test's worker, its
#: trim loop) allocate, free and trim the same heap while this one measures.
FREED = """
from agentor_temporal._memory import free_heap_bytes, tune_allocator
tune_allocator(arenas=False)
before = free_heap_bytes()
assert before is not None  # glibc 2.33 on, as here
blocks = [bytearray(8_000) for _ in range(1_000)]
keep = blocks[-1]  # pins the top of the heap: the rest is freed below it
del blocks
after = free_heap_bytes()
assert after is not None and after - before >= 4_000_000, (before, after)
print("seen", after - before)
"""


def test_memory_freed_into_the_allocator_is_seen() -> None:
    """What the trim loop's `freed` test reads: free arena bytes grow when memory is freed."""
    done = subprocess.run(
        [sys.executable, "-c", FREED], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("seen"), done.stderr
