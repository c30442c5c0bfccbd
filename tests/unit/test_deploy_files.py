"""docker-compose.yml: a real compose parser accepts it; maintained images; secrets kept out."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_ENV = "deploy/agentor.env.example"

needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="Debian's docker-compose is not installed (scripts/test installs it when root)",
)


@functools.cache
def _config() -> dict[str, Any]:
    """`docker-compose config`, resolved, with the example env file."""
    import yaml

    env = {**os.environ, "AGENTOR_ENV_FILE": EXAMPLE_ENV}
    check = subprocess.run(
        ["docker-compose", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert check.returncode == 0, check.stderr
    resolved = subprocess.run(
        ["docker-compose", "config"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env
    ).stdout
    config = yaml.safe_load(resolved)
    json.dumps(config)  # plain data all the way down
    return dict(config)


@needs_compose
def test_compose_file_is_valid_and_the_worker_scales() -> None:
    """`docker-compose config` accepts the file; the worker has no fixed name or host port."""
    services = _config()["services"]
    assert {"postgresql", "temporal", "temporal-ui", "worker", "codec-server"} <= set(services)
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "build" in worker
    assert services["temporal"]["environment"]["DB"] == "postgres12"


def _bundled_versions() -> tuple[str, str]:
    """(server, UI) versions of the Temporal CLI the tests run against."""
    from agentor_temporal.connection import temporal_binary

    out = subprocess.run(
        [temporal_binary(), "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    found = re.search(r"Server ([\d.]+), UI ([\d.]+)", out)
    assert found, out
    return found.group(1), found.group(2)


@needs_compose
def test_compose_runs_maintained_images_at_the_tested_versions() -> None:
    """No auto-setup image: a schema job, then the server; server and UI at the tested pair."""
    services = _config()["services"]
    images = {name: s.get("image", "") for name, s in services.items()}
    assert not any("auto-setup" in image for image in images.values())
    server, ui = _bundled_versions()
    assert images["temporal"] == f"temporalio/server:{server}"
    assert images["temporal-ui"] == f"temporalio/ui:{ui}"
    assert images["temporal-schema"] == f"temporalio/admin-tools:{server}"
    assert images["temporal-namespace"] == f"temporalio/admin-tools:{server}"
    # the server starts only once its schema is in place
    assert services["temporal"]["depends_on"]["temporal-schema"] == {
        "condition": "service_completed_successfully"
    }
    schema = "\n".join(services["temporal-schema"]["command"])
    assert "setup-schema" in schema and "update-schema" in schema
    # workers start once the namespace and search attributes exist
    assert services["worker"]["depends_on"]["temporal-namespace"] == {
        "condition": "service_completed_successfully"
    }


@needs_compose
def test_codec_server_serves_the_ui_and_secrets_come_from_the_env_file() -> None:
    """The UI decodes through the codec service; keys and API keys are only in the env file."""
    services = _config()["services"]
    codec, ui = services["codec-server"], services["temporal-ui"]
    assert codec["command"][:2] == ["agentor-temporal", "codec-server"]
    assert codec["command"][codec["command"].index("--cors-origin") + 1] == "http://localhost:8080"
    [published] = codec["ports"]
    if isinstance(published, str):  # compose v1 prints "ip:host:container"
        host_ip, host_port, _ = published.split(":")
    else:
        host_ip, host_port = published["host_ip"], published["published"]
    assert host_ip == "127.0.0.1"  # it holds the keys: loopback only
    assert ui["environment"]["TEMPORAL_CODEC_ENDPOINT"] == f"http://localhost:{host_port}"
    import yaml

    text = (ROOT / "docker-compose.yml").read_text()
    raw = yaml.safe_load(text)["services"]
    for name in ("worker", "codec-server"):
        assert raw[name]["env_file"] == ["${AGENTOR_ENV_FILE:-./agentor.env}"]
        # compose read the (example) env file into the service's environment
        assert services[name]["environment"]["AGENTOR_ENCRYPTION_KEYS"] == ""
    secrets = {"AGENTOR_ENCRYPTION_KEYS", "OPENAI_API_KEY", "AGENTOR_CODEC_TOKEN"}
    # named here only to be emptied for a service that must not hold them
    given = [
        name
        for service in raw.values()
        for name, value in (service.get("environment") or {}).items()
        if name in secrets and value != ""
    ]
    assert not given
    example = dict(
        line.split("=", 1)
        for line in (ROOT / EXAMPLE_ENV).read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert example["AGENTOR_ENCRYPTION_KEYS"] == "" and example["OPENAI_API_KEY"] == ""


def test_dockerfile_runs_the_worker_with_encryption() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["python", "worker.py"]' in text and "STOPSIGNAL SIGTERM" in text
    assert "[encryption]" in text


@needs_compose
def test_each_service_gets_only_the_secrets_it_uses(tmp_path: Path) -> None:
    """From one filled-in env file, the codec server (which faces browsers) never holds the
    model's API key or endpoint, and the workers never hold the codec server's token."""
    import yaml

    env_file = tmp_path / "agentor.env"
    env_file.write_text(
        "OPENAI_API_KEY=sk-compose-MODELKEY-0123\n"
        "OPENAI_BASE_URL=https://user:compose-URLPASS@gw.example/v1\n"
        "AGENTOR_ENCRYPTION_KEYS=k1:q5kq5kq5kq5kq5kq5kq5kq5kq5kq5kq5kq5kq5kq5ks=\n"
        "AGENTOR_CODEC_TOKEN=compose-CODECTOKEN-4567\n"
    )
    env = {**os.environ, "AGENTOR_ENV_FILE": str(env_file)}
    resolved = subprocess.run(
        ["docker-compose", "config"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env
    )
    assert resolved.returncode == 0, resolved.stderr
    services = yaml.safe_load(resolved.stdout)["services"]
    codec, worker = services["codec-server"]["environment"], services["worker"]["environment"]
    assert codec["AGENTOR_CODEC_TOKEN"] == "compose-CODECTOKEN-4567"
    assert worker["OPENAI_API_KEY"] == "sk-compose-MODELKEY-0123"
    assert codec["AGENTOR_ENCRYPTION_KEYS"] == worker["AGENTOR_ENCRYPTION_KEYS"] != ""
    held = {name: json.dumps(service.get("environment")) for name, service in services.items()}
    assert not [n for n, text in held.items() if n != "worker" and "MODELKEY" in text]
    assert not [n for n, text in held.items() if n != "worker" and "URLPASS" in text]
    assert not [n for n, text in held.items() if n != "codec-server" and "CODECTOKEN" in text]
