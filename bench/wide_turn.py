"""A turn of the most calls a reply may hold, each waiting for a person: the workflow's CPU.

The workflow code of one task must yield within the SDK's 2 s deadlock
limit, or the task fails and is retried, the same work each time; on a
loaded worker a wide turn can fail every retry. This runs one such turn
(`policies.MAX_CALLS_PER_REPLY` calls of a tool that needs approval, the
approvals left to expire), then replays its history `--reps` times in this
process and reports the replay's time: the workflow code's own work for the
whole run, without the server or the activities.

    .venv/bin/python bench/wide_turn.py --reps 5

Timing numbers depend on the machine: run it on a quiet one, and compare
builds by running this script from each checkout in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporalio.worker import Replayer

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import AgentRunWorkflow, policies

from _common import dev_server, machine, save
from helpers import weather_agent


@function_tool(requires_approval=True, approval_timeout=4.0)
def release(n: int, note: str) -> str:
    """Release one item (a person approves each).

    Args:
        n: Which item.
        note: Why.
    """
    return f"released {n}"


async def main(reps: int) -> None:
    count = policies.MAX_CALLS_PER_REPLY
    note = "n" * (policies.MAX_REPLY_BYTES // count - 150)
    script: list[Step] = [
        [CallTool("release", {"n": n, "note": note}, id=f"call_{n}") for n in range(count)],
        Reply("None released."),
    ]
    env = await dev_server()
    try:
        queue = f"wide-{uuid.uuid4().hex[:8]}"
        with ScriptedModelServer(script) as model:
            agent = weather_agent(
                base_url=model.base_url,
                task_queue=queue,
                temporal=env.client,
                tools=[release],
                embedded_worker=False,
            )
            async with build_worker(env.client, [agent], task_queue=queue):
                started = time.perf_counter()
                paused = await agent.arun("Release them all.")
                handle = env.client.get_workflow_handle(paused.run_id)
                outcome = await handle.result()
                wall = time.perf_counter() - started
        assert outcome["status"] == "completed", outcome
        history = await handle.fetch_history()
        replayer = Replayer(workflows=[AgentRunWorkflow])
        times = []
        for _ in range(reps):
            began = time.process_time()
            await replayer.replay_workflow(history)
            times.append(time.process_time() - began)
    finally:
        await env.shutdown()
    result = {
        "calls": count,
        "history_events": len(history.events),
        "run_wall_s": round(wall, 2),
        "replay_cpu_s": [round(t, 3) for t in times],
        "replay_cpu_median_s": round(statistics.median(times), 3),
        "machine": machine(),
    }
    print(
        f"{count} calls waiting for a person, {len(history.events)} history events: "
        f"replay CPU median {result['replay_cpu_median_s']} s over {reps} "
        f"({', '.join(str(t) for t in result['replay_cpu_s'])}); the run itself took {wall:.1f} s"
    )
    print(f"saved {save('wide_turn', result)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="replays to time (default 5)")
    asyncio.run(main(parser.parse_args().reps))
