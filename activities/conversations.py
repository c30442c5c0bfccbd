"""Rebuilding a conversation sent by reference, on the worker.

A `generate` input (or a journal step that mirrors a `generation`) may name
its conversation's base by whole-run event position and chain digest instead
of carrying it (see `workflows/conversation.py`). The worker keeps the latest
conversation of the runs it served in a bounded in-process cache, keyed by
digest, together with its JSON encoding: the usual turn then costs one
dictionary lookup and encoding the new messages, and the request body is
the cached bytes plus those (encoding a 3 MB conversation again every turn
is most of what a long run's turn would otherwise add). On a miss (another
worker served the last turn, or this one restarted) the base is read from
the run's own history through `TemporalStore`, which holds every message
once. History is the durable record here: nothing outside Temporal must
survive for a run to be replayed or continued.

The worker's long-run settings are read here too: they are recorded in each
segment's agent spec, so changing them never changes a replay.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentor_temporal.workflows.conversation import ConversationRef, chain_digest

logger = logging.getLogger(__name__)

#: Bytes of conversations one worker keeps (env AGENTOR_CONVERSATION_CACHE_BYTES),
#: counted as encoded; the decoded messages take about as much again. One
#: entry per run: a worker serving 80 runs of 3 MB conversations at once
#: keeps them all.
DEFAULT_CACHE_BYTES = 256_000_000
#: Seconds a run's conversation stays cached unused. A run's next turn comes
#: within seconds; one that waits longer (for a person, or served by another
#: worker since) reads its base from history once, instead of every run this
#: worker ever served holding memory until the cache's byte bound evicts it.
IDLE_SECONDS = 300.0
#: Attempts a request whose base is past the end of its running run's
#: history gets (~30 s with the model retry policy's backoff): enough for a
#: history read racing the write that records the base, bounded so a base
#: that never comes fails the run instead of retrying for ever.
BASE_MISSING_ATTEMPTS = 6


def _env_int(name: str) -> int:
    value = os.environ.get(name, "").strip().replace("_", "")
    if not value:
        return 0
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number of bytes, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name} must not be negative, got {number}")
    return number


def long_run_settings() -> tuple[int, int]:
    """(history budget, inline conversation bytes) from the environment; 0 is the default.

    `AGENTOR_HISTORY_BUDGET` lowers the history size at which a run continues
    as new (tests use it to cross several continuations quickly);
    `AGENTOR_INLINE_CONVERSATION_BYTES` sets how large a conversation is sent
    whole before it goes by reference.
    """
    return _env_int("AGENTOR_HISTORY_BUDGET"), _env_int("AGENTOR_INLINE_CONVERSATION_BYTES")


def encode(messages: list[dict[str, Any]]) -> bytes:
    """The messages as the elements of a JSON array (no brackets), as a request body holds them."""
    return b",".join(json.dumps(m, separators=(",", ":")).encode() for m in messages)


@dataclass
class Known:
    """A conversation the worker holds: its messages, and the same encoded for a request body."""

    messages: list[dict[str, Any]]
    encoded: bytes
    #: whole-run position of the event whose messages these are, when known
    position: int | None = None
    #: their chain digest
    digest: str = ""


class ConversationCache:
    """Conversations by (run_id, digest), least recently used dropped first.

    A run's entry goes when the run ends (`forget`) or has been idle for
    `idle` seconds (`expire`), so a worker's memory returns once its runs end.

    Args:
        max_bytes: the sum of the cached conversations' encoded sizes.
        idle: seconds after which an unused entry is dropped by `expire`.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES, idle: float = IDLE_SECONDS) -> None:
        self.max_bytes = max_bytes
        self.idle = idle
        self._items: OrderedDict[tuple[str, str], Known] = OrderedDict()
        #: when each entry was last put or found (monotonic seconds)
        self._used: dict[tuple[str, str], float] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        #: lookups that found nothing (tests and the benchmark read it)
        self.misses = 0

    def get(self, run_id: str, digest: str) -> Known | None:
        """The conversation with this digest, if cached."""
        with self._lock:
            item = self._items.get((run_id, digest))
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end((run_id, digest))
            self._used[(run_id, digest)] = time.monotonic()
            return item

    def put(self, run_id: str, digest: str, known: Known) -> None:
        """Keep a conversation; a run's older ones go (only the latest is asked for)."""
        with self._lock:
            self._drop([k for k in self._items if k[0] == run_id])
            known.digest = digest
            self._items[(run_id, digest)] = known
            self._used[(run_id, digest)] = time.monotonic()
            self._bytes += len(known.encoded)
            while self._bytes > self.max_bytes and len(self._items) > 1:
                self._drop([next(iter(self._items))])

    def forget(self, run_id: str) -> None:
        """Drop the run's conversations (it ended: nothing asks for them again)."""
        with self._lock:
            self._drop([k for k in self._items if k[0] == run_id])

    def expire(self, now: float | None = None) -> int:
        """Drop entries unused for `idle` seconds; return how many went."""
        cutoff = (time.monotonic() if now is None else now) - self.idle
        with self._lock:
            stale = [k for k, used in self._used.items() if used < cutoff]
            self._drop(stale)
            return len(stale)

    def _drop(self, keys: list[tuple[str, str]]) -> None:
        for key in keys:
            self._bytes -= len(self._items.pop(key).encoded)
            self._used.pop(key, None)

    def latest(self, run_id: str) -> Known | None:
        """The run's conversation this worker has, whatever its digest."""
        with self._lock:
            for (run, _), known in self._items.items():
                if run == run_id:
                    return known
            return None

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()
            self._used.clear()
            self._bytes = 0


#: The worker process's cache (activities of every run share it).
CACHE = ConversationCache(_env_int("AGENTOR_CONVERSATION_CACHE_BYTES") or DEFAULT_CACHE_BYTES)


async def full_messages(
    run_id: str,
    conversation: dict[str, Any],
    tail: list[dict[str, Any]],
    position: int | None = None,
) -> Known:
    """The whole request: the referenced base, then `tail`; cached for the next turn.

    `position` is where the request is recorded in the run (its `generation`
    or `run_start`): a later miss rebuilds from there instead of from the start.

    Raises:
        ApplicationError: when the base cannot be found (non-retryable once
            history provably lacks it, see `_missing`).
    """
    try:
        ref = ConversationRef.from_dict(conversation)
    except ValueError as exc:
        raise ApplicationError(str(exc), type="BadConversation", non_retryable=True) from None
    digest = chain_digest(ref.digest, tail)
    known = CACHE.get(run_id, digest)
    if known is not None:  # asked again (a retried call, or the mirror after the call)
        return known
    base = CACHE.get(run_id, ref.digest)
    if base is None:
        messages = await _from_history(run_id, ref)
        base = Known(messages, encode(messages))
    if not tail:  # the base itself (the mirror asking for a request sent whole)
        return base
    encoded = b",".join(part for part in (base.encoded, encode(tail)) if part)
    known = Known(base.messages + tail, encoded, position)
    CACHE.put(run_id, digest, known)
    return known


def remember(run_id: str, messages: list[dict[str, Any]], position: int | None = None) -> None:
    """Cache a request sent whole: a later one may name it as its base."""
    CACHE.put(run_id, chain_digest("", messages), Known(messages, encode(messages), position))


async def _from_history(run_id: str, ref: ConversationRef) -> list[dict[str, Any]]:
    """The messages of event `ref.position` of the run, read from Temporal."""
    from agentor_temporal.workflows.projection import TemporalStore

    try:
        client = activity.client()
    except RuntimeError:
        raise ApplicationError(
            "A conversation sent by reference needs a Temporal client to read its base",
            type="BadConversation",
            non_retryable=True,
        ) from None
    store = TemporalStore(client)
    # from the conversation this worker last had for the run, if history
    # confirms it (a request based on it names its digest): only the
    # executions since are read, not the whole run
    seed = CACHE.latest(run_id)
    segments = None
    if seed is not None and seed.position is not None and seed.position < ref.position:
        segments = await store.segments(
            run_id,
            since=seed.position,
            known={seed.position: seed.messages},
            digests={seed.position: seed.digest},
        )
        confirmed = event_at(segments, ref.position)
        if confirmed is None or confirmed.messages is None:
            segments = None  # not confirmed: read the whole run
    if segments is None:
        segments = await store.segments(run_id)
    event = event_at(segments, ref.position)
    if (event is None or event.messages is None) and segments and _begins_later(segments[0]):
        # a fork's (or a fork's resumed) conversation: its base, or the base
        # of the run_start it names, is among the parent's events, which only
        # the whole log has (read from the parent's history)
        events, missing = await store.whole(run_id, segments)
        index = ref.position - missing
        event = events[index] if 0 <= index < len(events) else None
    messages = event.messages if event is not None else None
    if messages is None or len(messages) != ref.count:
        raise _missing(run_id, ref, event, segments)
    logger.info(
        "Rebuilt the conversation of run %s from history (%d messages)", run_id, len(messages)
    )
    return list(messages)


def _begins_later(first: Any) -> bool:
    """Whether the run's log has events before its first execution's (a fork, a store's copy)."""
    return first.fork is not None or first.event_offset > 0


def _missing(
    run_id: str, ref: ConversationRef, event: Any, segments: list[Any]
) -> ApplicationError:
    """Why the base cannot be rebuilt; retryable only while history may still gain it.

    An event recorded at the base's position never changes, so one without
    those messages (its own base gone with the parent's or an earlier
    execution's history) fails the request for good, as does a position past
    the end of a closed run. A position past the end of a running run's
    history is the one case a later read could find (were history read
    before the write that records the base; none is known to), so that is
    retried a few times, then fails as well.
    """
    where = f"event {ref.position}, {ref.count} messages"
    if event is not None:
        found = f"a {event.type} with {len(event.messages or [])} messages"
    else:
        found = "no such event"
    running = bool(segments) and segments[-1].status == "running"
    if event is None and running and _attempt() < BASE_MISSING_ATTEMPTS:
        return ApplicationError(
            f"The conversation base of run {run_id!r} ({where}) is not in its history yet "
            f"({found}); retrying",
            type="ConversationBaseMissing",
        )
    return ApplicationError(
        f"The conversation base of run {run_id!r} ({where}) cannot be rebuilt: its history "
        f"has {found} there, and retrying cannot change that. The run's request cannot be "
        "sent; if part of its history (or its fork parent's) was removed, resume the run "
        "from an agent whose store= holds its log.",
        type="ConversationBaseMissing",
        non_retryable=True,
    )


def _attempt() -> int:
    try:
        return activity.info().attempt
    except RuntimeError:  # outside an activity (tests)
        return 1


def event_at(segments: list[Any], position: int) -> Any:
    """The event at whole-run `position` among the segments' events, or None.

    Each execution's input names the whole-run position of its first event
    (`event_offset`), so this holds when earlier history is gone too.
    """
    for segment in reversed(segments):
        start = segment.input.get("event_offset", 0) if isinstance(segment.input, dict) else 0
        if start <= position < start + len(segment.events):
            return segment.events[position - start]
    return None
