"""Temporal core's log lines never land in what a command prints on stdout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import asyncio, logging, sys
from temporalio.client import Client
from temporalio.runtime import LogForwardingConfig, LoggingConfig
from agentor_temporal import telemetry

# the same route at DEBUG, so that a failed connection has something to say
telemetry.core_logging = lambda: LoggingConfig(
    filter="DEBUG",
    forwarding=LogForwardingConfig(logger=logging.getLogger(telemetry.CORE_LOGGER)),
)
assert telemetry.route_core_logs()
assert not telemetry.route_core_logs()  # the default exists now: kept
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s: %(message)s")
seen = []
class Seen(logging.Handler):
    def emit(self, record):
        seen.append(record)
logging.getLogger(telemetry.CORE_LOGGER).addHandler(Seen())

async def main():
    try:
        await Client.connect("127.0.0.1:1")
    except Exception:
        pass
    # forwarded lines arrive in batches: wait (with a deadline) for the first
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not seen and loop.time() < deadline:
        await asyncio.sleep(0.05)

asyncio.run(main())
"""


def test_core_logs_go_to_python_logging_not_stdout() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "temporalio.core" in done.stderr and "127.0.0.1:1" in done.stderr


def test_the_cli_routes_core_logs_before_any_client(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from agentor_temporal import cli, telemetry\n"
        f"cli.execute(['show', 'no-such-run', '--store', {str(tmp_path)!r}])\n"
        "print('routed again:', telemetry.route_core_logs())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    # execute() installed the forwarding runtime first: a second try keeps it
    assert "routed again: False" in done.stdout, done.stdout + done.stderr
