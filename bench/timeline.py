"""Where one run's time goes, read off its Temporal history.

    python bench/timeline.py [--scenario ours|peer|floor-a] [--runs 20]
                             [--latency 0] [--mirror] [--stock]

Runs sequential runs on a fresh in-process worker (as bench/run.py does) and,
for each, splits the time by phase using the history's own timestamps:

- dispatch: workflow task scheduled -> started (the server handing the task
  to the worker's poll; this is where the dev server's transfer-queue rate
  limit shows, see docs/benchmarks.md),
- worker: workflow task started -> completed (workflow code, local
  activities, the completion's round trip),
- activities: activity scheduled -> completed (model and tool calls),
- client: start call -> first event, and last event -> the caller has its result.

`--stock` uses the dev server as shipped instead of our launcher's settings.
The last run's events are printed with their offsets.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from agentor_temporal.testing import ScriptedModelServer

from _common import dev_server
from peer import Peer
from scenarios import FloorA, Ours, Scenario

SCHEDULED = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
ACT_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
ACT_DONE = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED


def _ms(event: HistoryEvent) -> float:
    return float(event.event_time.ToMicroseconds()) / 1000


def phases(events: list[HistoryEvent], started: float, ended: float) -> dict[str, float]:
    """Milliseconds per phase of one run (see the module docstring)."""
    out = {"dispatch": 0.0, "worker": 0.0, "activities": 0.0}
    last: dict[int, float] = {}
    for event in events:
        kind, at = event.event_type, _ms(event)
        if kind == STARTED and SCHEDULED in last:
            out["dispatch"] += at - last.pop(SCHEDULED)
        elif kind == COMPLETED and STARTED in last:
            out["worker"] += at - last.pop(STARTED)
        elif kind == ACT_DONE and ACT_SCHEDULED in last:
            out["activities"] += at - last.pop(ACT_SCHEDULED)
        last[kind] = at
    out["client"] = (_ms(events[0]) - started * 1000) + (ended * 1000 - _ms(events[-1]))
    out["total"] = (ended - started) * 1000
    return out


def make(name: str, env: Any, model_url: str, mirror: bool) -> Scenario:
    address = env.client.service_client.config.target_host
    if name == "peer":
        return Peer(address, model_url)
    if name == "floor-a":
        return FloorA(env.client)
    return Ours(env.client, model_url, mirror=mirror, local=name == "ours-local")


async def main(scenario: str, runs: int, latency: float, mirror: bool, stock: bool) -> None:
    env = await dev_server(stock=stock)
    try:
        with ScriptedModelServer(latency=latency) as model:
            sc = make(scenario, env, model.base_url, mirror)
            async with sc:
                client = getattr(sc, "client", env.client)
                spans = []
                for i in range(runs):
                    started = time.time()
                    await sc.one(i)
                    spans.append((started, time.time()))
                found = [w async for w in client.list_workflows()]
                found.sort(key=lambda w: w.start_time)
                rows = []
                print(" run  total dispatch  worker activities client  (ms)")
                history = None
                for n, ((started, ended), wf) in enumerate(zip(spans, found, strict=False), 1):
                    history = await client.get_workflow_handle(wf.id).fetch_history()
                    row = phases(list(history.events), started, ended)
                    rows.append(row)
                    print(
                        f"{n:4d} {row['total']:6.0f} {row['dispatch']:8.0f} {row['worker']:7.0f} "
                        f"{row['activities']:10.0f} {row['client']:6.0f}"
                    )
                later = rows[len(rows) // 2 :] or rows
                print(
                    "median of the later half: "
                    + ", ".join(
                        f"{k} {statistics.median(r[k] for r in later):.0f}" for k in later[0]
                    )
                )
                if history is not None:
                    first = _ms(history.events[0])
                    for event in history.events:
                        name = EventType.Name(event.event_type)[len("EVENT_TYPE_") :]
                        print(f"  {_ms(event) - first:8.1f}  {name}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--scenario", choices=["ours", "ours-local", "peer", "floor-a"], default="ours"
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--mirror", action="store_true", help="with the FileStore mirror")
    parser.add_argument("--stock", action="store_true", help="the dev server as shipped")
    args = parser.parse_args()
    asyncio.run(main(args.scenario, args.runs, args.latency, args.mirror, args.stock))
