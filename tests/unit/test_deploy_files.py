"""docker-compose.yml parses with a real compose parser and the worker scales."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="Debian's docker-compose is not installed (scripts/test installs it when root)",
)
def test_compose_file_is_valid_and_the_worker_scales() -> None:
    """`docker-compose config` accepts the file; the worker has no fixed name or host port."""
    check = subprocess.run(
        ["docker-compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stderr
    resolved = subprocess.run(
        ["docker-compose", "config"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    import json

    import yaml

    config = yaml.safe_load(resolved)
    services = config["services"]
    assert {"postgresql", "temporal", "temporal-ui", "worker"} <= set(services)
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "build" in worker
    assert services["temporal"]["environment"]["DB"] == "postgres12"
    json.dumps(config)  # plain data all the way down


def test_dockerfile_runs_the_worker() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["python", "worker.py"]' in text and "STOPSIGNAL SIGTERM" in text
