"""What one model request costs the worker's CPU: the openai client's `create()` against ours.

    python bench/openai_overhead.py [--requests 400] [--rounds 3]

`activities.model.create` sends a request's body through `client.post` as
bytes and reads the reply's JSON itself; the openai client's
`chat.completions.create` first walks the body through its type-driven
transform and builds the reply into pydantic models. Both go through the
same `AsyncOpenAI` client (httpx underneath) to the scripted model, which
runs in its own process so that only the client's side is counted. Measured
one request at a time and with 100 in flight, in alternating rounds; this
process's CPU time per request, and the ratio ours / the client's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openai import AsyncOpenAI  # noqa: E402

from agentor_temporal.activities.model import create, prepared_request  # noqa: E402
from agentor_temporal.workflows.activity_types import GenerateInput  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You are a helpful weather assistant."},
    {"role": "user", "content": "What is the weather in London?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


async def cpu_per_request(
    call: Callable[[], Awaitable[Any]], requests: int, in_flight: int
) -> float:
    """This process's CPU per request, in ms, with `in_flight` requests at once."""
    for _ in range(20):
        await call()
    left = [requests]

    async def lane() -> None:
        while left[0] > 0:
            left[0] -= 1
            await call()

    start = time.process_time()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return 1000 * (time.process_time() - start) / requests


async def main(requests: int, rounds: int) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "agentor_temporal.testing", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline() if server.stdout else ""
        base_url = line.split(" at ")[1].split()[0]
        client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        inp = GenerateInput(
            run_id="r", agent="A", model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS
        )
        request, _ = prepared_request(inp, MESSAGES)
        calls = {
            "the client's create()": lambda: client.chat.completions.create(**request),
            "ours (activities.model.create)": lambda: create(client, request),
        }
        for in_flight in (1, 100):
            results: dict[str, list[float]] = {name: [] for name in calls}
            for round_ in range(rounds):
                order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
                for name in order:
                    results[name].append(await cpu_per_request(calls[name], requests, in_flight))
            theirs, ours = (statistics.median(results[name]) for name in calls)
            for name in calls:
                runs = ", ".join(f"{v:.2f}" for v in results[name])
                print(
                    f"{in_flight:3d} in flight  {name:32s} {statistics.median(results[name]):5.2f} "
                    f"ms CPU per request (rounds: {runs})"
                )
            print(
                f"{in_flight:3d} in flight  ours / the client's: {ours / theirs:.2f}x", flush=True
            )
        await client.close()
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
