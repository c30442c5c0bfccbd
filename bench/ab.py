"""Throughput, latency and CPU per run, each measured on a fresh dev server.

    python bench/ab.py [--systems peer,ours,local] [--rounds 2] [--in-flight 100] [--runs 300]

`bench/run.py` measures every system on one dev server, in two passes
(forward, then reverse) because the server slows as finished runs pile up.
This starts a new in-memory server (our launcher's settings) for every
system and round instead, so no system inherits another's runs, and reads
the CPU each run costs: this process (client, worker and model server) and
the dev server's own (from /proc). Systems: `peer` (Temporal's OpenAI
Agents integration), `ours` (mirror off), `mirror` (ours with the FileStore
mirror on), `local` (ours with local model calls). Rounds alternate the
order. Ratios are against the first system.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time
from typing import Any

from run import latency_times, throughput

from agentor_temporal.testing import ScriptedModelServer

from _common import dev_server
from peer import Peer
from scenarios import Ours, Scenario


def server_cpu_s() -> float:
    """CPU seconds the running dev servers have used."""
    total = 0.0
    found = subprocess.run(
        ["pgrep", "-f", "server start-dev"], capture_output=True, text=True, check=False
    )
    for pid in found.stdout.split():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def build(system: str, env: Any, model_url: str) -> Scenario:
    if system == "peer":
        return Peer(env.client.service_client.config.target_host, model_url)
    return Ours(env.client, model_url, mirror=system == "mirror", local=system == "local")


async def main(systems: list[str], rounds: int, level: int, total: int) -> None:
    rates: dict[str, list[float]] = {s: [] for s in systems}
    latencies: dict[str, list[float]] = {s: [] for s in systems}
    python: dict[str, list[float]] = {s: [] for s in systems}
    server: dict[str, list[float]] = {s: [] for s in systems}
    with ScriptedModelServer(latency=0) as model:
        for r in range(rounds):
            for system in systems if r % 2 == 0 else systems[::-1]:
                env = await dev_server()
                try:
                    async with build(system, env, model.base_url) as scenario:
                        await throughput(scenario, 3, 6)  # warm up
                        cpu, srv = time.process_time(), server_cpu_s()
                        rates[system].append(await throughput(scenario, level, total))
                        python[system].append((time.process_time() - cpu) / total * 1000)
                        server[system].append((server_cpu_s() - srv) / total * 1000)
                        latencies[system] += await latency_times(scenario, 20, 2)
                finally:
                    await env.shutdown()
    base_rate = statistics.mean(rates[systems[0]])
    base_latency = statistics.median(latencies[systems[0]])
    print(f"{'system':8s} {'runs/s':>7s} {'latency':>8s} {'Python':>7s} {'server':>7s}  ratios")
    for system in systems:
        rate, latency = statistics.mean(rates[system]), statistics.median(latencies[system])
        print(
            f"{system:8s} {rate:7.2f} {latency:6.1f}ms {statistics.mean(python[system]):5.1f}ms "
            f"{statistics.mean(server[system]):5.1f}ms  throughput {rate / base_rate:.2f}x, "
            f"latency {latency / base_latency:.2f}x  (passes: "
            + ", ".join(f"{x:.1f}" for x in rates[system])
            + " runs/s)",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--systems", default="peer,ours,local")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.systems.split(","), args.rounds, args.in_flight, args.runs))
