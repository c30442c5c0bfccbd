"""Recording a run: the agent spec, and new events into history and the store.

Both run as local activities: they need no server round trip, and their
results are written into history with the next workflow-task completion. The
journal's *result* is the new events, which is how `TemporalStore` reads a
run's story out of history with no worker running; its *input* (never
persisted) also carries events the store has not confirmed, so a store that
failed is caught up on the next step. Mirroring is idempotent by position: the
store is counted and only events past its end are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentor_temporal.activities.conversations import full_messages, long_run_settings
from agentor_temporal.activities.registry import AgentRegistry, UnknownAgentError
from agentor_temporal.store.base import Store
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.activity_types import (
    DescribeAgentInput,
    JournalInput,
    JournalResult,
)
from agentor_temporal.workflows.types import AgentSpec

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


def catch_up(store: Store, run_id: str, events: list[Event], agent: str) -> int | None:
    """Append to `store` the events of a finished run that its copy lacks.

    For a mirror that fell behind (a store that failed until the run's end):
    idempotent by position like every mirror write, and only for runs of
    `agent`, so resuming someone else's finished run writes nothing. Logs
    and returns None instead of raising: the run's result matters more.
    """
    starts = [e for e in events if e.type == "run_start"]
    if not starts or starts[-1].agent != agent:
        return None
    try:
        return mirror_into(store, run_id, 0, events)
    except Exception as exc:
        logger.error(
            "Catching up the mirror of run %s in %r failed (%s: %s); Temporal still has "
            "every event",
            run_id,
            store,
            type(exc).__name__,
            exc,
        )
        return None


async def describe_agent(registry: AgentRegistry, inp: DescribeAgentInput) -> AgentSpec:
    """The registered agent's spec, or a non-retryable error naming the known ones."""
    try:
        agent = registry.get(inp.agent)
    except UnknownAgentError as exc:
        raise ApplicationError(str(exc), type="UnknownAgent", non_retryable=True) from None
    spec = agent.spec(
        mirror=registry.store_for(inp.agent) is not None,
        search_attributes=registry.search_attributes,
        status_attributes=registry.status_attributes,
        fork_attribute=registry.fork_attribute,
    )
    try:
        spec.history_budget, spec.inline_bytes = long_run_settings()
    except ValueError as exc:
        raise ApplicationError(str(exc), type="BadWorkerSetting", non_retryable=True) from None
    return spec


async def journal(registry: AgentRegistry, inp: JournalInput) -> JournalResult:
    """Return the new events for history; mirror everything unconfirmed into the store."""
    offset = inp.new_from - inp.start
    new = [dict(e) for e in inp.events[offset:]]
    refs = {k: v for k, v in inp.refs.items() if int(k) >= inp.new_from}
    for key in refs:
        # the request is already in history as the generate activity's input
        new[int(key) - inp.new_from].pop("messages", None)
    result = JournalResult(events=new, start=inp.new_from, refs=refs)
    if not inp.mirror:
        return result
    store = registry.store_for(inp.agent)
    if store is None:
        return result
    events = [Event.from_dict(e) for e in inp.events]
    start = inp.start
    try:
        for key, request in inp.requests.items():
            # a generation sent by reference: the store gets its whole request
            index = int(key) - start
            if 0 <= index < len(events) and events[index].messages is None:
                known = await full_messages(
                    inp.run_id, request["conversation"], request["messages"], int(key)
                )
                events[index].messages = known.messages
        have = await asyncio.to_thread(store_count, store, inp.run_id)
        if have < start:
            earlier = await _backfill(inp.run_id, have, start, store)
            if earlier is not None:
                events, start = earlier + events, have
        lock = registry.run_lock(store, inp.run_id)
        result.mirrored = await asyncio.to_thread(
            mirror_into, store, inp.run_id, start, events, lock
        )
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        logger.error(
            "Mirroring run %s into %r failed (%s); Temporal still has every event and "
            "the next step retries",
            inp.run_id,
            store,
            result.error,
        )
        if inp.strict:
            raise ApplicationError(f"Mirror failed: {result.error}", type="MirrorFailed") from None
    return result


async def _backfill(run_id: str, have: int, start: int, store: Store) -> list[Event] | None:
    """Events `have..start` of the run, read from Temporal, or None if unavailable.

    A fork's first events are its parent's: read from the parent's history,
    or from `store` when only the store has the parent.
    """
    try:
        client = activity.client()
    except RuntimeError:  # outside a worker (unit tests): nothing to read from
        return None
    from agentor_temporal.workflows.projection import TemporalStore

    try:
        earlier, _ = await TemporalStore(client).whole(run_id, store=store)
    except Exception as exc:
        logger.error("Cannot backfill the mirror of run %s from Temporal: %s", run_id, exc)
        return None
    if len(earlier) < start:
        logger.error(
            "The mirror of run %s has %d events; Temporal has %d of the %d before this step",
            run_id,
            have,
            len(earlier),
            start,
        )
        return None
    return earlier[have:start]
