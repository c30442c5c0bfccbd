"""`agentor-temporal` (also `python -m agentor_temporal`): operate runs from a terminal.

One subcommand per routine operation: a dev server, a worker, starting and
resuming runs with live progress, and reading runs (`show`, `list`, `export`)
straight from Temporal history, which needs no worker. Plain argparse, so the
CLI adds no dependency. The exit status is the contract scripts rely on: 0
done, 1 the operation failed (unknown run, Temporal unreachable, the run
itself failed), 2 usage error (bad arguments, agent path, run id or age). A
user's mistake prints one `error:` line, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal import worker
from agentor_temporal._cli_parser import build_parser
from agentor_temporal._inspect import (
    RunSummary,
    list_runs,
    render_run,
    render_table,
    summarize_events,
    summarize_segments,
)
from agentor_temporal._progress import Progress, follow, latest_execution
from agentor_temporal._prune import Verdict, apply, plan
from agentor_temporal._runs import run_events, send_decision, waiting_calls
from agentor_temporal._runtime import Runtime
from agentor_temporal.agent import Agentor
from agentor_temporal.connection import (
    ConnectionFailed,
    DevServer,
    connect,
    dev_server_status,
    environment_configured,
    start_dev_server,
    stop_dev_server,
)
from agentor_temporal.store import Event, FileStore, RunResult, new_run_id, validate_run_id
from agentor_temporal.workflows import Decision, Segment, TemporalStore
from agentor_temporal.workflows.formatting import call_summary

T = TypeVar("T")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A failure to report as one line, with its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# -- helpers shared by the commands ------------------------------------------------


def _run_id(value: str) -> str:
    try:
        return validate_run_id(value)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _load_agent(path: str) -> Agentor:
    obj = worker.import_object(path)
    if not isinstance(obj, Agentor):
        raise worker.ConfigError(
            f"{path!r} is a {type(obj).__name__}, not an agent: "
            "expected an agentor_temporal.Agentor"
        )
    return obj


def _configure(agent: Agentor, args: argparse.Namespace) -> None:
    """Apply --temporal, --task-queue and --no-worker to a loaded agent."""
    if args.temporal:
        agent.temporal = args.temporal
    if args.task_queue:
        agent.task_queue = args.task_queue
    if args.no_worker:
        agent.embedded_worker = False


async def _connect(args: argparse.Namespace) -> Client:
    """Temporal for commands that only read: never starts a dev server."""
    return await connect(args.temporal, start_dev=False)


def _address(client: Client) -> str:
    return client.service_client.config.target_host


def _store_dir(path: str) -> Path:
    directory = Path(path)
    if not directory.is_dir():
        raise CliError(f"store directory {path!r} does not exist")
    return directory


def _arun(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(factory())


async def _history_events(
    client: Client, run_id: str, store: str | None = None
) -> tuple[list[Event], list[Segment], int]:
    """(events, segments, leading events missing) of a run; CliError if unknown.

    A run continued from a store starts with events Temporal never had;
    `store` (a directory) supplies them when it has them.
    """
    segments = await TemporalStore(client).segments(run_id)
    if not segments:
        raise CliError(f"no run with id {run_id!r} in Temporal at {_address(client)}")
    events, missing = await run_events(
        run_id, segments, FileStore(_store_dir(store)) if store else None
    )
    return events, segments, missing


# -- dev ----------------------------------------------------------------------------


def _print_server(headline: str, server: DevServer) -> None:
    print(headline)
    print(f"  address  {server.address}")
    print(f"  ui       {server.ui_url}")
    print(f"  data     {server.data_dir}")


def cmd_dev(args: argparse.Namespace) -> int:
    """Start, report or stop the embedded dev server."""
    data = Path(args.data_dir)
    if args.action == "stop":
        if stop_dev_server(data):
            print(f"stopped the Temporal dev server started from {data.resolve()}")
            return EXIT_OK
        running = dev_server_status(data, args.port, args.ui_port)
        if running is not None:
            raise CliError(
                f"a Temporal server answers on {running.address}, but it was not started "
                f"from {data.resolve()}; not stopping it"
            )
        print(f"no Temporal dev server started from {data.resolve()} is running")
        return EXIT_OK
    if args.action == "status":
        running = dev_server_status(data, args.port, args.ui_port)
        if running is None:
            raise CliError(f"no Temporal server answers on localhost:{args.port}")
        _print_server(_server_headline(running, data), running)
        return EXIT_OK
    server = start_dev_server(data, args.port, args.ui_port)
    _print_server(_server_headline(server, data), server)
    return EXIT_OK


def _server_headline(server: DevServer, data: Path) -> str:
    if server.started:
        return f"Temporal dev server started (pid {server.pid})"
    if server.pid is not None:
        return f"Temporal dev server already running (pid {server.pid})"
    return (
        f"A Temporal server already answers on {server.address}; it was not started "
        f"from {data.resolve()}, so `dev stop` leaves it alone"
    )


# -- worker ----------------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    """Run `worker.py`'s worker with the same options."""
    return worker.run(args)


# -- run / resume ------------------------------------------------------------------------


def _ui_hint(agent: Agentor, run_id: str) -> None:
    if agent.temporal is None and not environment_configured():
        print(f"  ui: {agent.ui_url(run_id)}", file=sys.stderr, flush=True)


def _interrupted(run_id: str, args: argparse.Namespace) -> str:
    where = "its workers" if args.no_worker else "a worker (this one has stopped)"
    return (
        f"interrupted: run {run_id} stays in Temporal and continues with {where}; "
        f"`agentor-temporal resume {run_id} --agent {args.agent}` returns it"
    )


def _report(result: RunResult, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    elif result.final_output is not None:
        print(result.final_output)
    elif result.status == "awaiting_approval":
        print(f"awaiting approval ({len(result.pending_approvals)} call(s)):")
        for pending in result.pending_approvals:
            print(f"  {pending.call_id}  {call_summary(pending.tool, pending.args)}")
        print(
            f"decide with: agentor-temporal approve {result.run_id} CALL_ID "
            f"(or deny ... --reason WHY), then: agentor-temporal resume {result.run_id} "
            f"--agent {args.agent}"
        )
    if result.status in ("completed", "awaiting_approval"):
        return EXIT_OK
    print(
        f"error: run {result.run_id} ended {result.status}: {result.error or 'no answer'}",
        file=sys.stderr,
    )
    return EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    """Start a run, narrate it, print its answer."""
    if not args.prompt.strip():
        raise CliError("the prompt is empty", EXIT_USAGE)
    run_id = _run_id(args.run_id) if args.run_id else new_run_id()
    agent = _load_agent(args.agent)
    _configure(agent, args)
    print(f"run_id: {run_id}", file=sys.stderr if args.json else sys.stdout, flush=True)

    async def go() -> RunResult:
        client = await Runtime.get().client(agent.temporal)
        _ui_hint(agent, run_id)
        work = agent.arun(args.prompt, run_id=run_id, max_turns=args.max_turns)
        return await follow(client, run_id, work, Progress(sys.stderr))

    try:
        result = Runtime.get().run_sync(go())
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(_interrupted(run_id, args), 130) from None
    return _report(result, args)


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue or return a run, narrating any new work."""
    run_id = _run_id(args.run_id)
    agent = _load_agent(args.agent)
    _configure(agent, args)
    print(f"run_id: {run_id}", file=sys.stderr if args.json else sys.stdout, flush=True)

    async def go() -> tuple[RunResult, Progress]:
        client = await Runtime.get().client(agent.temporal)
        progress = Progress(
            sys.stderr, latest_execution(await TemporalStore(client).latest(run_id))
        )
        _ui_hint(agent, run_id)
        result = await follow(client, run_id, agent.aresume(run_id, args.max_turns), progress)
        return result, progress

    try:
        result, progress = Runtime.get().run_sync(go())
    except KeyError as exc:
        raise CliError(str(exc.args[0]) if exc.args else f"unknown run {run_id!r}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(_interrupted(run_id, args), 130) from None
    if progress.skip is not None and not progress.narrated:
        print(f"  {result.status}: already finished, nothing was run", file=sys.stderr)
    return _report(result, args)


# -- show / list / export -----------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    """Print a run's events, readably or as the documented JSONL."""
    run_id = _run_id(args.run_id)
    note = None
    if args.store:
        directory = _store_dir(args.store)
        events = FileStore(directory).load(run_id)
        if not events:
            raise CliError(f"no run with id {run_id!r} in the store {str(directory)!r}")
        summary = summarize_events(run_id, events)
        source = f"the store {directory}"
    else:

        async def read() -> tuple[list[Event], list[Segment], int, str]:
            client = await _connect(args)
            events, segments, prefix = await _history_events(client, run_id)
            return events, segments, prefix, _address(client)

        events, segments, prefix, address = _arun(read)
        summary = summarize_segments(run_id, segments)
        count = len(segments)
        source = f"Temporal at {address} ({count} execution{'s' if count != 1 else ''})"
        if prefix:
            note = (
                f"(the run's first {prefix} events came from a store and are not in Temporal's "
                "history; `show --store DIR` shows them)"
            )
    if args.jsonl:
        for event in events:
            print(event.to_json())
        return EXIT_OK
    for line in render_run(summary, events, source=source):
        print(line)
    if note:
        print(note)
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """List runs, newest first."""

    async def read() -> list[RunSummary]:
        client = await _connect(args)
        try:
            return await list_runs(client, agent=args.agent, status=args.status, limit=args.limit)
        except RPCError as exc:
            if exc.status == RPCStatusCode.INVALID_ARGUMENT and args.agent:
                raise CliError(
                    f"Temporal at {_address(client)} cannot filter by agent ({exc.message}); "
                    "the AgentName search attribute is registered by `agentor-temporal dev` and "
                    "by workers, or: temporal operator search-attribute create --name AgentName "
                    "--type Keyword"
                ) from None
            raise
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None

    rows = _arun(read)
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
    run_id = _run_id(args.run_id)

    async def read() -> tuple[list[Event], list[Segment], int]:
        client = await _connect(args)
        return await _history_events(client, run_id, args.store)

    events, segments, missing = _arun(read)
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
    text = "".join(e.to_json() + "\n" for e in events)
    if segments[-1].status == "running":
        print(
            f"note: run {run_id} is still running; exporting the {len(events)} events so far",
            file=sys.stderr,
        )
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return EXIT_OK
    target = Path(args.output)
    partial = target.with_name(f".{target.name}.partial")
    # written aside and renamed: a crash never leaves half a log under the name
    with partial.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    partial.replace(target)
    print(f"exported {len(events)} events of run {run_id} to {target}", file=sys.stderr)
    return EXIT_OK


# -- prune -------------------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace) -> int:
    """Remove old logs of finished runs."""
    directory = _store_dir(args.store)
    store = FileStore(directory)

    async def decide() -> list[Verdict]:
        client: Client | None
        try:
            client = await connect(args.temporal, start_dev=False)
        except ConnectionFailed as exc:
            print(
                f"warning: {exc}\nwarning: deciding from the logs alone: a log whose last "
                "segment has run_end counts as finished",
                file=sys.stderr,
            )
            client = None
        return await plan(store, args.older_than.seconds, client)

    decisions = _arun(decide)
    if not args.dry_run:
        apply(store, decisions)
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
    print(
        f"{directory}: {removed} {'to remove' if args.dry_run else 'removed'}, "
        f"{len(decisions) - removed} kept"
        + (" (dry run: nothing was removed)" if args.dry_run else "")
    )
    return EXIT_OK


# -- approvals ---------------------------------------------------------------------------


def cmd_pending(args: argparse.Namespace) -> int:
    """List runs waiting for approval, and what they wait for."""

    async def read() -> list[dict[str, Any]]:
        client = await _connect(args)
        waiting = await waiting_calls(client, agent=args.agent, limit=args.limit)
        return [w.to_dict() for w in waiting]

    rows = _arun(read)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no run is waiting for approval")
        return EXIT_OK
    table = [
        [
            r["run_id"],
            r["call_id"],
            call_summary(r["tool"] or "?", r["args"]),
            r["agent"],
            _since(r["waiting_since"]),
        ]
        for r in rows
    ]
    header = ["RUN ID", "CALL ID", "WAITS FOR", "AGENT", "SINCE"]
    widths = [max(len(str(row[i])) for row in [header, *table]) for i in range(len(header))]
    for row in [header, *table]:
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return EXIT_OK


def _since(timestamp: float | None) -> str:
    if not timestamp:
        return "?"
    import datetime

    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _decide(args: argparse.Namespace, approved: bool) -> int:
    run_id = _run_id(args.run_id)
    import getpass

    by = args.by or getpass.getuser()
    decision = Decision(call_id=args.call_id, approved=approved, reason=args.reason, by=by)

    async def go() -> dict[str, Any]:
        if args.agent:
            agent = _load_agent(args.agent)
            if args.temporal:
                agent.temporal = args.temporal
            client = await Runtime.get().client(agent.temporal)
            await asyncio.wait_for(
                agent.aapprove(run_id, decision.call_id, decision.reason, by=by)
                if approved
                else agent.adeny(run_id, decision.call_id, decision.reason, by=by),
                args.wait,
            )
            return {"address": _address(client)}
        client = await _connect(args)
        await asyncio.wait_for(send_decision(client, run_id, decision), args.wait)
        return {"address": _address(client)}

    try:
        Runtime.get().run_sync(go())
    except KeyError as exc:
        raise CliError(str(exc.args[0]) if exc.args else f"unknown run {run_id!r}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except asyncio.TimeoutError:
        raise CliError(
            f"no worker took the decision within {args.wait} s: is a worker serving run "
            f"{run_id}'s agent running? Pass --agent MODULE:ATTR to serve it from here"
        ) from None
    verb = "approved" if approved else "denied"
    print(f"{verb} {args.call_id} of run {run_id} (by {by})")
    print(f"continue it with: agentor-temporal resume {run_id} --agent MODULE:ATTR")
    return EXIT_OK


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve a waiting tool call."""
    return _decide(args, True)


def cmd_deny(args: argparse.Namespace) -> int:
    """Deny a waiting tool call."""
    return _decide(args, False)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "pending": cmd_pending,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "dev": cmd_dev,
    "worker": cmd_worker,
    "run": cmd_run,
    "resume": cmd_resume,
    "show": cmd_show,
    "list": cmd_list,
    "export": cmd_export,
    "prune": cmd_prune,
}


# -- entry point ------------------------------------------------------------------------------


def execute(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (for embedding and tests)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS.get(args.command or "")
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command != "worker":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        # an embedded worker's SDK logs carry tracebacks of failures the
        # progress lines already tell; `worker` keeps them for operators
        logging.getLogger("temporalio").setLevel(logging.ERROR)
    try:
        return handler(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): not an error, and no traceback
        # when the interpreter flushes stdout on exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        code = _known_failure(exc)
        if code is None:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return code


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: run one command, then end the process with its status.

    The process ends through `os._exit` once output is flushed and embedded
    workers are stopped: the Temporal client's core threads can call into a
    finalizing interpreter and abort a short-lived process at exit
    ("Fatal Python error: PyGILState_Release", temporalio/sdk-python#300,
    seen here too), which would turn a finished command into exit status 134.
    """
    code = execute(argv)
    if Runtime._instance is not None:
        Runtime._instance.close()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)


def _known_failure(exc: Exception) -> int | None:
    """The exit status of an expected failure, or None for a bug (traceback)."""
    if isinstance(exc, worker.ConfigError):
        return EXIT_USAGE
    if isinstance(exc, (ConnectionFailed, RPCError, OSError)):
        return EXIT_FAILED
    return None
