"""`agentor-temporal serve`: an HTTP server for agents, apart from the workers.

A web tier and a worker fleet scale and fail separately, so the server runs
no worker unless `--worker` asks for one; its routes reach the runs through
Temporal either way.
"""

from __future__ import annotations

import argparse
import os

from agentor_temporal import worker
from agentor_temporal.serve import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV, ServeUnavailable

DESCRIPTION = (
    "Serve agents over HTTP: Agentor's routes (POST /chat, GET /health, the A2A agent card "
    "and JSON-RPC on POST /), durable run routes (POST /runs, GET /runs/RUN_ID, "
    "GET /runs/RUN_ID/events as server-sent events, POST /runs/RUN_ID/approvals/CALL_ID, "
    "POST /runs/RUN_ID/resume) and a page at /. Runs are served by workers (`agentor-temporal "
    f"worker`); --worker runs one in this process too. {TOKEN_ENV}, if set, is the bearer "
    "token every route but /health and the agent card requires."
)

EPILOG = """\
examples:
  agentor-temporal serve --agents examples.agent:agent
  agentor-temporal serve --agents app.agents:weather,app.agents:billing --port 9000
  AGENTOR_SERVE_TOKEN=s3cret agentor-temporal serve --agents app:agent --host 0.0.0.0
  agentor-temporal serve --agents app:agent --temporal temporal.internal:7233 --worker
"""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port (1-65535), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `serve` subcommand's options."""
    parser.add_argument(
        "--agents",
        default=os.environ.get("AGENTOR_AGENTS"),
        metavar="MODULE:ATTR[,...]",
        help="the Agentors to serve; the first answers /chat, A2A and runs naming no agent "
        "(env AGENTOR_AGENTS)",
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--temporal",
        metavar="ADDRESS",
        help="Temporal frontend host:port (default: TEMPORAL_ADDRESS or the Temporal client "
        "config, else the embedded dev server on localhost:7233)",
    )
    parser.add_argument(
        "--task-queue", metavar="QUEUE", help="task queue of the agents' runs (default: theirs)"
    )
    parser.add_argument(
        "--worker",
        action="store_true",
        help="also run a worker for the agents in this process (default: workers run apart)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="server log level (default info)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """Load the agents and serve them until SIGINT/SIGTERM."""
    from agentor_temporal.agent import Agentor
    from agentor_temporal.serve import require_extra, serve

    try:
        require_extra()
    except ServeUnavailable as exc:
        raise worker.ConfigError(str(exc)) from None
    agents = []
    for obj in worker.load_agent_objects(args.agents or ""):
        if not isinstance(obj, Agentor):
            raise worker.ConfigError(
                f"{obj!r} is not an agent: serve needs agentor_temporal.Agentor objects"
            )
        if args.temporal:
            obj.temporal = args.temporal
        if args.task_queue:
            obj.task_queue = args.task_queue
        obj.embedded_worker = bool(args.worker)
        agents.append(obj)
    try:
        serve(agents, args.host, args.port, log_level=args.log_level)
    except ValueError as exc:
        raise worker.ConfigError(str(exc)) from None
    if args.worker:
        from agentor_temporal._live import say_left_open
        from agentor_temporal._runtime import Runtime

        # the runs this server's worker served and nobody follows now (started by POST /runs,
        # a stream ended as the server stopped) wait for another worker: said, as a script's
        # exit says it (the CLI ends by os._exit, past the exit hook that would)
        runtime = Runtime._instance
        if runtime is not None:
            say_left_open(runtime)
    return 0
