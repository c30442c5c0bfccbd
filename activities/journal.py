"""Recording a run: the agent spec, and new events into history and the store.

Both run as local activities: they need no server round trip, and their
results are written into history with the next workflow-task completion. The
journal's *result* is the new events, which is how `TemporalStore` reads a
run's story out of history with no worker running; its *input* (never
persisted) also carries events the store has not confirmed, so a store that
failed is caught up on the next step. Mirroring is idempotent by position: the
store is counted and only events past its end are written; a copy that is not
what this process last wrote is first checked against the run's record
(`activities.mirror`), so a damaged or foreign log is set aside, never extended.
Most steps need no journal step: their events ride in the next `generate` or
`call_tool` input, and `mirror_folded` writes them from there.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agentor_temporal.activities import _redact
from agentor_temporal.activities._errors import safe_str
from agentor_temporal.activities._private import clip
from agentor_temporal.activities._store_patience import StoreSilent, patiently
from agentor_temporal.activities.conversations import CACHE, full_messages, long_run_settings
from agentor_temporal.activities.mirror import (
    mirror_into,
    reconcile,
    same_event,
    store_count,
    unchanged,
)
from agentor_temporal.activities.registry import AgentRegistry, UnknownAgentError
from agentor_temporal.store.base import Store, in_thread
from agentor_temporal.store.events import Event
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import (
    DescribeAgentInput,
    JournalInput,
    JournalResult,
)
from agentor_temporal.workflows.formatting import QUOTED_CHARS, quoted
from agentor_temporal.workflows.types import AgentSpec

logger = logging.getLogger(__name__)


def catch_up(store: Store, run_id: str, events: list[Event], agent: str) -> int | None:
    """Make the store's copy of a finished run complete and true to `events`.

    For a mirror that fell behind (a store that failed until the run's end),
    or one that was damaged meanwhile: a copy that matches is extended with
    what it lacks; one that does not is set aside and rewritten (see
    `activities.mirror`). Only for runs of `agent`, so resuming someone
    else's finished run writes nothing. Logs and returns None instead of
    raising: the run's result matters more.
    """
    starts = [e for e in events if e.type == "run_start"]
    if not starts or starts[-1].agent != agent:
        return None
    events = [_redact.masked_event(e) for e in events]
    try:
        have = reconcile(store, run_id, events)
        if have is None:
            return None
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
    return agent_spec(registry, inp)


def spec_of(registry: AgentRegistry, agent: str, fingerprint: str | None) -> AgentSpec | None:
    """What the describe step would record for `agent` on this worker, or None where it fails.

    A run whose starter found the same spec (a worker in its own process)
    takes it from its memo instead of a describe step (`workflows.segment`).
    """
    try:
        return agent_spec(registry, DescribeAgentInput(agent, fingerprint or ""))
    except ApplicationError:
        return None


def agent_spec(registry: AgentRegistry, inp: DescribeAgentInput) -> AgentSpec:
    """The describe step's answer (see `describe_agent`)."""
    try:
        agent = registry.get(inp.agent)
    except UnknownAgentError as exc:
        raise ApplicationError(str(exc), type="UnknownAgent", non_retryable=True) from None
    if inp.fingerprint and agent.fingerprint() != inp.fingerprint:
        # the segment has not started: failing it costs nothing, and a local
        # activity cannot leave its task for another worker
        raise ApplicationError(
            f"The run was started for agent {quoted(inp.agent)} built as "
            f"{clip(inp.fingerprint, QUOTED_CHARS)}, but this worker's is built differently "
            f"({agent.fingerprint()}); a worker with the same definition (same model, "
            "instructions and tools) must run it; or go on with this build in a new run "
            "that copies it: fork(run_id).",
            type="AgentDefinitionMismatch",
            non_retryable=True,
        )
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
    spec.behaviour = policies.BEHAVIOUR
    return spec


async def journal(registry: AgentRegistry, inp: JournalInput) -> JournalResult:
    """Return the new events for history; mirror everything unconfirmed into the store."""
    result = inp.recorded()
    try:
        return await _mirror(registry, inp, result)
    finally:
        if any(e.get("type") == "run_end" for e in inp.events):
            # the segment ended: its conversation is never asked for again here
            # (a resumed run reads its base from history once)
            CACHE.forget(inp.run_id)


async def mirror_folded(registry: AgentRegistry, inp: JournalInput) -> int | None:
    """Mirror the events a `generate` or `call_tool` input carries; return how far it got.

    The events are in history already (the input is). A retry finds them
    written by its earlier attempt and writes nothing. None when this agent
    is not mirrored, or the store failed (logged; the run's next journal
    step catches it up).
    """
    result = await _mirror(registry, inp, JournalResult(start=inp.start))
    return result.mirrored if result.error is None else None


async def _mirror(
    registry: AgentRegistry, inp: JournalInput, result: JournalResult
) -> JournalResult:
    """Mirror everything unconfirmed into the agent's store; note an error in `result`."""
    if not inp.mirror:
        return result
    store = registry.store_for(inp.agent)
    if store is None:
        return result
    try:
        # a copy: a store answering late finishes with its own result, never this one
        lock = registry.run_lock(store, inp.run_id)
        copy = dataclasses.replace(result)
        return await patiently(store, inp.run_id, lambda: _mirror_into(store, lock, inp, copy))
    except StoreSilent as exc:
        result.error = str(exc)
        return result


async def _mirror_into(
    store: Store, lock: threading.Lock, inp: JournalInput, result: JournalResult
) -> JournalResult:
    """`_mirror` once the agent's store is known; waited for `policies.STORE_PATIENCE`."""
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
        # the JSONL is read as it is (by people, by Agentor): a key a client sent in the
        # run's input, which history holds as sent, is masked here (`masked_event`)
        events = [_redact.masked_event(e) for e in events]
        # the usual case in one trip to a thread (each trip is a handoff of
        # the GIL, which a busy worker pays for in latency)
        have, same, written = await in_thread(_next_in_line, store, inp.run_id, start, events, lock)
        if written is not None:
            result.mirrored = written
            return result
        if have != start or not same:
            # a gap, an overlap, or a copy someone else touched: check it first
            record = await _record(inp.run_id, store, start)
            if record is not None:
                record = [_redact.masked_event(e) for e in record]
                expected, confirmed = record[:start] + events, start
                superseded = _superseded(record, events, start, inp.new_from)
                if superseded:
                    # history holds other events where this step's new ones go: an
                    # execution that no longer runs the run (its workflow task was
                    # lost, and another worker took the run on) writing late; the
                    # record wins, this step's events are not written, and events
                    # past the record are the current execution's, left alone
                    logger.info(
                        "Run %s: a step of an execution that no longer runs it mirrored "
                        "late (events %d..); the log is kept to the run's record",
                        inp.run_id,
                        inp.new_from,
                    )
                    expected, confirmed = record, len(record)
                kept = await in_thread(
                    functools.partial(
                        reconcile,
                        store,
                        inp.run_id,
                        expected,
                        lock,
                        confirmed=confirmed,
                        superseded=superseded,
                    )
                )
                if kept is None:
                    result.error = "the store's copy does not match the run"
                    return result
                events, start = expected, 0
        result.mirrored = await in_thread(mirror_into, store, inp.run_id, start, events, lock)
    except Exception as exc:
        # recorded in history, where the UI shows it: a store's error may
        # quote its connection URL (`postgresql://user:password@host/db`)
        result.error = _redact.clean(safe_str(exc))
        logger.error(
            "Mirroring run %s into %r failed (%s); Temporal still has every event and "
            "the next step retries",
            inp.run_id,
            store,
            result.error,
        )
        if inp.strict:
            # benign: said above in one line; the SDK logged it again with a traceback
            raise ApplicationError(
                f"Mirror failed: {result.error}",
                type="MirrorFailed",
                category=ApplicationErrorCategory.BENIGN,
            ) from None
    return result


def _next_in_line(
    store: Store, run_id: str, start: int, events: list[Event], lock: threading.Lock
) -> tuple[int, bool, int | None]:
    """(count, unchanged, new length): written when the store ends where `events` begin.

    The new length is None when the copy must be checked first: a gap, an
    overlap, or a file someone else touched. A copy already holding exactly
    these events (a retried step, written by this process) is left as it is.
    """
    visit = getattr(store, "append_next", None)
    if callable(visit):  # a FileStore: the same in one open of the file
        found: tuple[int, bool, int | None] = visit(run_id, start, events)
        return found
    have, same = store_count(store, run_id), unchanged(store, run_id)
    if same and events and have == start + len(events):
        return have, same, have
    if same and have == start:
        return have, same, mirror_into(store, run_id, start, events, lock)
    return have, same, None


async def _record(run_id: str, store: Store, start: int) -> list[Event] | None:
    """The run's events as recorded, at least `start` of them.

    A fork's parent's events or a store-seeded prefix come first.

    None when they cannot be read now (outside a worker, Temporal unreachable,
    or history does not hold them all yet): the check waits for a later step.
    """
    try:
        client = activity.client()
    except RuntimeError:  # outside a worker (unit tests): nothing to read from
        return None
    from agentor_temporal.workflows.projection import TemporalStore

    try:
        recorded, missing = await TemporalStore(client).whole(run_id, store=store)
    except Exception as exc:
        logger.error("Cannot read run %s from Temporal to check its mirror: %s", run_id, exc)
        return None
    if missing or len(recorded) < start:
        return None
    return recorded


def _superseded(record: list[Event], events: list[Event], start: int, new_from: int) -> bool:
    """Whether history already holds, where this step's new events go, different ones.

    `record` is the run's events as history holds them now; `events[0]` is
    at position `start`, and those from `new_from` on are the ones this step
    brings to history. History never holds them while the step is current
    (they reach it with the step's result), except as the input of the
    activity that carries them, and then they are the same events.
    """
    return any(
        not same_event(held, ours)
        for held, ours in zip(record[new_from:], events[new_from - start :], strict=False)
    )
