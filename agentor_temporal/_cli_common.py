"""What every `agentor-temporal` command shares: exit codes, one-line errors, and
reading arguments into agents, clients, stores and runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client

from agentor_temporal import worker
from agentor_temporal._gone import run_gone
from agentor_temporal._runs import run_events
from agentor_temporal.agent import Agentor
from agentor_temporal.codec import KeysSetting, keys_from_file
from agentor_temporal.connection import connect
from agentor_temporal.store import Event, FileStore, validate_run_id
from agentor_temporal.store.base import in_thread
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.formatting import printable
from agentor_temporal.workflows.redaction import redact_address

#: Set once a command's outcome is decided (an `approve` whose decision the run
#: took): an interrupt from then on lets its embedded worker finish the calls
#: it runs (`cli._drain`) instead of ending the command as "interrupted"
DECIDED = threading.Event()

T = TypeVar("T")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A failure to report as one line, with its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# -- helpers shared by the commands ------------------------------------------------


def shown_id(value: object) -> str:
    """A name a model or client chose (a call id) as a terminal shows it: as it is when it
    is printable, else as a Python string literal, so a newline in it writes no row of its
    own and an escape sequence does not act on the terminal."""
    return printable(value)


def run_id_arg(value: str) -> str:
    try:
        return validate_run_id(value)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def text_arg(value: str) -> str:
    """A message given on the command line, or read from stdin when it is `-`.

    A command line is visible to every user of the machine (`ps`, /proc): a
    prompt that holds something private is piped in instead
    (`agentor-temporal run --agent app:agent - < prompt.txt`). The newline
    that ends the input is dropped.
    """
    if value != "-":
        return value
    if sys.stdin is None:  # started with it closed (`<&-`, a service manager's default)
        raise CliError(
            "could not read the message from stdin: it is closed; pipe the message in, "
            "or give it on the command line",
            EXIT_USAGE,
        )
    try:
        text = sys.stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"could not read the message from stdin: {exc}", EXIT_USAGE) from None
    return text.removesuffix("\n").removesuffix("\r")


def load_agent(path: str) -> Agentor:
    obj = worker.import_object(path)
    if not isinstance(obj, Agentor):
        raise worker.ConfigError(
            f"{path!r} is a {type(obj).__name__}, not an agent: "
            "expected an agentor_temporal.Agentor"
        )
    return obj


def keys_arg(args: argparse.Namespace) -> KeysSetting:
    """--encryption-keys-file as a key file's path; None: the environment's keys."""
    path = getattr(args, "encryption_keys_file", None)
    return Path(path) if path else None


def configure(agent: Agentor, args: argparse.Namespace) -> None:
    """Apply --temporal, --encryption-keys-file, --task-queue and --no-worker to an agent."""
    if args.temporal:
        agent.temporal = args.temporal
    if getattr(args, "encryption_keys_file", None):
        agent.encryption_keys = keys_from_file(args.encryption_keys_file)
    if args.task_queue:
        try:
            agent.task_queue = args.task_queue
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    if args.no_worker:
        agent.embedded_worker = False


async def connect_for_reading(args: argparse.Namespace) -> Client:
    """Temporal for commands that only read: never starts a dev server."""
    return await connect(args.temporal, start_dev=False, encryption_keys=keys_arg(args))


def address(client: Client) -> str:
    return redact_address(client.service_client.config.target_host)


async def not_in_temporal(client: Client, run_id: str, store: str | None) -> str:
    """What to say of a run Temporal does not have: whether the store (a directory) has it.

    A server back from an outage without its database no longer has the runs it
    had, and their mirror does: a bare 'no run' left the user to think it lost.
    """
    if store is None:
        return (
            f"no run with id {run_id!r} in Temporal at {address(client)}. If the server had it "
            "and lost it (it came back from an outage without its database, or was reset), "
            f"the store mirroring its runs may have it: `agentor-temporal show {run_id} --store "
            f"DIR` shows it from there, and `agentor-temporal resume {run_id} --agent "
            "MODULE:ATTR` continues a run only its store holds"
        )
    mirror = FileStore(store_dir(store))
    if await in_thread(mirror.load, run_id):
        gone = await run_gone(client, run_id, mirror)
        return f"{gone.args[0]} `agentor-temporal show {run_id} --store {store}` shows its events."
    return f"no run with id {run_id!r} in Temporal at {address(client)}, nor in the store {store!r}"


def store_dir(path: str) -> Path:
    directory = Path(path)
    if not directory.is_dir():
        raise CliError(f"store directory {path!r} does not exist")
    return directory


def arun(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(factory())


async def history_events(
    client: Client, run_id: str, store: str | None = None
) -> tuple[list[Event], list[Segment], int]:
    """(events, segments, leading events missing) of a run; CliError if unknown.

    A run continued from a store starts with events Temporal never had;
    `store` (a directory) supplies them when it has them. A fork's parent
    events are read from the parent's history.
    """
    segments = await TemporalStore(client).segments(run_id)
    if not segments:
        raise CliError(await not_in_temporal(client, run_id, store))
    events, missing = await run_events(
        run_id, segments, FileStore(store_dir(store)) if store else None, client=client
    )
    return events, segments, missing
