"""Streaming latency: from an event being recorded to a follower receiving it.

    python bench/stream_latency.py [--runs 30] [--latency 0.2]

Each run is started with `stream_chat` from this process; the agent runs on a
separate worker process. For every live event, latency = time the follower
received it - `workflow.now()` of the workflow task that recorded it (the
moment the workflow recorded the event; it becomes visible when that task
completes). Also reported: the first text delta's delay after the model
started streaming the final answer, measured against the scripted server's
send time.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from temporalio.common import WorkflowIDReusePolicy

from agentor_temporal._start import start_segment
from agentor_temporal.streaming import follow_timed
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.workflows.types import AgentRunInput

from _common import dev_server, machine, save, spawn_worker, summary, wait_ready
from weather_agent import weather


async def main(runs: int, latency: float) -> dict[str, Any]:
    env = await dev_server()
    address = env.client.service_client.config.target_host
    task_queue = f"bench-stream-{uuid.uuid4().hex[:6]}"
    by_type: dict[str, list[float]] = {}
    all_events: list[float] = []
    first_delta: list[float] = []
    with ScriptedModelServer(latency=latency) as model:
        worker = spawn_worker(address, task_queue, model.base_url)
        try:
            wait_ready(worker)
            weather.temporal = env.client
            weather.task_queue = task_queue
            for i in range(runs):
                run_id = uuid.uuid4().hex
                # the start stream_chat makes, then its follower with timings
                inp = AgentRunInput(
                    agent=weather.name, input="What is the weather in London?", stream_text=True
                )
                await start_segment(
                    env.client,
                    weather.definition,
                    task_queue,
                    run_id,
                    inp,
                    WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
                sent_final = None
                async for event, recorded in follow_timed(
                    env.client,
                    run_id,
                    text=True,
                    history_events=lambda s, r=run_id: weather._events(r, s),
                ):
                    now = time.time()
                    if event.type == "text_delta" and sent_final is None:
                        sent_final = now
                    if recorded is not None and i > 0:  # run 0 warms the worker up
                        delay = (now - recorded) * 1000
                        by_type.setdefault(event.type, []).append(delay)
                        all_events.append(delay)
                    if event.type == "generation" and event.turn == 2 and sent_final and i > 0:
                        started = event.started_at or sent_final
                        first_delta.append((sent_final - started - latency) * 1000)
        finally:
            worker.terminate()
            worker.wait(30)
    await env.shutdown()
    result = {
        "command": f"python bench/stream_latency.py --runs {runs} --latency {latency}",
        "machine": machine(),
        "event_delay_ms": summary(all_events),
        "event_delay_ms_by_type": {k: summary(v) for k, v in sorted(by_type.items())},
        "first_delta_after_model_ms": summary(first_delta),
    }
    return result


def report(result: dict[str, Any]) -> None:
    print(f"$ {result['command']}")
    overall = result["event_delay_ms"]
    print(
        f"event recorded -> follower received: median {overall['median']:.1f} ms, "
        f"p95 {overall['p95']:.1f} ms (n={overall['n']})"
    )
    for kind, stats in result["event_delay_ms_by_type"].items():
        print(f"  {kind:12s} median {stats['median']:7.1f} ms  p95 {stats['p95']:7.1f} ms")
    fd = result["first_delta_after_model_ms"]
    print(
        f"first text delta after the model's first chunk: median {fd['median']:.1f} ms, "
        f"p95 {fd['p95']:.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--latency", type=float, default=0.2, help="model latency, seconds")
    args = parser.parse_args()
    outcome = asyncio.run(main(args.runs, args.latency))
    report(outcome)
    print(f"saved {save('stream_latency', outcome)}")
