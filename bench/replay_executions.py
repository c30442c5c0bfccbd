"""How long a worker without a long run in its cache takes to replay the run's executions.

A worker that does not hold a run (a restart, an eviction under load) replays
the execution's whole history in the one workflow task it takes, within the
run's workflow task timeout (5 s). A long run's execution is as long as its
continue-as-new budget lets it grow: Temporal's suggestion (4,096 events by
default) or, on a server that suggests later or never, ours
(`policies.REPLAYABLE_EVENTS_BUDGET` from behaviour level 28, before it
`HISTORY_EVENTS_BUDGET`, 20,000). This records one run of `--turns` turns of
one small tool call on a dev server whose suggestion never comes, with the
events budget `--budget`, then replays each execution `--reps` times here and
reports its events, workflow tasks, replay wall time and CPU.

    .venv/bin/python bench/replay_executions.py --turns 1500 --budget 3000
    .venv/bin/python bench/replay_executions.py --turns 4000 --budget 20000  # before level 28
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from late_results import executions, replayer
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from agentor_temporal.connection import dev_server_args, temporal_binary
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from _common import machine, save
from helpers import chunk_reader, chunk_tool, coder

#: the server's own continue-as-new suggestion out of the way: only the run's budgets apply
NO_SUGGESTION = [
    "--dynamic-config-value",
    "limit.historyCount.suggestContinueAsNew=1000000",
    "--dynamic-config-value",
    "limit.historySize.suggestContinueAsNew=100000000",
]


async def main(turns: int, budget: int, reps: int) -> dict[str, Any]:
    policies.REPLAYABLE_EVENTS_BUDGET = budget
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        ui=False,
        dev_server_extra_args=["--log-level", "error", *dev_server_args(), *NO_SUGGESTION],
    )
    out: dict[str, Any] = {"machine": machine(), "turns": turns, "budget": budget}
    try:
        client = env.client
        queue = f"replay-executions-{uuid.uuid4().hex[:6]}"
        ledger = os.path.join(tempfile.mkdtemp(), "ledger")
        with ScriptedModelServer(chunk_reader(turns), keep_requests=1) as model:
            agent = coder(model, client, queue, tools=[chunk_tool(ledger, 10)], store=None)
            async with build_worker(client, [agent], task_queue=queue):
                started = time.monotonic()
                result = await agent.arun("Read.", max_turns=turns + 1)
        print(f"run {result.status} in {time.monotonic() - started:.0f} s", flush=True)
        histories = await executions(client, result.run_id)
    finally:
        await env.shutdown()
    out["executions"] = []
    for history in histories:
        tasks = sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        )
        walls, cpus = [], []
        for _ in range(reps):
            wall, cpu = time.monotonic(), time.process_time()
            replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
            walls.append(time.monotonic() - wall)
            cpus.append(time.process_time() - cpu)
            assert replayed.replay_failure is None, replayed.replay_failure
        row = {
            "events": len(history.events),
            "tasks": tasks,
            "replay_wall_s": [round(w, 2) for w in walls],
            "replay_cpu_s": [round(c, 2) for c in cpus],
            "load": os.getloadavg()[0],
        }
        out["executions"].append(row)
        print(
            f"{row['events']:6,} events {tasks:5,} tasks: replay median "
            f"{statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} s CPU "
            f"(load {row['load']:.1f})",
            flush=True,
        )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1500)
    parser.add_argument("--budget", type=int, default=policies.REPLAYABLE_EVENTS_BUDGET)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(
        f"saved {save('replay_executions', asyncio.run(main(args.turns, args.budget, args.reps)))}"
    )
