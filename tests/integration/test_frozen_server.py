"""What a process says while it waits on something that holds it silent: a Temporal server
frozen at connect, a runs directory it cannot write."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import DevServerProcess
from integration.test_cli import AGENT, Running, cli
from integration.test_disk_full import small_disk

pytestmark = pytest.mark.slow


def test_a_frozen_server_at_connect_is_said_within_seconds(tmp_path: Path) -> None:
    """A server that takes the connection and never answers (SIGSTOPped: a paused VM, an
    overloaded frontend): `list` sat silent for the Temporal client's ~30 s, then failed.
    Now it says within seconds, once, what it waits for and how long it will; thawed, the
    command goes on and succeeds."""
    with DevServerProcess(tmp_path / "db", tmp_path / "server.log") as server:
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        listing: Running | None = None
        try:
            started = time.monotonic()
            listing = Running(["list", "--temporal", server.address], {})
            said = listing.wait_for("stderr", "Waiting for Temporal", timeout=15)
            took = time.monotonic() - started
        except BaseException:
            if listing is not None:
                listing.kill()
            raise
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert took < 10, f"said after {took:.0f} s"
        assert server.address in said and "30 s" in said, said
        assert listing.finish(timeout=60) == 0, listing.lines
    waits = [line for line in listing.lines["stderr"] if "Waiting for Temporal" in line]
    assert len(waits) == 1, listing.lines["stderr"]
    assert "Traceback" not in "\n".join(listing.lines["stderr"]), listing.lines["stderr"]


@pytest.mark.parametrize("exists", [False, True], ids=["to_create", "existing"])
def test_worker_store_on_a_read_only_disk_says_what_to_change(tmp_path: Path, exists: bool) -> None:
    """`worker --store DIR` on a read-only disk printed the bare '[Errno 30] Read-only file
    system: DIR' (or, for a directory already there, started and failed each mirror
    write later). Now it refuses at start in one line naming the directory, what it could
    not do and what to change, exit 2 (a setting), before connecting anywhere."""
    with small_disk(tmp_path / "disk") as disk:
        runs = disk / "runs"
        if exists:
            runs.mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        done = cli("worker", "--agents", AGENT, "--store", str(runs), "--temporal", "127.0.0.1:1")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(runs) in lines[0] and "Read-only file system" in lines[0], lines
    assert "--store" in lines[0] and not lines[0].startswith("error: [Errno"), lines
