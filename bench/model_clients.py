"""What a worker pays to make its agents' model clients: CPU and memory.

    python bench/model_clients.py [--agents 20]

A worker makes one openai client per agent endpoint (and event loop) when it
starts (`AgentRegistry.open_clients`). Each client's HTTP pool loaded the
system's trust store anew; now the process shares one TLS context
(`activities/_tls.py`). Prints the CPU time and resident memory that making
the clients for `--agents` agents on distinct endpoints added, openai and the
rest imported beforehand so only the clients are counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import openai  # noqa: F401 - imported before the measure, as a worker has it

from agentor_temporal.activities import AgentDefinition, AgentRegistry


def rss_mib() -> float:
    """This process's resident memory, in MiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def measure(agents: int) -> str:
    definitions = [
        AgentDefinition(
            name=f"agent-{i}",
            model="m",
            tools=[],
            api_key="sk-bench",
            base_url=f"https://endpoint-{i}.example/v1",
        )
        for i in range(agents)
    ]
    registry = AgentRegistry(definitions)
    before, cpu = rss_mib(), time.process_time()
    made = registry.open_clients()
    spent = (time.process_time() - cpu) * 1000
    return f"{made} clients: {spent:.0f} ms of CPU, resident memory +{rss_mib() - before:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20, help="agents, each its own endpoint")
    print(asyncio.run(measure(parser.parse_args().agents)))


if __name__ == "__main__":
    main()
