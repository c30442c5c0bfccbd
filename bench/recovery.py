"""Recovery benchmark: SIGKILL a worker mid-tool-call, time the run's completion elsewhere.

Starts its own Temporal dev server (a subprocess on free ports, database in a
temporary directory) and a scripted model with latency 0, then for each trial
runs the seed's weather agent twice on two fresh worker processes: once
uninterrupted, and once with the worker executing the tool SIGKILLed the
moment the tool starts. The difference is what a lost worker costs a run;
the phases (from the run's history) show where it goes: noticing the loss
(heartbeat timeout + retry backoff), re-running the tool, and moving the next
workflow task off the dead worker's sticky queue.

    .venv/bin/python bench/recovery.py --trials 5

Timing numbers depend on the machine: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402

from agentor_temporal.testing import ScriptedModelServer  # noqa: E402
from agentor_temporal.workflows import policies  # noqa: E402

from helpers import (  # noqa: E402
    PROMPT,
    DevServerProcess,
    ledger_lines,
    spawn,
    stop_process,
    wait_line,
    wait_until,
    weather_agent,
)


@dataclass
class Trial:
    """One pair of runs: uninterrupted and killed mid-tool."""

    baseline: float
    crashed: float
    #: SIGKILL -> the tool's retry starts on the other worker (heartbeat
    #: timeout + retry backoff)
    detect: float
    #: the tool's retry start -> its completion
    rerun: float
    #: tool completed -> next workflow task started (the sticky-queue wait)
    sticky: float
    #: SIGKILL -> run completed
    kill_to_done: float

    @property
    def added(self) -> float:
        return self.crashed - self.baseline


async def _workers(
    tmp: Path, address: str, model: ScriptedModelServer, queue: str, ledger: Path, delay: float
) -> list[subprocess.Popen[str]]:
    env = {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_LEDGER": str(ledger),
        "TOOL_DELAY": str(delay),
    }
    procs = []
    for name in ("a", "b"):
        with open(tmp / f"worker-{queue}-{name}.log", "w") as log:
            procs.append(spawn(["worker"], env, stderr=log))
    for proc in procs:
        await asyncio.to_thread(wait_line, proc, "worker ready", 60)
    return procs


async def _run_once(
    client: Client, tmp: Path, address: str, model: ScriptedModelServer, delay: float, kill: bool
) -> tuple[float, float | None, str]:
    """One run on two fresh workers: (start->done, wall time of the kill or None, run id)."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    ledger = tmp / f"ledger-{queue}.txt"
    procs = await _workers(tmp, address, model, queue, ledger, delay)
    agent = weather_agent(
        base_url=model.base_url, task_queue=queue, temporal=client, embedded_worker=False
    )
    run_id = uuid.uuid4().hex
    try:
        started = time.monotonic()
        task = asyncio.create_task(agent.arun(PROMPT, run_id=run_id))
        killed_at: float | None = None
        if kill:
            lines = await asyncio.to_thread(
                wait_until, lambda: ledger_lines(ledger), "the tool to start", 60
            )
            # the worker running the tool (and, through eager dispatch, the
            # one holding the workflow on its sticky queue)
            pid = int(lines[0].split("pid=")[1].split()[0])
            os.kill(pid, signal.SIGKILL)
            killed_at = time.time()
        result = await asyncio.wait_for(task, 120)
        elapsed = time.monotonic() - started
        if result.status != "completed":
            raise RuntimeError(f"run {run_id} ended {result.status}: {result.error}")
        return elapsed, killed_at, run_id
    finally:
        for proc in procs:
            stop_process(proc)


async def _phases(client: Client, run_id: str) -> tuple[float, float, float, float]:
    """Server times of: the tool's retry start, its completion, the next task, the run's end."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    retry_started = completed = next_task = closed = None
    for event in history.events:
        when = event.event_time.ToDatetime().timestamp()
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            if event.activity_task_started_event_attributes.attempt > 1:
                retry_started = when
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if retry_started is not None and completed is None:
                completed = when
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            if completed is not None and next_task is None:
                next_task = when
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            closed = when
    if retry_started is None or completed is None or next_task is None or closed is None:
        raise RuntimeError(f"run {run_id}: no retried tool call in its history")
    return retry_started, completed, next_task, closed


async def bench(trials: int, delay: float) -> list[Trial]:
    """Run `trials` pairs of runs on a private dev server; print one line per pair."""
    results: list[Trial] = []
    with tempfile.TemporaryDirectory(prefix="agentor-bench-") as tmpdir:
        tmp = Path(tmpdir)
        server = DevServerProcess(tmp / "temporal.db", tmp / "server.log").start()
        model = ScriptedModelServer(latency=0.0).start()
        try:
            client = await Client.connect(server.address)
            for n in range(1, trials + 1):
                baseline, _, _ = await _run_once(client, tmp, server.address, model, delay, False)
                crashed, killed_at, run_id = await _run_once(
                    client, tmp, server.address, model, delay, True
                )
                assert killed_at is not None
                retry_started, completed, next_task, closed = await _phases(client, run_id)
                trial = Trial(
                    baseline=baseline,
                    crashed=crashed,
                    detect=retry_started - killed_at,
                    rerun=completed - retry_started,
                    sticky=next_task - completed,
                    kill_to_done=closed - killed_at,
                )
                results.append(trial)
                print(
                    f"{n:>5}  {baseline:13.2f}  {crashed:8.2f}  {trial.added:7.2f}  "
                    f"{trial.kill_to_done:10.2f}  {trial.detect:7.2f}  {trial.rerun:6.2f}  "
                    f"{trial.sticky:6.2f}",
                    flush=True,
                )
        finally:
            model.stop()
            server.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tool-delay", type=float, default=1.0, help="seconds the tool takes")
    args = parser.parse_args()
    print(
        f"heartbeat timeouts: model {policies.MODEL_HEARTBEAT_TIMEOUT.total_seconds():g}s, "
        f"tool {policies.TOOL_HEARTBEAT_TIMEOUT.total_seconds():g}s; sticky "
        f"{policies.STICKY_QUEUE_TIMEOUT.total_seconds():g}s; workflow task "
        f"{policies.WORKFLOW_TASK_TIMEOUT.total_seconds():g}s; tool {args.tool_delay:g}s",
        flush=True,
    )
    print(
        "trial  uninterrupted  killed   added    kill->done  detect  rerun   sticky  (seconds)",
        flush=True,
    )
    before = os.getloadavg()[0]
    trials = asyncio.run(bench(args.trials, args.tool_delay))
    added = [t.added for t in trials]
    # timing on a busy machine is noise on top of the timeouts: say how busy
    print(f"load average {before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(
        f"median added by a SIGKILL mid-tool: {statistics.median(added):.2f}s "
        f"(min {min(added):.2f}s, max {max(added):.2f}s, {len(added)} trials)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
