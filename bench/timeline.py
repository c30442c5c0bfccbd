"""Where one run's time goes, read off its Temporal history.

    python bench/timeline.py [--runs 20] [--latency 0.2] [--mirror]

Runs the benchmark agent on an in-process worker (as bench/run.py's "ours"),
then prints the median total, the time inside the workflow, and one run's
history events with their offsets in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from temporalio.api.enums.v1 import EventType

from agentor_temporal.testing import ScriptedModelServer

from _common import dev_server
from scenarios import Ours


async def main(runs: int, latency: float, mirror: bool) -> None:
    env = await dev_server()
    client = env.client
    with ScriptedModelServer(latency=latency) as model:
        async with Ours(client, model.base_url, mirror=mirror) as ours:
            for i in range(3):
                await ours.one(i)
            totals, inside, after = [], [], []
            run_id = ""
            for _ in range(runs):
                started = time.time()
                result = await ours.agent.arun("What is the weather in London?")
                ended = time.time()
                run_id = result.run_id or ""
                history = await client.get_workflow_handle(run_id).fetch_history()
                first = history.events[0].event_time.ToMicroseconds() / 1e6
                last = history.events[-1].event_time.ToMicroseconds() / 1e6
                totals.append((ended - started) * 1000)
                inside.append((last - first) * 1000)
                after.append((ended - last) * 1000)
            print(
                f"median of {runs}: total {statistics.median(totals):.1f} ms, inside the "
                f"workflow {statistics.median(inside):.1f} ms, close to return "
                f"{statistics.median(after):.1f} ms"
            )
            history = await client.get_workflow_handle(run_id).fetch_history()
            start = history.events[0].event_time.ToMicroseconds() / 1000
            for event in history.events:
                offset = event.event_time.ToMicroseconds() / 1000 - start
                print(f"  {offset:8.1f}  {EventType.Name(event.event_type)[len('EVENT_TYPE_') :]}")
    await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--mirror", action="store_true", help="with the FileStore mirror")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.latency, args.mirror))
