"""What a process says while it waits on something that holds it silent: a Temporal server
frozen at connect, a runs directory it cannot write."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal import _outage
from agentor_temporal._outage import riding_outages

from helpers import DevServerProcess
from integration.test_cli import AGENT, Running, cli
from integration.test_disk_full import small_disk

pytestmark = pytest.mark.slow


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP `pid` and wait until the kernel shows it stopped (its state `T` in
    /proc/PID/stat): in a clean-clone run under load, a call made just after the signal
    was once answered, as if the server had not stopped yet."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    stat = Path(f"/proc/{pid}/stat")
    while stat.read_text().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
        assert time.monotonic() < deadline, f"process {pid} not stopped {timeout} s after SIGSTOP"
        time.sleep(0.01)


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


async def test_a_server_frozen_while_a_caller_waits_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server frozen (SIGSTOP: a paused VM) while a caller waits on it was said twice:
    slow (the wait went on unanswered), then unreachable (the wait's own deadline passed).
    One freeze is said once, and the wait goes on once the server is thawed."""
    monkeypatch.setattr(_outage, "_SLOW_AFTER", 0.3)
    monkeypatch.setattr(_outage, "_slow_said", {})
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "60")
    caplog.set_level(logging.INFO, logger="agentor_temporal")
    with DevServerProcess(tmp_path / "db", tmp_path / "server.log") as server:
        assert server.proc is not None
        client = await Client.connect(server.address)
        failed = asyncio.Event()
        calls = 0

        async def step() -> str:
            """A wait (a long poll) whose own deadline, 4 s, the freeze outlasts."""
            nonlocal calls
            calls += 1
            try:
                await client.workflow_service.get_system_info(
                    GetSystemInfoRequest(), retry=False, timeout=timedelta(seconds=4)
                )
            except Exception:
                failed.set()
                raise
            return "answered"

        freeze(server.proc.pid)
        try:
            waiting = asyncio.ensure_future(riding_outages(step, client, what="waiting for x"))
            # slow said, then past the deadline
            fails = asyncio.ensure_future(failed.wait())
            await asyncio.wait({fails, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            fails.cancel()
            assert failed.is_set(), (waiting, calls, [r.getMessage() for r in caplog.records])
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert await asyncio.wait_for(waiting, 30) == "answered"
    said = [r for r in caplog.records if "Temporal at" in r.getMessage()]
    loud = [r.getMessage() for r in said if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and "slow to answer" in loud[0], [r.getMessage() for r in said]
    assert server.address in loud[0] and calls == 2, loud


def test_a_frozen_servers_deadline_answers_are_waited_out() -> None:
    """What a server thawed from a freeze answers the calls it held (its own deadline on
    them passed, or it reset their streams) failed a waiting `run` at once ("error:
    context deadline exceeded", "error: stream terminated by RST_STREAM with error code:
    CANCEL", seen with a 30 s SIGSTOP): they are waited out as a held call is."""
    assert _outage.unreachable(
        RPCError("context deadline exceeded", RPCStatusCode.DEADLINE_EXCEEDED, b"")
    )
    reset = "stream terminated by RST_STREAM with error code: CANCEL"
    for status in (RPCStatusCode.CANCELLED, RPCStatusCode.UNKNOWN, RPCStatusCode.INTERNAL):
        assert _outage.unreachable(RPCError(reset, status, b""))
    assert not _outage.unreachable(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""))
