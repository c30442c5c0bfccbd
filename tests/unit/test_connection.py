"""Temporal unreachable: every entry point fails at once with the address it tried."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentor_temporal import ConnectionFailed
from agentor_temporal.connection import _connect_failure

from helpers import PROCS, PROMPT, ROOT, free_port, weather_agent


@pytest.fixture
def dead_address() -> str:
    return f"127.0.0.1:{free_port()}"


async def test_facade_names_the_address_it_could_not_reach(dead_address: str) -> None:
    """run() and resume() against an explicit address nobody serves raise ConnectionFailed."""
    agent = weather_agent(base_url="http://unused/v1", task_queue="q", temporal=dead_address)
    with pytest.raises(ConnectionFailed, match=f"Cannot reach Temporal at {dead_address}"):
        await agent.arun(PROMPT)
    with pytest.raises(ConnectionFailed, match=f"Cannot reach Temporal at {dead_address}"):
        await agent.aresume("some-run")


async def test_environment_address_is_named_too(
    dead_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With TEMPORAL_ADDRESS set (and no temporal=), the message names that address."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", dead_address)
    agent = weather_agent(base_url="http://unused/v1", task_queue="q")
    with pytest.raises(
        ConnectionFailed, match=f"Cannot reach Temporal at {dead_address}.*TEMPORAL"
    ):
        await agent.arun(PROMPT)


def test_worker_cli_exits_1_naming_the_address(dead_address: str) -> None:
    """`python worker.py` prints one clear line and exits 1, not a traceback."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(PROCS)]),
        "MODEL_BASE_URL": "http://unused/v1",
        "AGENT_TASK_QUEUE": "q",
        "TEMPORAL_ADDRESS": dead_address,
    }
    out = subprocess.run(
        [sys.executable, str(ROOT / "worker.py"), "--agents", "env_agent:agent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.startswith(
        f"error: Cannot reach Temporal at {dead_address}: the connection was refused"
    )
    assert "Traceback" not in out.stderr


async def test_the_reason_is_one_plain_clause_not_the_cores_structures(dead_address: str) -> None:
    """A refused connection, and a server holding it without an answer (stopped: the
    core's `Status { code: Cancelled, message: "Timeout expired", ... }`), are said plainly."""
    agent = weather_agent(base_url="http://unused/v1", task_queue="q", temporal=dead_address)
    with pytest.raises(ConnectionFailed) as refused:
        await agent.arun(PROMPT)
    said = str(refused.value)
    assert said.startswith(
        f"Cannot reach Temporal at {dead_address}: the connection was refused (no server "
        "listens there)"
    )
    assert "tonic" not in said and "Os {" not in said and "\n" not in said

    # what the core raises for a stopped server, after its 30 s (too slow to wait for here)
    held = RuntimeError(
        "Failed client connect: `get_system_info` call error after connection: Status { code: "
        'Cancelled, message: "Timeout expired", source: Some(tonic::transport::Error('
        "Transport, TimeoutExpired(()))) }"
    )
    assert _connect_failure(held).startswith("it took the connection but did not answer")
    # anything else keeps its own (first) line
    assert _connect_failure(RuntimeError("odd failure\nmore")) == "odd failure"


def test_a_given_clients_tls_key_and_api_key_are_secrets_of_the_process() -> None:
    """A client the caller connected (given to `Agentor`, or a user's worker under
    `AgentorPlugin`): its API key and each line of its TLS client key are masked."""
    from types import SimpleNamespace

    from temporalio.service import TLSConfig

    from agentor_temporal.activities._redact import clean
    from agentor_temporal.connection import remember_client

    lines = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "u1cLyA4kq0Zf3gQZtDQW9a3c"]
    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END PRIVATE KEY-----\n"
    config = SimpleNamespace(
        target_host="temporal.example:7233",
        api_key="tcak-unit-connection-4f1c9e",
        rpc_metadata={},
        tls=TLSConfig(client_cert=b"cert", client_private_key=pem.encode()),
    )
    remember_client(SimpleNamespace(service_client=SimpleNamespace(config=config)))  # type: ignore[arg-type]
    said = f"refused {config.api_key}: bad key {lines[0]} / {lines[1]}"
    assert clean(said) == "refused ***: bad key *** / ***"
