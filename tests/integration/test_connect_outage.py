"""A Temporal server that dies while a process connects to it: an outage, not a wrong address."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest

from helpers import ROOT, DevServerProcess, connected_to, stop_process, wait_until

pytestmark = pytest.mark.slow


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    full.update(env, PYTHONPATH=str(ROOT))
    return forkserver.ForkedPopen(
        [sys.executable, "-m", "agentor_temporal", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_server_that_dies_while_a_process_connects_is_waited_for(tmp_path: Path) -> None:
    """A server that took a process's connection and died before answering is waited
    for (said once), within the outage patience, then said clearly: never failed at
    once as "no server listens there"."""
    server = DevServerProcess(tmp_path / "temporal.db", tmp_path / "server.log").start()
    patient = impatient = None
    try:
        assert server.proc is not None
        # frozen, the kernel still takes connections: the CLIs connect, unanswered
        os.kill(server.proc.pid, signal.SIGSTOP)
        patient = _cli(["list"], {"TEMPORAL_ADDRESS": server.address})
        impatient = _cli(
            ["list"], {"TEMPORAL_ADDRESS": server.address, "AGENTOR_OUTAGE_PATIENCE": "1"}
        )
        wait_until(
            lambda: (
                connected_to(patient.pid, server.port) and connected_to(impatient.pid, server.port)
            ),
            "both CLIs to connect",
            timeout=30,
        )
        server.kill()  # their connections reset, and nothing listens for a while
        _, told = impatient.communicate(timeout=30)
        assert patient.poll() is None, patient.communicate()
        server.start()
        out, err = patient.communicate(timeout=60)
    finally:
        stop_process(patient)
        stop_process(impatient)
        server.stop()
    assert patient.returncode == 0 and "no runs found" in out, err[-3000:]
    said = [line for line in err.splitlines() if "agentor_temporal" in line]
    assert len(said) == 1 and "went away while this process connected" in said[0], err
    assert server.address in said[0] and "waiting up to 300 s" in said[0], said
    assert impatient.returncode == 1 and "Traceback" not in told, told
    (last,) = told.strip().splitlines()[-1:]
    assert last.startswith(f"error: Cannot reach Temporal at {server.address}: it went away"), told
    assert "did not come back" in last and "AGENTOR_OUTAGE_PATIENCE" in last, last
