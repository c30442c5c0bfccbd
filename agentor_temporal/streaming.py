"""Following a run live: its events in order, and text deltas while it generates.

The workflow publishes every recorded event, numbered by its position in the
run's whole log, to a `temporalio.contrib.workflow_streams` stream; the
`generate` activity adds text deltas to the same stream from whichever worker
runs it. A follower long-polls that stream (each poll a workflow Update), so
it needs nothing but a Temporal client and picks up exactly where it left off:
events before `after` are skipped by their index, and deltas are passed on
only once the follower has reached that point. A finished run is read from
history instead (no worker needed). Deltas are not persisted; the
`generation` and `message` events are the record. A run that continues as
new keeps its stream offsets (the next execution starts where the last one
ended), so a follower goes on polling; one that was behind when it happened
reads the events it missed from history. A poll Temporal has accepted stays
in flight until the run publishes again, even after its follower went away,
and Temporal takes at most 10 updates in flight per execution: a follower
therefore never polls while the run waits for a person, but watches the
run until it may publish again (see `_quiet`), so followers of a paused run
(open or long gone) never keep its decision out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from agentor_temporal._gone import not_found, run_gone
from agentor_temporal._outage import riding_outages, throttled, unreachable, until_reachable
from agentor_temporal._runtime import Runtime
from agentor_temporal._sigterm import draining_on_sigterm
from agentor_temporal._stuck import watching_stuck
from agentor_temporal.activities import _redact
from agentor_temporal.connection import describe_target
from agentor_temporal.store import Event, Store, pending_approvals
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.policies import DELTAS_TOPIC, EVENTS_TOPIC, STREAM_POLL_COOLDOWN

T = TypeVar("T")

#: How long a follower keeps re-subscribing after unexpected poll errors.
RESUBSCRIBE_BACKOFF = (0.1, 0.25, 0.5, 1.0, 2.0)
#: How often a follower the stream refused reads the run's history instead.
HISTORY_POLL = 1.0
#: How often a follower of a run waiting for a person asks whether it goes on.
QUIET_POLL = 0.5
#: How long asking the run may take (no worker answering: ask again later).
QUIET_QUERY_TIMEOUT = timedelta(seconds=5)


class RunFailedError(RuntimeError):
    """The run's workflow ended without a `run_end` (terminated, failed input...)."""


def retry_marker(turn: int, attempt: int) -> Event:
    """What a follower sees when a streamed model attempt is retried."""
    return Event(
        type="error",
        turn=turn,
        error=(
            f"model attempt {attempt} of turn {turn} started: text streamed earlier "
            "in this turn is void"
        ),
    )


async def follow(
    client: Client,
    run_id: str,
    *,
    after: int = 0,
    text: bool = False,
    history_events: Callable[[list[Segment]], Awaitable[list[Event]]],
    mirror: Store | None = None,
) -> AsyncIterator[Event]:
    """Yield the run's events from position `after` (and deltas if `text`).

    Ends after the latest segment's `run_end`.

    Args:
        mirror: the run's store (its JSONL mirror), named when the run is gone from Temporal.

    Raises:
        KeyError: when Temporal has no run with this id, or no longer has it
            (the server came back empty): never a quiet end.
        RunFailedError: when the run's workflow ended without a `run_end`.
    """
    async for event, _ in follow_timed(
        client, run_id, after=after, text=text, history_events=history_events, mirror=mirror
    ):
        yield event


async def follow_timed(
    client: Client,
    run_id: str,
    *,
    after: int = 0,
    text: bool = False,
    history_events: Callable[[list[Segment]], Awaitable[list[Event]]],
    mirror: Store | None = None,
) -> AsyncIterator[tuple[Event, float | None]]:
    """`follow`, with the workflow time each live event was recorded (for benchmarks)."""
    # a run whose workflow task fails on every try is named in a warning, not waited on mutely
    async with watching_stuck(client, run_id):
        follower = _follow_timed(
            client, run_id, after=after, text=text, history_events=history_events, mirror=mirror
        )
        async with contextlib.aclosing(follower) as items:
            async for item in items:
                yield item


async def _follow_timed(
    client: Client,
    run_id: str,
    *,
    after: int,
    text: bool,
    history_events: Callable[[list[Segment]], Awaitable[list[Event]]],
    mirror: Store | None,
) -> AsyncGenerator[tuple[Event, float | None], None]:
    store = TemporalStore(client)
    what = f"following run {run_id!r}"
    # a follower picks the run up again from the events it has, not by `resume`
    again = f"`stream({run_id!r}, after=<events you have>)` follows it on"

    async def read() -> tuple[list[Segment], list[Event]]:
        segments = await store.segments(run_id)
        return segments, (await history_events(segments) if segments else [])

    async def reading() -> tuple[list[Segment], list[Event]]:
        # a server outage is waited out (within `outage_patience`), never an end
        return await riding_outages(read, client, what=what, run_id=run_id, again=again)

    segments, events = await reading()
    if not segments:
        raise KeyError(f"No run with id {run_id!r} in Temporal at {describe_target(client)}")
    latest = segments[-1]
    if latest.status != "running":
        for event in events[after:]:
            yield event, None
        if latest.status != "completed" and (not events or events[-1].type != "run_end"):
            raise RunFailedError(_ended(run_id, latest))
        return

    offset = latest.input.get("event_offset", 0) if isinstance(latest.input, dict) else 0
    offset = max(offset, len(events) - len(latest.events))
    next_index = after
    for event in events[after:offset]:
        yield event, None
        next_index += 1
    # deltas count as new only once the follower reached its resume point
    passed = next_index >= after and after <= offset
    topics = [EVENTS_TOPIC, DELTAS_TOPIC] if text else [EVENTS_TOPIC]
    stream_offset = 0
    retries = 0
    # calls waiting for a person as of the events passed so far (see `_quiet`)
    waiting = {str(e.call_id) for e in pending_approvals(events[:offset])}
    handle = client.get_workflow_handle(run_id)
    while True:
        quiet = False
        try:
            # an async generator: closed on leaving, so no poll starts after a break
            subscription = cast(
                AsyncGenerator[Any, None],
                WorkflowStreamClient.create(client, run_id).subscribe(
                    topics, from_offset=stream_offset, poll_cooldown=STREAM_POLL_COOLDOWN
                ),
            )
            async with contextlib.aclosing(subscription) as items:
                async for item in items:
                    stream_offset = item.offset + 1
                    retries = 0
                    data = item.data
                    if item.topic == EVENTS_TOPIC:
                        index = int(data["index"])
                        _track(waiting, data["event"])
                        if index < next_index:
                            if index == after - 1:
                                passed = True
                            if waiting:
                                quiet = True
                                break
                            continue
                        if index > next_index:
                            # the run continued as new while this follower was
                            # behind: the events in between are in history
                            segments, events = await reading()
                            for missed in events[next_index:index]:
                                yield missed, None
                                next_index += 1
                            if index > next_index:
                                break  # history does not have them: read it all below
                        event = Event.from_dict(data["event"])
                        next_index, passed = index + 1, True
                        yield event, data.get("published_at")
                        if event.type == "run_end":
                            return
                        if waiting:
                            quiet = True
                            break
                    elif passed:
                        if data.get("reset"):
                            yield retry_marker(int(data["turn"]), int(data["attempt"])), None
                        else:
                            delta = Event(type="text_delta", text=data["text"], turn=data["turn"])
                            yield delta, None
            if quiet:
                await _quiet(handle, next_index)
                continue
            break  # the stream ended: the workflow closed without our run_end
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            if retries >= len(RESUBSCRIBE_BACKOFF):
                break
            if unreachable(exc) or throttled(exc):
                # the server went away (or sheds load): subscribe again once it is back
                await until_reachable(client, what=what, run_id=run_id, again=again)
            await asyncio.sleep(RESUBSCRIBE_BACKOFF[retries])
            retries += 1
            latest_now = await riding_outages(
                lambda: store.latest(run_id), client, what=what, run_id=run_id, again=again
            )
            if latest_now is None:  # the server came back without it
                raise await run_gone(client, run_id, mirror) from None
            # a newer execution (continue-as-new) is the same run: follow it
            if latest_now.status != "running":
                break
    # closed without a run_end seen live, or the stream refused this follower
    # (Temporal caps an execution's updates, and each poll is one): read what
    # history has, again each HISTORY_POLL, until the run's workflow closes
    ended = False
    while True:
        segments, events = await reading()
        if not segments:  # the server came back without it
            raise await run_gone(client, run_id, mirror)
        for event in events[next_index:]:
            ended = ended or event.type == "run_end"
            yield event, None
        next_index = max(next_index, len(events))
        if not segments or segments[-1].status != "running":
            break
        await asyncio.sleep(HISTORY_POLL)
    if not ended and segments and segments[-1].status not in ("running", "completed"):
        raise RunFailedError(_ended(run_id, segments[-1]))


def _ended(run_id: str, segment: Segment) -> str:
    """Why a run's workflow ended without a `run_end`, masked: a termination's reason is
    typed by a person and recorded as it was (a URL with its password, a key)."""
    return _redact.clean(f"Run {run_id!r} {segment.status}: {segment.failure}")


def _track(waiting: set[str], event: dict[str, Any]) -> None:
    """Keep `waiting` (call ids waiting for a person) up to date with one more event."""
    kind = event.get("type")
    if kind == "approval_request":
        waiting.add(str(event.get("call_id")))
    elif kind == "approval_decision":
        waiting.discard(str(event.get("call_id")))
    elif kind in ("run_start", "run_end"):
        waiting.clear()


async def _quiet(handle: WorkflowHandle[Any, Any], next_index: int) -> None:
    """Return once the run may publish again: it waits for no person, or has newer events.

    A poll sent while the run waits for a person would stay in flight until
    a decision comes, and Temporal takes only 10 updates in flight per
    execution, the decision among them: ten followers, even ones long gone,
    would keep the decision out for good. So the follower watches the run's
    history length (a describe, which no worker answers) and asks the run
    itself (a query, which leaves no trace) only when it changed; when no
    worker answers, it asks again each QUIET_POLL rather than poll.
    """
    seen: int | None = None
    execution: str | None = None
    while True:
        try:
            description = await handle.describe()
        except RPCError as exc:
            if not_found(exc):
                return  # gone (the server came back empty): the stream says so
            description = None  # Temporal is unreachable for now: look again
        if description is not None:
            if description.status != WorkflowExecutionStatus.RUNNING:
                return  # closed: the stream reads what it has left
            if execution is not None and description.run_id != execution:
                return  # continued as new: the stream follows the next execution
            execution = description.run_id
            if description.history_length != seen:
                try:
                    state = await handle.query("state", rpc_timeout=QUIET_QUERY_TIMEOUT)
                except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError):
                    state = None  # no worker answers now: ask again next time
                if state is not None:
                    if (
                        not isinstance(state, dict)
                        or state.get("status") != "awaiting_approval"
                        or int(state.get("events") or 0) > next_index
                    ):
                        return
                    seen = description.history_length
        await asyncio.sleep(QUIET_POLL)


async def on_runtime(factory: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    """Iterate an async iterator that must run on the runtime loop, from any loop.

    Items cross loops through a queue; when the consumer stops early, the
    producer is cancelled (the run itself carries on in Temporal).
    """
    runtime = Runtime.get()
    consumer = asyncio.get_running_loop()
    if consumer is runtime.loop:
        async for item in factory():
            yield item
        return
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(kind: str, value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the consumer's loop closed: nobody reads
            consumer.call_soon_threadsafe(queue.put_nowait, (kind, value))

    async def pump() -> None:
        try:
            async for item in factory():
                put("item", item)
            put("end", None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer
            put("error", exc)

    future = asyncio.run_coroutine_threadsafe(pump(), runtime.loop)
    # the pump cancelled without the consumer asking (the exit hook's `close` cancels what
    # the runtime's loop still runs): the consumer is told, rather than waiting for ever
    future.add_done_callback(lambda done: put("cut", None) if done.cancelled() else None)
    try:
        # a thread following a stream is a caller the exit hook waits for, as one in `run()`:
        # a non-daemon thread streaming as the main thread returned was not, and once the
        # worker stopped it waited for ever on the run's next event (the script hung at exit)
        with runtime.calling(), draining_on_sigterm():
            while True:
                kind, value = await queue.get()
                if kind == "item":
                    yield value
                elif kind == "end":
                    return
                elif kind == "cut":
                    if runtime.exiting:
                        raise runtime.cut_off()
                    raise RuntimeError(
                        "agentor_temporal: this process's runtime was closed while the stream "
                        "was followed; the run stays in Temporal (`stream` or `resume` it by "
                        "its run id)"
                    )
                else:
                    raise value
    finally:
        # not awaited: a consumer being cancelled must not wait for the pump
        future.cancel()
