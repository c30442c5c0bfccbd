"""One worker process and one HTTP server process for all the serve tests.

The server is `agentor-temporal serve` as a real process under uvicorn (no
worker in it, as in production), the worker is `agentor-temporal worker` in
another; both talk to the session's dev server. Tests that kill one of them
restart it before they end, so the next test finds both up.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from agentor_temporal.testing import ScriptedModelServer

from helpers import ROOT
from serve_http import AGENTS, TOKEN, Proc, Server


@pytest.fixture(scope="package")
def serve_model() -> Iterator[ScriptedModelServer]:
    """The default scripted agent (call the first tool, then answer), streaming in chunks."""
    with ScriptedModelServer(chunk_delay=0.002) as server:
        yield server


@pytest.fixture(scope="package")
def serve_env(
    temporal_env: WorkflowEnvironment,
    serve_model: ScriptedModelServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, str]:
    root = tmp_path_factory.mktemp("serve")
    (root / "gates").mkdir()
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "PYTHONUNBUFFERED": "1",
            "MODEL_BASE_URL": serve_model.base_url,
            "AGENT_TASK_QUEUE": f"serve-{uuid.uuid4().hex[:8]}",
            "AGENT_LEDGER": str(root / "ledger.txt"),
            "SERVE_GATES": str(root / "gates"),
            "AGENTOR_SERVE_TOKEN": TOKEN,
            "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "LOGS": str(root),
        }
    )
    return env


@pytest.fixture(scope="package")
def worker(serve_env: dict[str, str]) -> Iterator[Proc]:
    """`agentor-temporal worker` for both agents."""
    args = [
        "worker",
        "--agents",
        AGENTS,
        "--temporal",
        serve_env["TEMPORAL_ADDRESS"],
        "--task-queue",
        serve_env["AGENT_TASK_QUEUE"],
    ]
    proc = Proc("worker", args, serve_env, Path(serve_env["LOGS"]))
    proc.start()
    proc.wait_for_output("worker ready")
    yield proc
    proc.kill()


@pytest.fixture(scope="package")
def server(serve_env: dict[str, str], worker: Proc) -> Iterator[Server]:
    """`agentor-temporal serve` for both agents, with a token, and no worker of its own."""
    proc = Server(serve_env, Path(serve_env["LOGS"]), serve_env["TEMPORAL_ADDRESS"])
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    if not server.alive():
        server.start()
    with server.client() as client:
        yield client


@pytest.fixture
def gates(serve_env: dict[str, str]) -> Path:
    """Where a file named after a run id or a tool's target holds that tool."""
    return Path(serve_env["SERVE_GATES"])
