"""How long a worker without a run in its cache takes to replay a waiting run's signals.

A run waiting for a person cannot continue as new, and every signal sent to it
(a `decide_signal`, junk) mostly costs a workflow task of its own. A worker that
does not hold the run (a restart, an eviction) replays the whole history in the
one workflow task it takes, within the run's workflow task timeout (5 s). This
records such a run (`--signals` sent one at a time to a run waiting for
approval) and, beside it, a bare workflow that only counts the same signals
(no Agentor code: the SDK's own floor), then replays each `--reps` times here
and reports the replay's wall time and CPU, and the CPU of the workflow thread
(where the workflow code runs; the rest is the SDK's core and its bridge).

    .venv/bin/python bench/replay_signals.py --signals 5000 9000 --reps 3

Measured on 2 shared cores under load (load average 5-7), the SDK's floor alone
takes ~4.7-5.1 s for 5,000 signals (2,745 tasks) and ~12.5-15 s for 9,000 (4,935
tasks: each task's cost grows with the history), and the run's own workflow code
about 2% more: past the 5 s a fresh worker has, below `policies.PAUSED_SIGNALS`.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.common import RawValue
from temporalio.worker import Replayer, Worker

from agentor_temporal import _start
from agentor_temporal.plugin import AgentorPlugin
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from _common import dev_server, machine, save
from helpers import payer

#: the recorded runs' workflow task timeout: recording in the same process as the
#: worker under load, one slow task (past 5 s) had the run evicted, and every
#: replay after it timed out too (the very wedge measured here), so the
#: recording gets time; the replays below are timed offline, by no deadline
RECORDING_TASK_TIMEOUT = timedelta(seconds=60)


@workflow.defn(name="BareSignals", sandboxed=False)
class BareSignals:
    """Waits until told to finish, counting every signal: the SDK's cost per task, no more."""

    def __init__(self) -> None:
        self.count = 0
        self.finished = False
        workflow.set_dynamic_signal_handler(self._signal)

    def _signal(self, name: str, args: Sequence[RawValue]) -> None:
        self.count += 1
        self.finished = self.finished or name == "finish"

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.finished)
        return self.count


class TimedExecutor(concurrent.futures.ThreadPoolExecutor):
    """The workflow thread's pool, adding up the CPU each activation takes there."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.cpu = 0.0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        def timed() -> Any:
            began = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu += time.thread_time() - began

        return super().submit(timed)


async def waiting_run(client: Client, signals: int, ledger: str) -> WorkflowHistory:
    """A run waiting for approval that `signals` junk signals reached, one at a time."""
    queue = f"replay-{uuid.uuid4().hex[:8]}"
    _start.WORKFLOW_TASK_TIMEOUT = RECORDING_TASK_TIMEOUT
    pay = CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay")
    with ScriptedModelServer([[pay], Reply("Paid.")]) as model:
        agent = payer(model, client, queue, ledger)
        async with build_worker(client, [agent], task_queue=queue):
            paused = await agent.arun("Pay bob.")
            assert paused.status == "awaiting_approval", paused
            handle = client.get_workflow_handle(paused.run_id)
            for n in range(signals):
                await handle.signal("nudge", n)
            await handle.query("state")  # every signal taken
    return await handle.fetch_history()


async def bare_run(client: Client, signals: int) -> WorkflowHistory:
    """`BareSignals` reached by the same signals, the same way."""
    queue = f"bare-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[BareSignals]):
        handle = await client.start_workflow(
            BareSignals.run,
            id=f"bare-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            task_timeout=RECORDING_TASK_TIMEOUT,
        )
        for n in range(signals):
            await handle.signal("nudge", n)
        await handle.query("__stack_trace")  # every signal taken
    return await handle.fetch_history()


async def replay(history: WorkflowHistory, reps: int, bare: bool) -> dict[str, Any]:
    """Replay `history` `reps` times (after one warm-up) on a fresh replayer each time."""
    walls, cpus, threads = [], [], []
    for rep in range(reps + 1):
        executor = TimedExecutor()
        replayer = Replayer(
            workflows=[BareSignals] if bare else [],
            plugins=[] if bare else [AgentorPlugin()],
            workflow_task_executor=executor,
        )
        began, cpu = time.perf_counter(), time.process_time()
        await replayer.replay_workflow(history)
        if rep:  # the first warms imports and caches
            walls.append(time.perf_counter() - began)
            cpus.append(time.process_time() - cpu)
            threads.append(executor.cpu)
        executor.shutdown()
    tasks = sum(
        1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    wall = statistics.median(walls)
    return {
        "events": len(history.events),
        "workflow_tasks": tasks,
        "replay_wall_s": [round(w, 2) for w in walls],
        "replay_cpu_s": [round(c, 2) for c in cpus],
        "workflow_thread_cpu_s": [round(t, 2) for t in threads],
        "ms_per_task": round(1000 * wall / max(tasks, 1), 2),
    }


async def main(counts: list[int], reps: int) -> None:
    env = await dev_server()
    results: dict[str, Any] = {"machine": machine()}
    try:
        for signals in counts:
            ledger = str(Path(f"/tmp/replay-signals-{uuid.uuid4().hex[:8]}.ledger"))
            ours = await replay(await waiting_run(env.client, signals, ledger), reps, False)
            bare = await replay(await bare_run(env.client, signals), reps, True)
            results[str(signals)] = {"waiting_run": ours, "bare_workflow": bare}
            for name, row in (("waiting run", ours), ("bare workflow", bare)):
                print(
                    f"{signals:,} signals, {name}: {row['workflow_tasks']:,} tasks, "
                    f"{row['events']:,} events; replay wall {row['replay_wall_s']} s, "
                    f"CPU {row['replay_cpu_s']} s (workflow thread "
                    f"{row['workflow_thread_cpu_s']} s), {row['ms_per_task']} ms a task"
                )
    finally:
        await env.shutdown()
    print(f"saved {save('replay_signals', results)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=int, nargs="+", default=[5000, 9000])
    parser.add_argument("--reps", type=int, default=3, help="replays to time (default 3)")
    options = parser.parse_args()
    asyncio.run(main(options.signals, options.reps))
