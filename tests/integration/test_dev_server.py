"""The embedded dev server's start: a port it picked for itself lost to another process."""

from __future__ import annotations

import logging
import stat
import sys
from pathlib import Path

import pytest

from agentor_temporal import _dev_server
from agentor_temporal.connection import ConnectionFailed, stop_dev_server, temporal_binary

from helpers import free_port

#: What the dev server printed when a port it had picked for an internal service was taken
#: before it bound it (its start then panics, exit 2).
RACE = "panic: listen tcp 127.0.0.1:{port}: bind: address already in use"


def _stand_in(tmp_path: Path, failures: int, said: str) -> Path:
    """A `temporal` whose first `failures` server starts fail as `said`; else the real one."""
    script = tmp_path / "temporal-stand-in"
    count = tmp_path / "starts"
    script.write_text(
        f"""#!{sys.executable}
import os, sys
from pathlib import Path
count = Path({str(count)!r})
starting = sys.argv[1:3] == ["server", "start-dev"]
n = int(count.read_text()) if count.exists() else 0
if starting:
    count.write_text(str(n + 1))
if starting and n < {failures}:
    print({said!r}, flush=True)
    print("goroutine 1 [running]:\\nmain.main()", flush=True)
    sys.exit(2)
os.execv({temporal_binary()!r}, [{temporal_binary()!r}, *sys.argv[1:]])
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_start_that_lost_a_port_it_picked_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    port, ui_port = free_port(), free_port()
    stand_in = _stand_in(tmp_path, 2, RACE.format(port=free_port()))
    monkeypatch.setattr(_dev_server, "temporal_binary", lambda: str(stand_in))
    data = tmp_path / "data"
    try:
        with caplog.at_level(logging.WARNING):
            server = _dev_server.start_dev_server(data, port, ui_port)
        assert server.started and server.address == f"localhost:{port}"
        assert (tmp_path / "starts").read_text() == "3"
        assert caplog.text.count("lost a port it picked for itself") == 2
        assert "bind: address already in use" in caplog.text
    finally:
        stop_dev_server(data)


def test_a_start_that_fails_otherwise_says_why_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ui_port = free_port(), free_port()
    # its own port taken: trying again cannot help
    taken = (
        f"Error: can't set frontend port {port}: "
        f"listen tcp 127.0.0.1:{port}: bind: address already in use"
    )
    for said, starts in ((taken, "1"), ("panic: the database is corrupt", "1")):
        (tmp_path / "starts").unlink(missing_ok=True)
        stand_in = _stand_in(tmp_path, 5, said)
        monkeypatch.setattr(_dev_server, "temporal_binary", lambda s=stand_in: str(s))
        with pytest.raises(ConnectionFailed) as info:
            _dev_server.start_dev_server(tmp_path / "data", port, ui_port)
        assert (tmp_path / "starts").read_text() == starts
        # the reason first, not only the tail of a stack trace
        assert str(info.value).startswith(
            f"The embedded Temporal dev server exited with code 2: {said}"
        )
