"""Fork cost: how long a fork takes, and how small its input stays, against the parent's size.

Starts its own dev server (in memory) and a scripted model, runs a parent of
`--turns` tool turns (one tool call per turn, then an answer), then forks it
`--reps` times without input (a snapshot: no model request) and with input
(one model request). A fork's first segment carries a reference to the
parent's events plus the replayed conversation, so its input grows with the
conversation, not with the log (whose generations each repeat the request);
past 32 kB the conversation goes by reference too (only the messages after
a parent event it names), so the input stays small however long the parent.
`--history-budget` makes the parent continue as new (AGENTOR_HISTORY_BUDGET).

    .venv/bin/python bench/fork.py --turns 50 --reps 10
    .venv/bin/python bench/fork.py --turns 200 --reps 3
    .venv/bin/python bench/fork.py --turns 200 --reps 3 --history-budget 100000

Timing numbers depend on the machine: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from temporalio.testing import WorkflowEnvironment

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.connection import temporal_binary
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer, Step

from helpers import PROMPT, weather_agent


def _script(turns: int) -> Any:
    def step(request: dict[str, Any]) -> Step:
        answered = sum(1 for m in request["messages"] if m.get("role") == "tool")
        return (
            CallTool("get_weather", {"city": f"City{answered}"})
            if answered < turns
            else Reply("done")
        )

    return step


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.0f} ms"


async def main(turns: int, reps: int, history_budget: int | None) -> None:
    if history_budget:
        os.environ["AGENTOR_HISTORY_BUDGET"] = str(history_budget)
    attributes = {
        "AgentName": "Keyword",
        "AgentModel": "Keyword",
        "AgentStatus": "Keyword",
        "AgentTokens": "Int",
        "ForkedFrom": "Keyword",
    }
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=[
            *(
                arg
                for name, kind in attributes.items()
                for arg in ("--search-attribute", f"{name}={kind}")
            ),
            "--log-level",
            "error",
        ],
        ui=False,
    )
    try:
        with ScriptedModelServer(_script(turns)) as model, tempfile.TemporaryDirectory() as runs:
            agent = weather_agent(
                base_url=model.base_url,
                task_queue="bench-fork",
                temporal=env.client,
                store=FileStore(runs),
                max_turns=turns + 5,
            )
            parent = await agent.arun(PROMPT)
            assert parent.run_id is not None and parent.status == "completed"
            log = sum(len(e.to_json()) + 1 for e in parent.events)
            executions = len(await TemporalStore(env.client).segments(parent.run_id))
            snapshots, continued = [], []
            for _ in range(reps):
                started = time.perf_counter()
                await agent.afork(parent.run_id)
                snapshots.append(time.perf_counter() - started)
                started = time.perf_counter()
                fork = await agent.afork(parent.run_id, "And once more?")
                continued.append(time.perf_counter() - started)
            segments = await TemporalStore(env.client).segments(str(fork.run_id))
            carried = len(json.dumps(segments[0].input, separators=(",", ":")))
            by_reference = "conversation" in segments[0].input
            mirrored = FileStore(runs).load(str(fork.run_id))
            assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in fork.events]
        print(
            f"parent: {turns + 1} turns, {len(parent.events)} events, JSONL {log / 1e3:.0f} kB, "
            f"{executions} execution(s); the fork's input: {carried / 1e3:.1f} kB"
            f"{' (conversation by reference)' if by_reference else ''}"
        )
        print(
            f"snapshot fork (no model request): median {_ms(snapshots)}; "
            f"fork with input (one model request): median {_ms(continued)} ({reps} each)"
        )
    finally:
        from agentor_temporal._runtime import Runtime

        if Runtime._instance is not None:
            await asyncio.to_thread(Runtime._instance.close)
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50, help="tool turns of the parent")
    parser.add_argument("--reps", type=int, default=10, help="forks of each kind")
    parser.add_argument(
        "--history-budget", type=int, default=None, help="history bytes before continue-as-new"
    )
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.reps, args.history_budget))
