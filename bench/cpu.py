"""CPU per run: ours against Temporal's OpenAI Agents integration, sequential runs.

    python bench/cpu.py [--runs 40] [--rounds 2]

Throughput at model latency 0 is CPU on a shared machine, so this splits
what one run costs: this process (client, worker and the scripted model, as
each peer's quickstart runs them) and the dev server, read from `/proc`
around `--runs` sequential runs of each system, in `--rounds` alternating
rounds (the machine's noise shows as the spread between rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentor_temporal.testing import ScriptedModelServer  # noqa: E402

from _common import dev_server  # noqa: E402
from peer import Peer  # noqa: E402
from scenarios import Ours, Scenario  # noqa: E402


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's direct children."""
    total, me, tick = 0.0, os.getpid(), os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == me:
            total += (int(stat[11]) + int(stat[12])) / tick
    return total


async def measure(scenario: Scenario, runs: int) -> tuple[float, float, float]:
    """(this process's CPU, the server's CPU, wall time) per run, in ms."""
    async with scenario:
        for i in range(5):  # warm up
            await scenario.one(i)
        cpu, server, wall = time.process_time(), children_cpu(), time.perf_counter()
        for i in range(runs):
            await scenario.one(1000 + i)
        return (
            1000 * (time.process_time() - cpu) / runs,
            1000 * (children_cpu() - server) / runs,
            1000 * (time.perf_counter() - wall) / runs,
        )


async def main(runs: int, rounds: int) -> None:
    env = await dev_server()
    address = env.client.service_client.config.target_host
    try:
        with ScriptedModelServer() as model:
            for round_ in range(1, rounds + 1):
                for scenario in (
                    Peer(address, model.base_url),
                    Ours(env.client, model.base_url, mirror=False),
                    Ours(env.client, model.base_url, mirror=True),
                ):
                    python, server, wall = await measure(scenario, runs)
                    print(
                        f"round {round_}  {scenario.name:36s} python {python:5.1f} ms/run  "
                        f"server {server:5.1f} ms/run  wall {wall:6.1f} ms/run  "
                        f"(load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.rounds))
