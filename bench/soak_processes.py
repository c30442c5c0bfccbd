"""The soak's processes: a dev server on a database file, and worker processes.

Both are restartable: the server on the same ports and database after a
SIGKILL, and any worker that exits (or is killed) replaced by a new one.
Used by `bench/soak.py`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from temporalio.client import Client

from agentor_temporal.connection import dev_server_args, temporal_binary

ROOT = Path(__file__).resolve().parent.parent
#: worker processes serving the soak's runs at once
WORKERS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`temporal server start-dev` on a database file, restartable on the same ports."""

    def __init__(self, directory: Path) -> None:
        self.db = directory / "temporal.db"
        self.port, self.http_port = free_port(), free_port()
        self.log = open(directory / "server.log", "ab")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                temporal_binary(),
                "server",
                "start-dev",
                "--db-filename",
                str(self.db),
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--http-port",
                str(self.http_port),
                "--headless",
                "--log-level",
                "error",
                *dev_server_args(),
            ],
            stdout=self.log,
            stderr=self.log,
        )

    async def ready(self, timeout: float = 60) -> Client:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await Client.connect(self.address)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class Workers:
    """The worker processes; any that exits (or is killed) is replaced."""

    def __init__(self, directory: Path, address: str, model_url: str, queue: str) -> None:
        self.directory = directory
        self.env = {
            **os.environ,
            "TEMPORAL_ADDRESS": address,
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "soak",
            "SOAK_LEDGER": str(directory / "ledger.txt"),
            "PYTHONPATH": str(ROOT / "bench"),
            "PYTHONUNBUFFERED": "1",
        }
        self.queue = queue
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log = open(directory / "workers.log", "ab")  # noqa: SIM115
        #: pid -> how it ended: "killed", "stopped" (SIGTERM), "exited"
        self.ended: dict[int, str] = {}
        #: pid -> (started, ended) monotonic seconds
        self.lifetimes: dict[int, list[float]] = {}

    def spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "worker.py"),
                "--agents",
                "soak_agents:soak",
                "--task-queue",
                self.queue,
                "--store",
                str(self.directory / "runs"),
                "--log-level",
                "WARNING",
            ],
            env=self.env,
            stdout=self.log,
            stderr=self.log,
        )
        self.lifetimes[proc.pid] = [time.monotonic(), float("inf")]
        return proc

    def start(self, count: int = WORKERS) -> None:
        self.procs = [self.spawn() for _ in range(count)]

    def replace_exited(self) -> int:
        replaced = 0
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.ended.setdefault(proc.pid, "exited")
                self.lifetimes[proc.pid][1] = time.monotonic()
                self.procs[i] = self.spawn()
                replaced += 1
        return replaced

    def signal(self, index: int, sig: signal.Signals) -> int:
        proc = self.procs[index]
        self.ended[proc.pid] = "killed" if sig == signal.SIGKILL else "stopped"
        proc.send_signal(sig)
        return proc.pid

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
