"""`agent.serve()` in a single script: the server process also runs the agent.

No worker process and no token: the embedded worker serves the agent for the
server's life, and SIGTERM stops the server gracefully.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from helpers import ANSWER, PROMPT, free_port
from serve_http import settle, wait_until

SCRIPT = """
import os
from procs.serve_agents import weather
weather.temporal = os.environ["TEMPORAL_ADDRESS"]
weather.task_queue = os.environ["ONLY_HERE_QUEUE"]
weather.serve(port=int(os.environ["PORT"]), log_level="warning")
print("served", flush=True)
"""


def outward_address() -> str | None:
    """This machine's address on its network (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it picks a route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_agent_serve_runs_the_agent_in_the_same_process(
    serve_env: dict[str, str], tmp_path: Path
) -> None:
    """agent.serve(): loopback only, runs complete with no worker process, SIGTERM stops it."""
    port = free_port()
    env = {k: v for k, v in serve_env.items() if k != "AGENTOR_SERVE_TOKEN"}
    env.update({"PORT": str(port), "ONLY_HERE_QUEUE": f"single-{uuid.uuid4().hex[:8]}"})
    log = (tmp_path / "single.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, (tmp_path / "single.log").read_text()
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, "agent.serve() to answer", 30)
        with httpx.Client(base_url=url, timeout=30) as http:
            run_id = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
            assert settle(http, run_id, "completed")["final_output"] == ANSWER
            assert http.get("/docs").status_code == 200  # no token: the docs are there
        outward = outward_address()
        if outward is not None:  # bound to 127.0.0.1 unless told otherwise
            try:
                httpx.get(f"http://{outward}:{port}/health", timeout=2)
                raise AssertionError(f"agent.serve() answered on {outward}")
            except httpx.TransportError:
                pass
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert "served" in (tmp_path / "single.log").read_text()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
