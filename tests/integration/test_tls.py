"""Connecting through TLS and mTLS with nothing but the standard Temporal client environment.

Temporal Cloud and self-hosted clusters with TLS are reached through the
variables `temporalio.envconfig` reads (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
TEMPORAL_API_KEY, TEMPORAL_TLS_*). Here the session's dev server sits behind a
TLS-terminating proxy that requires a client certificate (`tests/tls.py`):
a worker process and a `run` process configured only by that environment
(plus the encryption keys, as in production) complete an encrypted run
through it, and a client without the certificate, or without the CA, gets
one clear line naming the address.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentor_temporal.testing import ScriptedModelServer

from integration.test_cli import AGENT, Running, cli
from private import SECRET_ANSWER, SECRET_PROMPT, history_json, leaks, make_keys
from tls import TlsProxy, make_certs


def test_worker_and_client_reach_temporal_through_mtls_from_the_environment(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """A worker and a `run` over mTLS, configured by TEMPORAL_* alone; no cert, no connection."""
    certs = make_certs(tmp_path / "certs")
    keys = make_keys("A")["A"]
    with TlsProxy(temporal_address, certs, require_client_cert=True) as proxy:
        tls_env = {
            "TEMPORAL_ADDRESS": proxy.address,
            "TEMPORAL_NAMESPACE": "default",
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.ca),
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(certs.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(certs.client_key),
        }
        env = {
            **tls_env,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENTOR_ENCRYPTION_KEYS": keys,
        }
        worker = Running(["worker", "--agents", AGENT], env)
        try:
            worker.wait_for("stdout", "worker ready")
            ran = cli("run", "--agent", AGENT, "--no-worker", "--json", SECRET_PROMPT, env=env)
            assert ran.returncode == 0, ran.stderr
            result = json.loads(ran.stdout)
            assert result["status"] == "completed" and result["final_output"] == SECRET_ANSWER
            shown = cli("show", result["run_id"], env=env)
            assert shown.returncode == 0 and SECRET_PROMPT in shown.stdout
        finally:
            worker.kill()
        assert proxy.handshakes >= 2  # the worker's and the clients' connections
        assert leaks(history_json(temporal_address, result["run_id"])) == []

        # without a client certificate the proxy refuses the handshake
        no_cert = {k: v for k, v in env.items() if "CLIENT" not in k}
        refused = cli("show", result["run_id"], env=no_cert, timeout=120)
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"error: Cannot reach Temporal at {proxy.address}")
        assert "Traceback" not in refused.stderr
        assert proxy.refused >= 1

        # and a client that does not trust the server's CA refuses it
        no_ca = {k: v for k, v in env.items() if "SERVER_CA" not in k}
        untrusted = cli("show", result["run_id"], env={**no_ca, "TEMPORAL_TLS": "true"})
        assert untrusted.returncode == 1
        assert untrusted.stderr.startswith(f"error: Cannot reach Temporal at {proxy.address}")
