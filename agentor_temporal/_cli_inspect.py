"""`agentor-temporal show`, `list`, `export` and `prune`: reading runs, and tidying logs.

All read Temporal history (or a store's JSONL), never a workflow, so they
work with no worker running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    address,
    arun,
    connect_for_reading,
    history_events,
    keys_arg,
    run_id_arg,
    store_dir,
)
from agentor_temporal._inspect import (
    RunSummary,
    event_row,
    list_runs,
    render_run,
    render_table,
    summarize_events,
    summarize_segments,
    summary_part,
)
from agentor_temporal._prune import Verdict, apply, plan
from agentor_temporal._results import shown_event, shown_events
from agentor_temporal._stuck import unpolled_advice, unpolled_queue
from agentor_temporal._terminal import terminal_text
from agentor_temporal._timeline import Timeline
from agentor_temporal.connection import ConnectionFailed, connect
from agentor_temporal.store import Event, FileStore
from agentor_temporal.store.events import EventJson
from agentor_temporal.workflows import Segment

# -- show / list / export -----------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    """Print a run's events, readably or as the documented JSONL."""
    run_id = run_id_arg(args.run_id)
    if args.timeline:
        return _timeline(args, run_id)
    if args.store:
        return _show_stored(args, run_id)
    note = None

    async def read() -> tuple[list[Event], list[Segment], int, str, str | None]:
        client = await connect_for_reading(args)
        events, segments, prefix = await history_events(client, run_id)
        unpolled = None
        if segments and segments[-1].status == "running":
            with contextlib.suppress(RPCError):  # the run's own state is shown anyway
                unpolled = await unpolled_queue(client, run_id)
        return events, segments, prefix, address(client), unpolled

    events, segments, prefix, where, unpolled = arun(read)
    summary = summarize_segments(run_id, segments, None if prefix else events)
    count = len(segments)
    source = f"Temporal at {where} ({count} execution{'s' if count != 1 else ''})"
    if prefix:
        note = (
            f"(the run's first {prefix} events came from a store and are not in Temporal's "
            "history; `show --store DIR` shows them)"
        )
    if unpolled is not None:
        # the queue is a plain client's choice: as it came
        note = terminal_text(
            "\n".join(filter(None, [note, unpolled_advice(run_id, unpolled) + "."])), lines=True
        )
    events = shown_events(events)
    if args.jsonl:
        event_json = EventJson()  # the generations' requests share their messages
        for event in events:
            print(event_json(event))
        return EXIT_OK
    for line in render_run(summary, events, source=source):
        print(line)
    if note:
        print(note)
    return EXIT_OK


def _show_stored(args: argparse.Namespace, run_id: str) -> int:
    """`show --store`: the log read, and printed, an event at a time.

    A generation's line holds its whole request, so a long run's log grows
    with the square of its turns (500 turns of 2 KB results: 260 MB), and
    `show` held it all, parsed. The readable form keeps each event's line and
    what the head needs (`summary_part`), printed once the log is read.
    """
    directory = store_dir(args.store)
    found, parts, rows = 0, [], []
    for found, event in enumerate(FileStore(directory).iterate(run_id), 1):
        event = shown_event(event)
        if args.jsonl:
            print(event.to_json())
            continue
        rows.append(event_row(found, event))
        part = summary_part(event)
        if part is not None:
            parts.append(part)
    if not found:
        raise CliError(f"no run with id {run_id!r} in the store {str(directory)!r}")
    if args.jsonl:
        return EXIT_OK
    head = render_run(summarize_events(run_id, parts), [], source=f"the store {directory}")
    for line in [*head, *rows]:
        print(line)
    return EXIT_OK


def _timeline(args: argparse.Namespace, run_id: str) -> int:
    """`show --timeline PNG`: the run drawn from Temporal history."""
    if args.store or args.jsonl:
        raise CliError(
            "--timeline reads Temporal history; it goes with neither --store nor --jsonl",
            EXIT_USAGE,
        )
    try:
        import matplotlib  # noqa: F401

        from agentor_temporal._timeline import draw, read_timeline
    except ImportError:
        raise CliError(
            "drawing a timeline needs matplotlib: pip install 'agentor-temporal[timeline]'",
            EXIT_USAGE,
        ) from None

    async def read() -> tuple[Timeline | None, str]:
        client = await connect_for_reading(args)
        return await read_timeline(client, run_id), address(client)

    timeline, where = arun(read)
    if timeline is None:
        raise CliError(f"no run with id {run_id!r} in Temporal at {where}")
    try:
        path = draw(timeline, args.timeline)
    except OSError as exc:
        raise CliError(f"cannot write {args.timeline!r}: {exc}") from None
    counts = timeline.summary()
    print(
        f"drew run {run_id} to {path}: {counts['generations']} generations, "
        f"{counts['tool_calls']} tool calls, {counts['approvals']} approvals, "
        f"{counts['retried']} retried, {counts['workers']} worker(s)"
    )
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """List runs, newest first."""

    async def read() -> list[RunSummary]:
        client = await connect_for_reading(args)
        try:
            return await list_runs(client, agent=args.agent, status=args.status, limit=args.limit)
        except RPCError as exc:
            if exc.status == RPCStatusCode.INVALID_ARGUMENT and args.agent:
                raise CliError(
                    f"Temporal at {address(client)} cannot filter by agent ({exc.message}); "
                    "the AgentName search attribute is registered by `agentor-temporal dev` and "
                    "by workers, or: temporal operator search-attribute create --name AgentName "
                    "--type Keyword"
                ) from None
            raise
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None

    rows = arun(read)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    elif not rows:
        print("no runs found")
    else:
        for line in render_table(rows):
            print(line)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """Write a run's JSONL from Temporal history."""
    run_id = run_id_arg(args.run_id)

    async def read() -> tuple[list[Event], list[Segment], int]:
        client = await connect_for_reading(args)
        return await history_events(client, run_id, args.store)

    events, segments, missing = arun(read)
    if missing:
        if not args.store:
            raise CliError(
                f"run {run_id!r} was continued from a store: its first {missing} events are not "
                "in Temporal's history; pass --store DIR (where they are) to export the whole log"
            )
        raise CliError(
            f"the store {args.store!r} lacks some of the {missing} events this run was "
            "continued from"
        )
    if segments[-1].status == "running":
        print(
            f"note: run {run_id} is still running; exporting the {len(events)} events so far",
            file=sys.stderr,
        )
    if args.output in (None, "-"):
        _write_jsonl(sys.stdout, events)
        return EXIT_OK
    target = Path(args.output)
    partial = target.with_name(f".{target.name}.partial")
    # written aside and renamed: a crash never leaves half a log under the name;
    # owner-only, as FileStore's logs are (they hold prompts and tool results)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        with os.fdopen(os.open(partial, flags, 0o600), "w") as f:
            _write_jsonl(f, events)
            f.flush()
            os.fsync(f.fileno())
        partial.replace(target)
    except OSError as exc:  # a full or read-only disk: no half copy is left behind
        with contextlib.suppress(OSError):
            partial.unlink()
        existing = f"{target} is unchanged" if target.exists() else f"no {target} was made"
        raise CliError(
            f"cannot write {target}: {exc.strerror or exc}; the export of run {run_id} "
            f"was not written ({existing})"
        ) from None
    except BaseException:  # an interrupt mid-write: nothing half written stays either
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    print(f"exported {len(events)} events of run {run_id} to {target}", file=sys.stderr)
    return EXIT_OK


def _write_jsonl(out: TextIO, events: list[Event]) -> None:
    """Write `events` as shown (`shown_event`), a line each, as each is encoded.

    Never the whole text at once: a generation's line holds its whole request,
    so the log grows with the square of the turns (500 turns of 2 KB: 260 MB),
    and holding it cost a long run's export gigabytes of memory.
    """
    # the generations' requests share their messages: each is encoded once
    event_json = EventJson()
    for event in events:
        out.write(event_json(shown_event(event)))
        out.write("\n")


# -- prune -------------------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace) -> int:
    """Remove old logs of finished runs."""
    directory = store_dir(args.store)
    store = FileStore(directory)

    async def decide() -> list[Verdict]:
        client: Client | None
        try:
            client = await connect(args.temporal, start_dev=False, encryption_keys=keys_arg(args))
        except ConnectionFailed as exc:
            print(
                f"warning: {exc}\nwarning: deciding from the logs alone: a log whose last "
                "segment has run_end counts as finished",
                file=sys.stderr,
            )
            client = None
        verdicts = await plan(store, args.older_than.seconds, client)
        if not args.dry_run:
            await apply(store, verdicts, client)
        return verdicts

    decisions = arun(decide)
    verb = "would remove" if args.dry_run else "removed"
    newer = [d for d in decisions if not d.remove and d.reason.startswith("newer than")]
    for decision in decisions:
        if decision.remove:
            print(f"{verb:<12} {decision.run_id}  {decision.reason}")
    for decision in decisions:
        if not decision.remove and decision not in newer:
            print(f"{'kept':<12} {decision.run_id}  {decision.reason}")
    if newer:
        print(f"{'kept':<12} {len(newer)} log(s) newer than {args.older_than.text}")
    removed = sum(1 for d in decisions if d.remove)
    refused = sum(1 for d in decisions if d.refused)
    print(
        f"{directory}: {removed} {'to remove' if args.dry_run else 'removed'}, "
        f"{len(decisions) - removed} kept"
        + (" (dry run: nothing was removed)" if args.dry_run else "")
        + (f" ({refused} could not be removed)" if refused else "")
    )
    return EXIT_FAILED if refused else EXIT_OK
