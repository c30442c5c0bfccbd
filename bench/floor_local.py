"""What fewer workflow tasks would buy: floor A against the same steps as local activities.

    python bench/floor_local.py [--runs 30] [--in-flight 100] [--total 400]

Floor A (`floor_workflow.BareThreeWorkflow`: 3 empty activities, 4 workflow
tasks) is the least any design with the integration's shape pays per run. This
measures, on the same dev server and worker, the engine's floor for two shapes
our contract rules out today: all 3 steps as local activities (1 workflow
task), and the 2 model calls local with the tool call an activity (2). It
answers "what would a contract change buy", not how fast our runs are: no
agent code runs here. Sequential latency (median of `--runs`) and throughput
with `--in-flight` runs at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.worker import Worker  # noqa: E402

from _common import dev_server  # noqa: E402
from floor_workflow import (  # noqa: E402
    BareModelLocalWorkflow,
    BareThreeLocalWorkflow,
    BareThreeWorkflow,
    empty_activity,
)

SHAPES: list[tuple[str, Any]] = [
    ("floor A: 3 activities, 4 workflow tasks", BareThreeWorkflow),
    ("3 local activities, 1 workflow task", BareThreeLocalWorkflow),
    ("models local, tool an activity: 2 tasks", BareModelLocalWorkflow),
]


async def main(runs: int, in_flight: int, total: int) -> None:
    env = await dev_server()
    client, queue = env.client, f"bench-local-{uuid.uuid4().hex[:6]}"
    workflows = [shape for _, shape in SHAPES]
    try:
        async with Worker(
            client, task_queue=queue, workflows=workflows, activities=[empty_activity]
        ):

            async def one(shape: Any) -> None:
                await client.execute_workflow(
                    shape.run, 1, id=f"local-{uuid.uuid4().hex}", task_queue=queue
                )

            for name, shape in SHAPES:
                for _ in range(5):  # warm up
                    await one(shape)
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    await one(shape)
                    times.append(1000 * (time.perf_counter() - started))
                left = list(range(total))

                async def lane(shape: Any = shape, left: list[int] = left) -> None:
                    while left:
                        left.pop()
                        await one(shape)

                started = time.perf_counter()
                await asyncio.gather(*(lane() for _ in range(in_flight)))
                rate = total / (time.perf_counter() - started)
                print(
                    f"{name:42s} latency median {statistics.median(times):6.1f} ms   "
                    f"{in_flight} in flight {rate:6.1f} runs/s   (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--total", type=int, default=400)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.in_flight, args.total))
