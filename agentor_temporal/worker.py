"""The worker process: `python worker.py --agents module:attr[,module:attr...]`.

Runs `AgentRun` workflows and their activities for the named agents. Settings
come from flags or `AGENTOR_AGENTS`, `AGENTOR_TASK_QUEUE`, `AGENTOR_STORE`,
`AGENTOR_ENCRYPTION_KEYS(_FILE)`; the connection follows the standard Temporal
client environment (see `agentor_temporal.connection`). On SIGTERM, SIGINT or SIGHUP it stops
polling and finishes in-flight work before exiting, so a rolling deploy loses nothing; a
second one abandons that work (another worker runs it again) and ends the process by it.
`build_worker(...)` builds the same worker for embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from temporalio.client import Client
from temporalio.worker import Worker

from agentor_temporal import telemetry
from agentor_temporal._ending import (
    StoppedStarting,
    starting_line,
    stopped_while_starting,
)
from agentor_temporal._loop_death import serve_on_own_loop
from agentor_temporal._memory import preload, tune_allocator
from agentor_temporal._terminal import escape_log_lines
from agentor_temporal._worker_stop import on_stop_signals
from agentor_temporal.activities import AgentDefinition, AgentRegistry, _redact
from agentor_temporal.codec import (
    EncryptionConfigError,
    EncryptionKeys,
    keys_from_env,
    keys_from_file,
)
from agentor_temporal.connection import environment_configured
from agentor_temporal.plugin import (
    AgentorPlugin,
    ConfigError,
    definition_of,
    ensure_search_attributes,
)
from agentor_temporal.store import FileStore, Store
from agentor_temporal.telemetry import TelemetryError
from agentor_temporal.workflows.policies import TASK_QUEUE, validate_task_queue
from agentor_temporal.workflows.redaction import redact_address

__all__ = [
    "ConfigError",
    "WorkerDied",
    "build_worker",
    "definition_of",
    "ensure_search_attributes",
    "import_object",
    "load_agents",
    "main",
]

logger = logging.getLogger("agentor_temporal.worker")

#: Settings that are wrong: exit status 2, as for any usage error.
_USAGE_ERRORS = (ConfigError, TelemetryError, EncryptionConfigError)


class WorkerDied(RuntimeError):
    """The SDK worker ended without being asked to (its pollers failed)."""


def import_object(path: str) -> Any:
    """The object a `module:attr` path names (`attr` may be dotted).

    The working directory is importable, as for `python -m`.

    Raises:
        ConfigError: naming the path, and why it could not be loaded.
    """
    module_name, sep, attr = path.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"bad agent path {path!r}: expected module:attr, e.g. examples.agent:agent"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for {path!r}: {exc}") from None
    except Exception as exc:  # the module itself raised while importing
        raise ConfigError(
            f"importing {module_name!r} for {path!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    except SystemExit as exc:
        # a module that parses arguments or exits when imported (its `main()`
        # run at import) ended the worker with its own code and no word of why
        raise ConfigError(
            f"importing {module_name!r} for {path!r} failed: the module called "
            f"sys.exit({exc.code!r}) while being imported; run its script code under "
            "`if __name__ == '__main__':`"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{module_name!r} has no attribute {attr!r} (from {path!r})")
        obj = getattr(obj, part)
    return obj


def load_agents(spec: str | Sequence[str]) -> list[AgentDefinition]:
    """Import agents from `module:attr` paths (comma-separated or a list).

    Raises:
        ConfigError: naming the path that could not be loaded and why.
    """
    return [definition_of(obj) for obj in load_agent_objects(spec)]


def load_agent_objects(spec: str | Sequence[str]) -> list[Any]:
    """The `Agentor` objects (or definitions) that `module:attr` paths name.

    Raises:
        ConfigError: naming the path that could not be loaded and why.
    """
    paths = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    paths = [p for p in paths if p]
    if not paths:
        raise ConfigError("no agents given: pass --agents module:attr (or set AGENTOR_AGENTS)")
    agents: list[Any] = []
    for path in paths:
        obj = import_object(path)
        items = obj if isinstance(obj, (list, tuple)) else [obj]
        for item in items:
            definition_of(item)  # refuse what is not an agent, naming it
            agents.append(item)
    return agents


def agents_task_queue(agents: Sequence[Any]) -> str:
    """The task queue the agents' runs are started on (`Agentor(task_queue=...)`).

    Raises:
        ConfigError: when agents use different queues (one worker polls one).
    """
    queues: dict[str, list[str]] = {}
    for agent in agents:
        queue = getattr(agent, "task_queue", None) or TASK_QUEUE
        queues.setdefault(queue, []).append(definition_of(agent).name)
    if len(queues) > 1:
        places = "; ".join(f"{', '.join(names)} -> {q!r}" for q, names in queues.items())
        raise ConfigError(
            f"the agents use different task queues ({places}); run one worker per queue, "
            "or pass --task-queue to choose"
        )
    return next(iter(queues), TASK_QUEUE)


def agents_target(agents: Sequence[Any]) -> str | Client | None:
    """Where the agents themselves say to connect (`Agentor(temporal=...)`), if anywhere.

    Raises:
        ConfigError: when agents name different Temporal servers.
    """
    named: dict[str, tuple[str | Client, list[str]]] = {}
    for agent in agents:
        target = getattr(agent, "temporal", None)
        if target is None:
            continue
        key = target.service_client.config.target_host if isinstance(target, Client) else target
        named.setdefault(key, (target, []))[1].append(definition_of(agent).name)
    if len(named) > 1:
        places = "; ".join(
            f"{', '.join(names)} -> {redact_address(key)}" for key, (_, names) in named.items()
        )
        raise ConfigError(
            f"the agents name different Temporal servers ({places}); run one worker per "
            "server, or pass --temporal to choose"
        )
    if not named:
        return None
    target, _ = next(iter(named.values()))
    # a Client belongs to the loop it was made on: connect afresh to its address
    return target.service_client.config.target_host if isinstance(target, Client) else target


def agents_keys(agents: Sequence[Any]) -> EncryptionKeys | None:
    """The encryption keys the agents were built with (`Agentor(encryption_keys=...)`).

    Raises:
        ConfigError: when agents have different keys (one worker has one codec).
    """
    keys: dict[EncryptionKeys, list[str]] = {}
    for agent in agents:
        own = getattr(agent, "encryption_keys", None)
        if isinstance(own, EncryptionKeys):
            keys.setdefault(own, []).append(definition_of(agent).name)
    if len(keys) > 1:
        places = "; ".join(f"{', '.join(names)} -> {k!r}" for k, names in keys.items())
        raise ConfigError(
            f"the agents have different encryption keys ({places}); run one worker per "
            "key set, or pass --encryption-keys-file to choose"
        )
    return next(iter(keys), None)


def worker_keys(args: argparse.Namespace, agents: Sequence[Any]) -> EncryptionKeys | None:
    """The worker's keys: --encryption-keys-file, else the environment, else the agents'.

    Raises:
        EncryptionConfigError: for a malformed or unreadable key file.
        ConfigError: when agents disagree.
    """
    path = getattr(args, "encryption_keys_file", None)
    if path:
        return keys_from_file(path)
    return keys_from_env() or agents_keys(agents)


def build_worker(
    client: Client,
    agents: Sequence[Any] | AgentRegistry,
    *,
    task_queue: str = TASK_QUEUE,
    store: Store | None = None,
    **options: Any,
) -> Worker:
    """A worker for `AgentRun` and its activities (an `AgentorPlugin` on a plain Worker).

    Args:
        client: a connected Temporal client.
        agents: `Agentor`s / `AgentDefinition`s, or a ready `AgentRegistry`.
        task_queue: the queue to poll (default `agentor`).
        store: mirror for agents that have none of their own.
        **options: passed to `temporalio.worker.Worker` (e.g.
            `max_cached_workflows=0`, `max_concurrent_activities=...`).

    Returns:
        The worker; run it with `await worker.run()` or `async with worker:`.
    """
    validate_task_queue(task_queue)
    plugins = [*options.pop("plugins", []), AgentorPlugin(agents, store=store)]
    return Worker(client, task_queue=task_queue, plugins=plugins, **options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the worker's options to `parser` (shared with `agentor-temporal worker`)."""
    parser.add_argument(
        "--agents",
        default=os.environ.get("AGENTOR_AGENTS"),
        help="module:attr[,module:attr...] of Agentor objects (env AGENTOR_AGENTS)",
    )
    parser.add_argument(
        "--task-queue",
        default=os.environ.get("AGENTOR_TASK_QUEUE"),
        help="task queue to poll (env AGENTOR_TASK_QUEUE; default: the agents' own "
        f"task_queue, which is {TASK_QUEUE!r} unless they set one)",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("AGENTOR_STORE"),
        help="directory to mirror JSONL event logs into (env AGENTOR_STORE)",
    )
    parser.add_argument(
        "--temporal",
        default=None,
        help="Temporal address host:port (default: the Temporal client environment, "
        "else the embedded dev server)",
    )
    parser.add_argument(
        "--encryption-keys-file",
        metavar="FILE",
        default=None,
        help="encrypt payloads with the keys in FILE: key_id:base64-of-32-bytes entries, "
        "comma- or line-separated, the first one current (env AGENTOR_ENCRYPTION_KEYS_FILE, "
        "or the keys themselves in AGENTOR_ENCRYPTION_KEYS)",
    )
    parser.add_argument(
        "--max-cached-workflows",
        type=int,
        default=None,
        help="workflow cache size (0 replays every task; for tests)",
    )
    parser.add_argument(
        "--metrics-port",
        metavar="[HOST:]PORT",
        default=os.environ.get("AGENTOR_METRICS_PORT"),
        help="serve Prometheus metrics (Temporal's worker metrics and the agents') on "
        "http://HOST:PORT/metrics; a bare port listens on every interface "
        "(env AGENTOR_METRICS_PORT)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        default=None,
        help="export OpenTelemetry traces of every run, as the OTEL_* environment says "
        "(default exporter: OTLP over HTTP to localhost:4318); on by itself when "
        "OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT is set. Needs the otel extra",
    )
    parser.add_argument("--log-level", default=os.environ.get("AGENTOR_LOG_LEVEL", "INFO"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python worker.py",
        description="Run a worker for agentor-temporal agent runs.",
        epilog=(
            "examples:\n"
            "  python worker.py --agents examples.agent:agent\n"
            "  python worker.py --agents app.agents:weather,app.agents:billing --store runs\n"
            "  TEMPORAL_ADDRESS=temporal:7233 AGENTOR_AGENTS=app:agent python worker.py"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def worker_store(directory: str) -> FileStore:
    """The runs directory `--store` names, refused at start in one line when this worker
    cannot create it or write in it (a read-only disk, no permission): the bare OSError
    said nothing of what to change, and a directory already there failed each mirror
    write later instead.

    Raises:
        ConfigError: naming the directory, what failed and what to change.
    """
    change = "give --store a directory this worker can write in (or leave --store out)"
    try:
        store = FileStore(directory)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(
            f"--store {directory}: cannot create the runs directory ({why}); {change}"
        ) from None
    if not os.access(store.directory, os.W_OK | os.X_OK):
        why = "Read-only file system" if _read_only(store.directory) else "permission denied"
        raise ConfigError(
            f"--store {directory}: cannot write in the runs directory ({why}); {change}"
        )
    return store


def _read_only(directory: Path) -> bool:
    """Whether `directory` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


async def serve(
    args: argparse.Namespace, *, ready: Any = None, stop: asyncio.Event | None = None
) -> None:
    """Connect, run the worker until SIGTERM/SIGINT/SIGHUP (or `stop` is set), then drain."""
    from agentor_temporal.connection import connect

    objects = load_agent_objects(args.agents or "")
    agents = [definition_of(a) for a in objects]
    store = worker_store(args.store) if args.store else None
    # a flag or the Temporal environment wins; else where the agents say
    target = args.temporal
    if not target and not environment_configured():
        target = agents_target(objects)
    plugin = AgentorPlugin(agents, store=store, tracing=args.otel)
    runtime = telemetry.metrics_runtime(args.metrics_port) if args.metrics_port else None
    keys = worker_keys(args, objects)
    client = await connect(target, runtime=runtime, encryption_keys=keys)
    task_queue = args.task_queue or agents_task_queue(objects)
    try:
        validate_task_queue(task_queue)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    options: dict[str, Any] = {}
    if args.max_cached_workflows is not None:
        options["max_cached_workflows"] = args.max_cached_workflows
    worker = Worker(client, task_queue=task_queue, plugins=[plugin], **options)
    await ensure_search_attributes(client, plugin.registry)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    on_stop_signals(loop, stop)
    names = ", ".join(a.name for a in agents)
    # before "ready": the idle baseline includes what the first run imports
    preload()
    plugin.registry.open_clients()
    running = asyncio.create_task(worker.run())
    logger.info(
        "Worker polling %r on %s (namespace %s) for %s%s",
        task_queue,
        redact_address(client.service_client.config.target_host),
        client.namespace,
        names,
        f", mirroring into {args.store}/" if store else "",
    )
    if runtime is not None:
        logger.info(
            "Serving metrics on http://%s/metrics", telemetry.metrics_address(args.metrics_port)
        )
    if plugin.trace is not None:
        logger.info("Exporting OpenTelemetry traces of runs")
    if keys is not None:
        logger.info(
            "Payloads are encrypted with key %r (keys configured: %s)",
            keys.current_id,
            ", ".join(keys.ids),
        )
    print(f"worker ready: task queue {task_queue!r}, agents: {names}", flush=True)
    stopping = asyncio.create_task(stop.wait())
    # a worker whose pollers failed must not linger as a process that looks
    # alive while no run makes progress: its end ends the process (exit 1)
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        stopping.cancel()
        raise WorkerDied(f"the worker stopped on its own: {running.exception()!r}")
    await worker.shutdown()
    await running
    logger.info("Worker stopped")


def run(args: argparse.Namespace) -> int:
    """Serve with parsed options until stopped; returns the exit code.

    2 for a setting that is wrong (bad --agents path), 1 when Temporal
    cannot be reached or the worker died on its own, 0 after a clean stop.
    """
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # a line quoting a provider's message or a tool's text as it came acts on no terminal
    escape_log_lines()
    # every line printed masked, of any logger (a tool's own, asyncio's)
    _redact.guard_handlers()
    from agentor_temporal.connection import ConnectionFailed

    try:
        with stopped_while_starting():
            stopped_by = serve_on_own_loop(lambda stop: serve(args, stop=stop))
        if stopped_by is not None:
            raise WorkerDied(stopped_by)
    except StoppedStarting as stopped:
        # before it polled: nothing taken, nothing to finish; a clean stop (exit 0)
        logger.warning("%s", starting_line(stopped.signum))
        return 0
    except (
        ConfigError,
        TelemetryError,
        EncryptionConfigError,
        ConnectionFailed,
        WorkerDied,
    ) as exc:
        # a setting's error may quote what it met: an agent module's own exception
        print(f"error: {_redact.clean(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, TelemetryError, EncryptionConfigError)) else 1
    finally:
        # the process leaves without atexit (see `launch`): spans still
        # buffered would be lost
        telemetry.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    return run(_parser().parse_args(argv))


def launch(argv: Sequence[str] | None = None) -> NoReturn:
    """Run `main` and leave the process with its exit code (`python worker.py`)."""
    # before the SDK's runtime starts its threads (each would take an arena)
    tune_allocator()
    code = main(argv)
    # Everything is drained and reported by now. Leave without interpreter
    # finalization, which temporalio's Rust threads can race, turning exit 0 or
    # 1 into a SIGABRT core dump (temporalio/sdk-python#300; seen here after a
    # failed connect and after a SIGTERM drain).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    launch()
