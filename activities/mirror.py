"""Keeping a store's copy of a run true to Temporal's record.

Mirroring appends by position: the store is counted and only events past its
end are written. Counting alone is not enough: a log with a damaged middle
line loads one event short, and extending it would write its last event a
second time; a log copied from another run, or with lines moved or repeated,
has a plausible length and the wrong story. So before a copy is extended
whenever it is not exactly what this process last wrote (it was touched by
someone else, or its length is not the expected one), and whenever a finished
run is caught up, its content is compared with the run's record. A copy that
differs is never deleted: it is set aside under a new name, with a warning,
and a complete log is written in its place from Temporal's record.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from agentor_temporal.activities._redact import masked_event
from agentor_temporal.store.base import Store
from agentor_temporal.store.encoding import encodable
from agentor_temporal.store.events import Event

logger = logging.getLogger(__name__)


def store_count(store: Store, run_id: str) -> int:
    """Events the store holds for the run (fast when the store can count)."""
    count = getattr(store, "count", None)
    if callable(count):
        return int(count(run_id))
    return len(store.load(run_id))


def mirror_into(
    store: Store,
    run_id: str,
    start: int,
    events: list[Event],
    lock: threading.Lock | None = None,
) -> int:
    """Write the events whose position is past the store's end; return its new length.

    `events[0]` belongs at position `start`. A store shorter than `start` is
    left alone (the caller backfills the gap first). A store without
    `append_from` is counted and appended to under `lock`, so two journal
    steps of one run in this process cannot both append the same event.
    """
    append_from = getattr(store, "append_from", None)
    if callable(append_from):
        return int(append_from(run_id, start, events))
    with lock or contextlib.nullcontext():
        have = store_count(store, run_id)
        if have < start:
            return have
        for event in events[have - start :]:
            store.append(run_id, event)
            have += 1
        return max(have, start + len(events))


def unchanged(store: Store, run_id: str) -> bool:
    """Whether the store vouches that its copy is what it last wrote (True if it cannot say)."""
    check = getattr(store, "unchanged", None)
    return bool(check(run_id)) if callable(check) else True


def same_event(a: Event, b: Event) -> bool:
    """Whether two events are the same as a log holds them."""
    # as written to JSONL: lone surrogates and non-finite numbers normalised
    if encodable(a.to_dict()) == encodable(b.to_dict()):
        return True
    # the same but for the keys this process knows: one side written before they were
    # known (by an older version, or a worker that did not know them), masked on the other
    return bool(encodable(masked_event(a).to_dict()) == encodable(masked_event(b).to_dict()))


def reconcile(
    store: Store,
    run_id: str,
    expected: list[Event],
    lock: threading.Lock | None = None,
    *,
    confirmed: int | None = None,
    superseded: bool = False,
    again: bool = True,
) -> int | None:
    """Make the store's copy of the run a prefix of `expected` (the run's record).

    Args:
        store: the mirror.
        run_id: the run.
        expected: the run's events as recorded, from position 0.
        lock: serialises this process's writes to the run's copy.
        confirmed: how many of `expected` history holds for certain (the rest
            are this step's, not yet committed); None: all of them (a finished
            run), and then any difference means a damaged or foreign copy.
        superseded: the caller's step belongs to an execution that no longer
            runs the run: events past `expected` are the current execution's
            (written ahead of its record), not this caller's to move.
        again: whether to compare once more when the copy was found right
            under the store's lock (another worker replaced it meanwhile).

    A copy that differs from the record within its confirmed part is damaged
    or foreign: it is set aside (never deleted) and replaced by all of
    `expected`, with a warning naming both files. A copy that differs only
    past the confirmed part holds events a lost workflow task wrote before
    its worker died, which the record did not keep as written (a replay
    stamps them anew): those are moved to a side file and the copy goes on.

    Returns:
        The copy's length when it can be extended from there, or None when
        it cannot be trusted and the store cannot set it aside (then nothing
        more is written to it, and an error says so).
    """
    length, first, where = _compared(store, run_id, expected)
    if first is None:
        vouch = getattr(store, "vouch", None)
        if callable(vouch):
            vouch(run_id)
        return length
    if superseded and first >= len(expected):
        return length
    retract = getattr(store, "retract", None)
    if confirmed is not None and first >= confirmed and callable(retract):
        with lock or contextlib.nullcontext():
            moved = retract(run_id, first)
        logger.info(
            "Run %s: events %d.. of its log in %r were written by a workflow task that did "
            "not complete and were recorded differently; moved to %s",
            run_id,
            first,
            store,
            moved,
        )
        return first
    replace_log = getattr(store, "replace_log", None)
    if callable(replace_log):
        # compared again, set aside and written whole under the lock writers take (a
        # FileStore): a writer elsewhere never writes into the copy set aside, and a
        # second worker finding the same wrong log finds it right by then
        def wrong() -> bool:
            return _compared(store, run_id, expected)[1] is not None

        with lock or contextlib.nullcontext():
            moved = replace_log(run_id, expected, wrong)
        if moved is None:
            if again:
                return reconcile(
                    store,
                    run_id,
                    expected,
                    lock,
                    confirmed=confirmed,
                    superseded=superseded,
                    again=False,
                )
            logger.error(
                "The log of run %s in %r kept changing while it was set right; nothing more "
                "is written to it in this step. Temporal has every event.",
                run_id,
                store,
            )
            return None
        _warn_set_aside(store, run_id, where, moved, len(expected))
        return len(expected)
    set_aside = getattr(store, "set_aside", None)
    if not callable(set_aside):
        logger.error(
            "The log of run %s in %r does not match the run (%s); this store cannot set it "
            "aside, so nothing more is written to it. Temporal has every event.",
            run_id,
            store,
            where,
        )
        return None
    with lock or contextlib.nullcontext():
        moved = set_aside(run_id)
        written = mirror_into(store, run_id, 0, expected)
    _warn_set_aside(store, run_id, where, moved, written)
    return written


def _warn_set_aside(store: Store, run_id: str, where: str, moved: object, written: int) -> None:
    logger.warning(
        "The log of run %s in %r did not match the run (%s); it was set aside as %s and a "
        "complete log of %d events was written from Temporal's record",
        run_id,
        store,
        where,
        moved,
        written,
    )


def _compared(store: Store, run_id: str, expected: list[Event]) -> tuple[int, int | None, str]:
    """Whether the copy is `expected` or a prefix of it: (its length, None, ""), or
    (events read, where it first differs, how).

    Read an event at a time where the store can (`FileStore.iterate`): a
    generation's line holds its whole request, so a long run's log grows with
    the square of its turns, and loading it whole to compare took gigabytes
    at the first step of each run a worker had not written (after a restart).
    """
    iterate = getattr(store, "iterate", None)
    stored: Iterator[Event] = iterate(run_id) if callable(iterate) else iter(store.load(run_id))
    length = 0
    try:
        for index, event in enumerate(stored):
            length = index + 1
            if index < len(expected) and not same_event(event, expected[index]):
                there, here = event.type, expected[index].type
                return length, index, f"event {index} is {there!r} there, {here!r} in the run"
    finally:
        close = getattr(stored, "close", None)
        if callable(close):
            close()  # the file, at once
    if length > len(expected):
        return length, len(expected), f"{length} events there, {len(expected)} in the run"
    return length, None, ""
