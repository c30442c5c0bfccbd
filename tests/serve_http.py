"""The serve tests' processes and HTTP helpers: the server and worker as real processes, SSE.

`Proc` runs `python -m agentor_temporal ARGS` with its output in a log file;
`Server` is `agentor-temporal serve` on a fixed port, so a restarted server is
found where the killed one was.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forkserver
import httpx

from helpers import free_port, wait_until

AGENTS = "procs.serve_agents:weather,procs.serve_agents:treasurer"
TOKEN = "test-token-" + uuid.uuid4().hex[:8]


class Proc:
    """A process of the suite (`python -m agentor_temporal ARGS`) that a test may kill."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name, self.args, self.env, self.logs = name, args, env, logs
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.logs / f"{self.name}-{self.starts}.log").open("wb")
        self.process = forkserver.ForkedPopen(
            [sys.executable, "-m", "agentor_temporal", *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return (self.logs / f"{self.name}-{self.starts}.log").read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30) -> None:
        def seen() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.output()[-3000:]}")
            return text in self.output()

        wait_until(seen, f"{self.name} to print {text!r}", timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Server(Proc):
    """`agentor-temporal serve` on a fixed port, so a restart is found where it was."""

    def __init__(self, env: dict[str, str], logs: Path, address: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["serve", "--agents", AGENTS, "--temporal", address, "--port", str(self.port)]
        super().__init__("server", args, env, logs)

    def start(self) -> None:
        super().start()

        def healthy() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"the server exited early:\n{self.output()[-3000:]}")
            try:
                return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, "the server to answer /health", 30)

    def client(self, **kwargs: Any) -> httpx.Client:
        """An HTTP client with the server's token."""
        headers = {"Authorization": f"Bearer {TOKEN}", **kwargs.pop("headers", {})}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)


def read_sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Server-sent events of a streamed response: {"id", "event", "data"} each."""
    message: dict[str, Any] = {}
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data or message:
                yield {**message, "data": "\n".join(data)}
            message, data = {}, []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field in ("id", "event", "retry"):
                message[field] = value


def ledger_for(env: dict[str, str], run_id: str) -> list[str]:
    """Tool executions of one run."""
    try:
        lines = Path(env["AGENT_LEDGER"]).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [line for line in lines if f" {run_id}:" in line]


def settle(http: httpx.Client, run_id: str, status: str, timeout: float = 30) -> dict[str, Any]:
    """`GET /runs/{run_id}` once the run's status is `status`."""
    latest: dict[str, Any] = {}

    def reached() -> bool:
        nonlocal latest
        latest = http.get(f"/runs/{run_id}").json()
        return latest.get("status") == status

    deadline = time.monotonic() + timeout
    while not reached():
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} never reached {status!r}: {latest.get('status')}")
        time.sleep(0.05)
    return latest
