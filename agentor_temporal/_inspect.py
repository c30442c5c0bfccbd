"""Reading runs for people: one run's events as lines, many runs as a table.

Everything here reads Temporal history (through `TemporalStore`) or a store's
JSONL and never queries a workflow, so `show`, `list` and `export` work with
no worker running, for finished runs and for runs in flight alike. Output is
plain ASCII apart from what the model and tools wrote, so it survives any
terminal and `grep`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from temporalio.client import Client

from agentor_temporal._results import shown_error, shown_text
from agentor_temporal._terminal import terminal_text
from agentor_temporal.codec import EncryptionKeyError
from agentor_temporal.store import (
    Event,
    Usage,
    final_event,
    pending_approvals,
    total_usage,
    validate_run_id,
)
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.formatting import call_summary
from agentor_temporal.workflows.policies import WORKFLOW_TYPE

#: Statuses `list --status` accepts: the workflow result's run statuses, and
#: the ways Temporal itself can close an execution.
STATUSES = (
    "running",
    "completed",
    "max_turns",
    "failed",
    "awaiting_approval",
    "terminated",
    "timed_out",
    "canceled",
)
#: Visibility pre-filters: a run's own status lives in its result, which
#: visibility cannot see, so only the execution status narrows the scan.
_EXECUTION_STATUS = {
    "running": "Running",
    "completed": "Completed",
    "max_turns": "Completed",
    "terminated": "Terminated",
    "timed_out": "TimedOut",
    "canceled": "Canceled",
}
#: Histories fetched at once by `list`: enough to hide latency, few enough
#: not to crowd a small server.
_FETCH_CONCURRENCY = 8

_PREVIEW = 72


def preview(text: str | None, limit: int = _PREVIEW) -> str:
    """One line of at most `limit` characters (before escaping), what would act on a
    terminal escaped (`terminal_text`)."""
    flat = " ".join((text or "").split())
    return terminal_text(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def when(timestamp: float | None) -> str:
    """Epoch seconds as local `YYYY-MM-DD HH:MM:SS` (`-` when unknown)."""
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _took(event: Event) -> str:
    if event.started_at is None or event.ended_at is None:
        return ""
    return f" ({event.ended_at - event.started_at:.2f}s)"


@dataclass
class RunSummary:
    """What one line of `list` (and the head of `show`) says about a run."""

    run_id: str
    agent: str | None = None
    model: str | None = None
    #: see `STATUSES`; "unfinished" for a store log with no `run_end`;
    #: "unreadable" for a run encrypted with a key the reader lacks, or started
    #: by another client under an id no run may have (`error` says which)
    status: str = "running"
    started: float | None = None
    ended: float | None = None
    #: model calls over all segments
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    final_output: str | None = None
    error: str | None = None
    #: Temporal executions of the run (resumes and continue-as-new), 0 for a store log
    executions: int = 0
    #: the latest execution's history bytes and events, and whether the
    #: server suggests it continue as new; the largest execution's bytes
    history_bytes: int | None = None
    history_events: int | None = None
    continue_as_new_suggested: bool | None = None
    largest_history_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (`list --json`)."""
        return asdict(self)


def segment_status(segment: Segment) -> str:
    """The run status an execution stands for."""
    if segment.status == "completed":
        return str((segment.result or {}).get("status") or "completed")
    return segment.status


def _from_events(summary: RunSummary, events: list[Event]) -> RunSummary:
    starts = [e for e in events if e.type == "run_start"]
    if starts:
        summary.agent = summary.agent or starts[-1].agent
        summary.model = summary.model or starts[-1].model
        if summary.started is None:
            summary.started = starts[0].started_at
    summary.turns = sum(1 for e in events if e.type == "generation")
    summary.usage = total_usage(events)
    end = final_event(events)
    if end is not None:
        summary.ended = summary.ended or end.ended_at
        summary.error = summary.error or end.error
        if end.status == "completed":
            summary.final_output = summary.final_output or end.text
    # redacted where it was made; again here, for runs recorded before that
    summary.error = shown_error(summary.error)
    summary.final_output = shown_text(summary.final_output)
    return summary


def summarize_segments(
    run_id: str, segments: list[Segment], events: list[Event] | None = None
) -> RunSummary:
    """A run as Temporal has it (`segments` oldest first, at least one).

    Turns and tokens count `events` when given (the whole log, with a fork's
    parent events), else the segments' own.
    """
    latest = segments[-1]
    spec = next((s.spec for s in reversed(segments) if s.spec), None) or {}
    first_input = segments[0].input if isinstance(segments[0].input, dict) else {}
    summary = RunSummary(
        run_id=run_id,
        agent=spec.get("name") or first_input.get("agent"),
        model=spec.get("model"),
        status=segment_status(latest),
        started=segments[0].start_time,
        ended=latest.close_time,
    )
    if summary.status == "running" and pending_approvals(latest.events):
        # as the run's AgentStatus and its `state` query say
        summary.status = "awaiting_approval"
    summary.executions = len(segments)
    summary.history_bytes, summary.history_events = latest.history_bytes, latest.history_events
    summary.continue_as_new_suggested = latest.continue_as_new_suggested
    summary.largest_history_bytes = max(s.history_bytes for s in segments)
    result = latest.result or {}
    summary.final_output = result.get("final_output")
    summary.error = result.get("error") or latest.failure
    return _from_events(
        summary, events if events is not None else [e for s in segments for e in s.events]
    )


def summarize_events(run_id: str, events: list[Event]) -> RunSummary:
    """A run as a store's log has it."""
    end = final_event(events)
    status = (end.status or "completed") if end is not None else "unfinished"
    return _from_events(RunSummary(run_id=run_id, status=status), events)


def event_detail(event: Event) -> str:
    """What one event says, in a line."""
    kind = event.type
    if kind == "run_start":
        messages = event.messages or []
        users = [m for m in messages if m.get("role") == "user"]
        who = f"{event.agent or '?'} ({event.model or '?'})"
        if len(messages) > 2:
            return f"{who}, continuing a conversation of {len(messages)} messages"
        return f"{who}: {preview(str(users[-1].get('content') or '') if users else '')}"
    if kind == "generation":
        tokens = f", {event.usage.total_tokens} tokens" if event.usage else ""
        calls = [c.get("function") or {} for c in event.calls or []]
        if calls:
            asked = ", ".join(_call_text(c) for c in calls)
            return f"asks for {asked}{tokens}{_took(event)}"
        return f'answers "{preview(event.text, 48)}"{tokens}{_took(event)}'
    if kind == "tool_call":
        return call_summary(str(event.name), event.args)
    if kind == "tool_result":
        if event.error is not None:
            return f"{event.name} failed: {preview(event.error, 60)}{_took(event)}"
        return f"{event.name} -> {preview(event.result, 60)}{_took(event)}"
    if kind == "message":
        return preview(event.text)
    if kind == "fork":
        return f"forked from {event.forked_from}"
    if kind == "run_end":
        tokens = f", {event.usage.total_tokens} tokens" if event.usage else ""
        error = f": {preview(event.error, 60)}" if event.error else ""
        return f"{event.status}{tokens}{error}"
    parts = [event.name, event.status, event.text, event.error]
    return preview(" ".join(str(p) for p in parts if p))


def _call_text(function: dict[str, Any]) -> str:
    import json

    args = function.get("arguments") or "{}"
    try:
        # a log written elsewhere may hold the arguments as an object, not its JSON text
        args = args if isinstance(args, dict) else json.loads(args)
    except (ValueError, TypeError):
        args = None
    return call_summary(str(function.get("name")), args if isinstance(args, dict) else None)


def render_run(summary: RunSummary, events: list[Event], *, source: str) -> list[str]:
    """`show`: a head saying how the run stands, then one line per event."""
    took = ""
    if summary.started is not None and summary.ended is not None:
        took = f" (took {summary.ended - summary.started:.1f}s)"
    usage = summary.usage
    lines = [
        f"run      {summary.run_id}",
        f"agent    {summary.agent or '?'} ({summary.model or '?'})",
        f"status   {summary.status}",
        f"started  {when(summary.started)}{took}",
        f"usage    {summary.turns} turn{'s' if summary.turns != 1 else ''}, "
        f"{usage.total_tokens} tokens ({usage.input_tokens} in, {usage.output_tokens} out)",
    ]
    if summary.final_output is not None:
        lines.append(f"output   {preview(summary.final_output, 200)}")
    if summary.error:
        lines.append(f"error    {preview(summary.error, 200)}")
    if summary.history_bytes is not None:
        lines.append(f"history  {history_line(summary)}")
    lines.append(f"source   {source}")
    lines.append("")
    lines.append(f"{'#':>4}  {'turn':>4}  {'event':<12} detail")
    lines.extend(event_row(index, event) for index, event in enumerate(events, 1))
    # the head quotes a plain client's agent name, the rows a model's tool names
    return [terminal_text(line) for line in lines]


def event_row(index: int, event: Event) -> str:
    """`show`'s line for the `index`th event (from 1)."""
    turn = str(event.turn) if event.turn is not None else ""
    # a tool name the model made up, a fork's parent: as they were recorded
    return terminal_text(f"{index:>4}  {turn:>4}  {event.type:<12} {event_detail(event)}")


def summary_part(event: Event) -> Event | None:
    """What `summarize_events` reads of `event` (None: nothing), without its request.

    So a long log can be summarized as it is read: a generation's line holds
    its whole request, and a log grows with the square of its turns.
    """
    if event.type == "run_start":
        return replace(event, messages=None)
    if event.type == "generation":
        return replace(event, messages=None, text=None, calls=None)
    if event.type == "run_end":
        return event
    return None


def history_line(summary: RunSummary) -> str:
    """How big the run's history is, and whether the server wants it to continue as new."""
    text = (
        f"{(summary.history_bytes or 0) / 1e6:.2f} MB, {summary.history_events or 0:,} events "
        f"in the latest of {summary.executions} execution{'s' if summary.executions != 1 else ''}"
    )
    if summary.executions > 1:
        text += f" (largest {(summary.largest_history_bytes or 0) / 1e6:.2f} MB)"
    if summary.continue_as_new_suggested and summary.status == "running":
        text += "; the server suggests continue-as-new (the run does so after this turn)"
    return text


def render_table(summaries: list[RunSummary]) -> list[str]:
    """`list`: one row per run."""
    header = ("RUN ID", "AGENT", "STATUS", "STARTED", "TURNS", "TOKENS")
    rows = [
        (
            # escaped: an id no run may have (see `list_runs`) can hold controls
            s.run_id if s.run_id.isprintable() else ascii(s.run_id),
            terminal_text(s.agent or "?"),  # a plain client's choice
            s.status,
            when(s.started),
            str(s.turns),
            str(s.usage.total_tokens),
        )
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {4, 5}
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in [header, *rows]
    ]


def _literal(value: str) -> str:
    """A visibility-query string literal (the grammar has no escapes)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"cannot filter on {value!r}: it contains both kinds of quote")


def list_query(agent: str | None, status: str | None) -> str:
    """The visibility query `list` scans with."""
    clauses = [f"WorkflowType = '{WORKFLOW_TYPE}'"]
    if agent:
        clauses.append(f"AgentName = {_literal(agent)}")
    if status in _EXECUTION_STATUS:
        clauses.append(f"ExecutionStatus = '{_EXECUTION_STATUS[status]}'")
    return " AND ".join(clauses)


async def list_runs(
    client: Client, *, agent: str | None, status: str | None, limit: int
) -> list[RunSummary]:
    """Up to `limit` runs, newest first, of `agent` and in `status`.

    Visibility names the candidates (one per run id: a resumed run has one
    execution per segment); each candidate's history says its agent, status,
    turns and tokens. Candidates are summarized `limit` at a time until
    enough match, so a status filter does not read every history.
    """
    store = TemporalStore(client)
    gate = asyncio.Semaphore(_FETCH_CONCURRENCY)

    async def summarize(run_id: str) -> RunSummary | None:
        try:
            validate_run_id(run_id)
        except ValueError as exc:
            # any Temporal client can start an AgentRun under an id the run
            # refuses at its start: it must not hide the others (`list` died
            # on it, for as long as the namespace kept it)
            return RunSummary(run_id, agent=agent, status="unreadable", error=str(exc))
        async with gate:
            try:
                segments = await store.segments(run_id)
            except EncryptionKeyError as exc:
                # a run this reader cannot decrypt must not hide the others
                return RunSummary(
                    run_id, agent=agent, status="unreadable", error=shown_error(str(exc))
                )
            except KeyError as exc:
                if "payload encoding" not in str(exc):
                    raise
                # nor one encrypted, read by a client without the codec (the SDK's own
                # converter knows no `binary/encrypted`; seen with an encrypted run of
                # another app in the namespace)
                return RunSummary(
                    run_id,
                    agent=agent,
                    status="unreadable",
                    error=f"its payloads are encrypted ({exc.args[0]}); list with its keys "
                    "(--encryption-keys-file, or AGENTOR_ENCRYPTION_KEYS) to read it",
                )
        return summarize_segments(run_id, segments) if segments else None

    found: list[RunSummary] = []
    seen: set[str] = set()
    batch: list[str] = []
    executions = client.list_workflows(list_query(agent, status)).__aiter__()
    exhausted = False
    while len(found) < limit and not exhausted:
        batch.clear()
        while len(batch) < limit:
            try:
                execution = await executions.__anext__()
            except StopAsyncIteration:
                exhausted = True
                break
            if execution.id not in seen:
                seen.add(execution.id)
                batch.append(execution.id)
        for summary in await asyncio.gather(*(summarize(run_id) for run_id in batch)):
            if summary is None or (status is not None and summary.status != status):
                continue
            if agent is not None and summary.agent != agent:
                continue
            found.append(summary)
    found = found[:limit]
    found.sort(key=lambda s: s.started or 0.0, reverse=True)
    return found
