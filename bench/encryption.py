"""What payload encryption costs: the codec alone, and a whole run with and without it.

    python bench/encryption.py [--runs 30]

The codec is timed on payloads the size of a short prompt, a tool result and
a long conversation. Runs are the seed's weather run (one tool call, two
model calls, scripted model at 0 ms) on an isolated dev server with an
embedded worker, alternating plain and encrypted so load drift hits both
alike. Writes `bench/results/encryption.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from agentor_temporal.codec import encrypted_data_converter, new_key, parse_keys  # noqa: E402
from agentor_temporal.connection import connect, temporal_binary  # noqa: E402
from agentor_temporal.testing import ScriptedModelServer  # noqa: E402

from _common import machine, save, summary  # noqa: E402
from helpers import PROMPT, weather_agent  # noqa: E402

SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}


async def codec_costs() -> dict[str, Any]:
    """Microseconds to encode and decode one payload of each size (median of 200)."""
    converter = encrypted_data_converter(parse_keys(f"A:{new_key()}"))
    costs: dict[str, Any] = {}
    for label, size in SIZES.items():
        value = {"content": "x" * size}
        encode, decode = [], []
        for _ in range(200):
            start = time.perf_counter()
            payloads = await converter.encode([value])
            encode.append((time.perf_counter() - start) * 1e6)
            start = time.perf_counter()
            await converter.decode(payloads)
            decode.append((time.perf_counter() - start) * 1e6)
        plain = encrypted_data_converter(None)
        base = await plain.encode([value])
        costs[label] = {
            "encode_us": summary(encode)["median"],
            "decode_us": summary(decode)["median"],
            "bytes_added": len(payloads[0].SerializeToString()) - len(base[0].SerializeToString()),
        }
    return costs


async def run_latencies(runs: int) -> dict[str, Any]:
    """Seed-run latency in ms, plain and encrypted, alternating."""
    keys = parse_keys(f"A:{new_key()}")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=["--log-level", "error"],
    )
    timings: dict[str, list[float]] = {"plain": [], "encrypted": []}
    try:
        address = env.client.service_client.config.target_host
        with ScriptedModelServer() as model:
            agents = {
                "plain": weather_agent(
                    base_url=model.base_url,
                    task_queue=f"plain-{uuid.uuid4().hex[:6]}",
                    temporal=await connect(address),
                ),
                "encrypted": weather_agent(
                    base_url=model.base_url,
                    task_queue=f"enc-{uuid.uuid4().hex[:6]}",
                    temporal=await connect(address, encryption_keys=keys),
                    encryption_keys=keys,
                ),
            }
            for agent in agents.values():  # warm up: workers, clients, imports
                await agent.arun(PROMPT)
            for _ in range(runs):
                for name, agent in agents.items():
                    start = time.perf_counter()
                    result = await agent.arun(PROMPT)
                    timings[name].append((time.perf_counter() - start) * 1e3)
                    assert result.status == "completed"
    finally:
        from agentor_temporal._runtime import Runtime

        if Runtime._instance is not None:
            await asyncio.to_thread(Runtime._instance.close)
        await env.shutdown()
    return {name: summary(values) for name, values in timings.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    data = {
        "machine": machine(),
        "codec": await codec_costs(),
        "run_ms": await run_latencies(args.runs),
    }
    path = save("encryption", data)
    for label, cost in data["codec"].items():
        print(
            f"codec {label:>6}: encode {cost['encode_us']:8.1f} us, "
            f"decode {cost['decode_us']:8.1f} us, +{cost['bytes_added']} bytes"
        )
    for name, stats in data["run_ms"].items():
        print(
            f"run {name:>9}: median {stats['median']:.1f} ms, p95 {stats['p95']:.1f} ms "
            f"(n={stats['n']})"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    import os

    os._exit(0)
