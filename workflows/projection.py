"""`TemporalStore`: a run's events read straight out of Temporal history.

Read-only, and needs no worker: each execution's history is read into a
`Segment` (see `history_reader`: the journal's markers, and the request
messages history already holds in activity inputs). A request sent by
reference (see `conversation`) is its base, an earlier event's messages,
followed by the messages that input carries; `resolve_requests` finds that
base across the segments. A resumed or continued run spans several
executions of one workflow id; each segment names the one before it, so the
projection walks that chain rather than trusting eventually-consistent
visibility. A fork's log begins with its parent's first events, which its
first segment references rather than copies: `whole` prepends them (read from
the parent's history, or from a store when only a store has them).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.store.base import Store, in_thread, read_events, validate_run_id
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.history_reader import NotAnAgentRun, Segment, read_segment
from agentor_temporal.workflows.policies import WORKFLOW_TYPE
from agentor_temporal.workflows.redaction import redact_address
from agentor_temporal.workflows.types import ForkOrigin

__all__ = ["Segment", "TemporalStore", "known_messages", "resolve_requests"]

T = TypeVar("T")


def resolve_requests(
    chain: list[Segment],
    known: dict[int, list[dict[str, Any]]] | None = None,
    digests: dict[int, str] | None = None,
) -> None:
    """Give each event sent by reference its whole messages (oldest segment first).

    `known` has the messages of events not in `chain` (or known already), by
    whole-run position. A base found nowhere (history gone, or only the
    latest execution read) leaves that event's messages None.
    """
    known = dict(known or {})
    for segment in chain:
        start = segment.event_offset
        for index, event in enumerate(segment.events):
            pending = segment.pending.get(index)
            if pending is not None:
                conversation, tail = pending
                at = int(conversation.get("position", -1))
                base = known.get(at)
                expected = (digests or {}).get(at)
                if expected is not None and conversation.get("digest") != expected:
                    base = None  # `known` holds another conversation than this names
                if base is not None:
                    event.messages = base + tail
                    # unresolved ones stay: a fork's base is in its parent's
                    # events, which `whole` reads after the segments
                    del segment.pending[index]
            if event.messages is not None and event.type in ("run_start", "generation"):
                known[start + index] = event.messages


def known_messages(events: list[Event], start: int = 0) -> dict[int, list[dict[str, Any]]]:
    """The messages of the events a request may name as its base, by whole-run position."""
    return {
        start + i: e.messages
        for i, e in enumerate(events)
        if e.messages is not None and e.type in ("run_start", "generation")
    }


def _run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())  # type: ignore[arg-type]
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="agentor-temporal-store")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class TemporalStore:
    """Project runs out of Temporal history (read-only).

    Args:
        client: a connected `temporalio.client.Client`.
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    def __repr__(self) -> str:
        # a `user:password@` in the address (TEMPORAL_ADDRESS) is not shown
        return f"TemporalStore({redact_address(self.client.service_client.config.target_host)!r})"

    # -- the Store protocol ------------------------------------------------

    def append(self, run_id: str, event: Event) -> None:
        """Refused: Temporal's history is written by the workflow alone."""
        raise TypeError("TemporalStore is read-only: runs write their history themselves")

    def load(self, run_id: str) -> list[Event]:
        """Every event of the run across its segments ([] for an unknown run)."""
        return _run_sync(lambda: self.aload(run_id))

    def list_runs(self) -> list[str]:
        """Every run id with an `AgentRun` workflow, sorted."""
        return _run_sync(self.alist_runs)

    # -- async API ---------------------------------------------------------

    async def aload(self, run_id: str) -> list[Event]:
        """Async `load`."""
        events, _ = await self.whole(run_id)
        return events

    async def whole(
        self,
        run_id: str,
        segments: list[Segment] | None = None,
        store: Store | None = None,
    ) -> tuple[list[Event], int]:
        """(the run's whole log, how many of its first events could not be read).

        The log is the segments' events after whatever preceded the first of
        them: a fork's parent events (from the parent's history, else from
        `store`), or the events of a run continued from a store. `store` also
        stands in for history that retention removed.

        A fork of a fork of ... is read down its whole line of parents, one
        history each, in a loop: a chat app that continues a conversation by
        forking its last run at each message makes a line as long as the chat,
        and a line cut at a depth left every later fork's log short (its fork,
        resume and a long conversation's rebuild refused for good). A parent
        met twice (a hand-written input whose parents loop) is not read again.

        Args:
            run_id: the run.
            segments: its segments, when the caller has read them already.
            store: where events Temporal does not hold may be (optional).
        """
        if segments is None:
            segments = await self.segments(run_id)
        # the line of runs read so far, the run asked for first: each one's
        # log begins with the first `fork.at` events of the next one's
        line: list[tuple[str, list[Segment]]] = []
        seen: set[tuple[str, str]] = set()
        parent: tuple[list[Event], int] | None = None
        while True:
            line.append((run_id, segments))
            first = segments[0] if segments else None
            origin = first.fork if first is not None and not first.previous else None
            if origin is None or not origin.at or origin.execution is None:
                break
            if (origin.run_id, origin.execution) in seen:
                break
            seen.add((origin.run_id, origin.execution))
            try:
                segments = await self.segments(origin.run_id, execution=origin.execution)
            except NotAnAgentRun:
                segments = []  # a plain client's fork input naming another workflow: no parent
            if not segments:
                break
            run_id = origin.run_id
        # from the oldest run read back to the one asked for
        for run_id, segments in reversed(line):
            parent = await self._after(run_id, segments, store, parent)
        assert parent is not None
        return parent

    async def _after(
        self,
        run_id: str,
        segments: list[Segment],
        store: Store | None,
        parent: tuple[list[Event], int] | None,
    ) -> tuple[list[Event], int]:
        """`whole` of one run of a fork line, given its parent's (None: not read from Temporal)."""
        events = [e for s in segments for e in s.events]
        if not segments:
            return events, 0
        first = segments[0]
        offset = first.fork.at if first.fork is not None else first.event_offset
        if not offset:
            return events, 0
        prefix = None
        if first.fork is not None and not first.previous:
            prefix = await self._fork_prefix(first.fork, store, parent)
        if prefix is None and store is not None:
            # the run's own copy: a store-seeded run, a fork's mirror, or
            # segments whose history is gone
            stored = await in_thread(read_events, store, run_id, offset)
            prefix = stored if len(stored) >= offset else None
        if prefix is None:
            return events, offset
        if any(s.pending for s in segments):
            # a fork's conversation sent by reference to one of its parent's events
            resolve_requests(segments, known_messages(prefix))
        return prefix + events, 0

    async def _fork_prefix(
        self, origin: ForkOrigin, store: Store | None, parent: tuple[list[Event], int] | None
    ) -> list[Event] | None:
        """The parent's first `origin.at` events, or None when nothing holds them all."""
        if parent is not None:
            events, missing = parent
            if not missing and len(events) >= origin.at:
                return events[: origin.at]
        if store is not None:
            stored = await in_thread(read_events, store, origin.run_id, origin.at)
            if len(stored) >= origin.at:
                return stored
        return None

    async def alist_runs(self) -> list[str]:
        """Async `list_runs`."""
        ids = set()
        async for execution in self.client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'"):
            ids.add(execution.id)
        return sorted(ids)

    async def segments(
        self,
        run_id: str,
        *,
        execution: str | None = None,
        since: int | None = None,
        known: dict[int, list[dict[str, Any]]] | None = None,
        digests: dict[int, str] | None = None,
    ) -> list[Segment]:
        """The run's executions, oldest first ([] when Temporal has none).

        Walks back from the latest execution (or from `execution`) through
        each segment's predecessor; stops where retention has already
        removed history.

        Args:
            run_id: the run.
            execution: the execution to walk back from (default: the latest).
            since: stop at the execution holding this whole-run position (a
                worker rebuilding a conversation from one it already has).
            known: messages of events at those positions, for requests sent
                by reference whose base is not read.
            digests: the chain digests of `known`: a request naming another
                digest for that base is left unresolved.
        """
        validate_run_id(run_id)
        chain: list[Segment] = []
        seen: set[str] = set()
        while True:
            try:
                if execution is None:
                    segment = await self._current(run_id)
                else:
                    history = await self.client.get_workflow_handle(
                        run_id, run_id=execution
                    ).fetch_history()
                    segment = await self.parse(history)
            except RPCError as exc:
                if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                    break
                raise
            chain.append(segment)
            seen.add(segment.execution_run_id)
            if not segment.previous or segment.previous in seen:
                break
            if since is not None and segment.event_offset <= since:
                break
            execution = segment.previous
        chain.reverse()
        resolve_requests(chain, known, digests)
        return chain

    async def latest(self, run_id: str) -> Segment | None:
        """The run's latest execution, or None when Temporal has none."""
        validate_run_id(run_id)
        try:
            segment = await self._current(run_id)
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return None
            raise
        resolve_requests([segment])
        return segment

    async def _current(self, run_id: str) -> Segment:
        """The run's current execution, read whole and still its latest.

        Temporal reads a long history in pages, each one of the execution the
        first page came from, and a workflow task in flight then is written
        with the commands it made once it completes: so a read begun while
        the run's task was continuing it as new can end at that execution's
        continue-as-new event. That execution is no longer the run's latest
        (taken for one, a stopped run: a resume started a segment of its own,
        asking the model again for what the run's successor execution was
        doing or had done): it is read again, from the one now current.

        Raises:
            RPCError: as Temporal's read does (NOT_FOUND: no such run).
        """
        seen: set[str] = set()
        while True:
            history = await self.client.get_workflow_handle(run_id).fetch_history()
            segment = await self.parse(history)
            if segment.status != "continued_as_new" or segment.execution_run_id in seen:
                return segment
            seen.add(segment.execution_run_id)

    async def parse(self, history: WorkflowHistory) -> Segment:
        """Project one execution's history into a `Segment`."""
        return await read_segment(history, self._decode)

    async def decode(self, payload: Payload) -> Any:
        """A payload of the run's history, through the client's data converter."""
        return await self._decode(payload)

    async def _decode(self, payload: Payload) -> Any:
        values = await self.client.data_converter.decode([payload])
        return values[0] if values else None
