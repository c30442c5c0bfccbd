"""The benchmark scenarios: two floors and ours, the same agent in each.

- Floor A, the bare engine: a workflow of 3 empty activities, same server.
- Floor B, no durability: the same agent loop (the same model request and
  tool code) run in-process, with no Temporal and no store.
- Ours: the `AgentRun` workflow through the `Agentor` facade, with the
  FileStore mirror off and on.

Every scenario runs in this process with its worker in this process too, so
the floors and ours pay the same client/worker costs on the same cores.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from agentor_temporal import Agentor, FileStore
from agentor_temporal.activities import AgentDefinition, AgentRegistry
from agentor_temporal.activities.model import generate
from agentor_temporal.activities.tools import call_tool
from agentor_temporal.store.replay import assistant_message, initial_messages
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows.activity_types import CallToolInput, GenerateInput

from floor_workflow import BareThreeWorkflow, empty_activity
from weather_agent import get_weather

PROMPT = "What is the weather in London?"
INSTRUCTIONS = "You are a helpful weather assistant."


Runner = Callable[[int], Awaitable[Any]]


class Scenario:
    """Something that can run one agent run (or its floor) given an index."""

    name: str

    async def __aenter__(self) -> Scenario:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def one(self, i: int) -> None:
        raise NotImplementedError


def worker_options() -> dict[str, Any]:
    """Floor A's worker sizing: the fixed sizes of `build_worker`'s policies."""
    from agentor_temporal.workflows.policies import (
        MAX_CACHED_WORKFLOWS,
        MAX_CONCURRENT_ACTIVITIES,
        MAX_CONCURRENT_LOCAL_ACTIVITIES,
    )

    return {
        "max_concurrent_activities": MAX_CONCURRENT_ACTIVITIES,
        "max_concurrent_local_activities": MAX_CONCURRENT_LOCAL_ACTIVITIES,
        "max_cached_workflows": MAX_CACHED_WORKFLOWS,
    }


class FloorA(Scenario):
    name = "floor A (bare engine)"

    def __init__(self, client: Client) -> None:
        self.client = client
        self.queue = f"bench-a-{uuid.uuid4().hex[:6]}"

    async def __aenter__(self) -> FloorA:
        self.worker = Worker(
            self.client,
            task_queue=self.queue,
            workflows=[BareThreeWorkflow],
            activities=[empty_activity],
            **worker_options(),
        )
        await self.worker.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.__aexit__(None, None, None)

    async def one(self, i: int) -> None:
        await self.client.execute_workflow(
            BareThreeWorkflow.run, i, id=f"bare-{uuid.uuid4().hex}", task_queue=self.queue
        )


class FloorB(Scenario):
    """The agent loop with no Temporal: generate, tools, generate, in-process."""

    name = "floor B (no durability)"

    def __init__(self, model_url: str) -> None:
        self.registry = AgentRegistry(
            [
                AgentDefinition(
                    name="Weather Agent",
                    model="gpt-4o-mini",
                    instructions=INSTRUCTIONS,
                    tools=[get_weather],
                    base_url=model_url,
                    api_key="bench",
                )
            ]
        )
        self.schemas = [get_weather.spec().openai_schema()]

    async def one(self, i: int) -> None:
        run_id = uuid.uuid4().hex
        messages = initial_messages(INSTRUCTIONS, PROMPT)
        for turn in (1, 2, 3):
            gen = await generate(
                self.registry,
                GenerateInput(
                    run_id=run_id,
                    agent="Weather Agent",
                    model="gpt-4o-mini",
                    messages=list(messages),
                    tools=self.schemas,
                    turn=turn,
                ),
            )
            messages.append(assistant_message(gen.text, gen.calls))
            if not gen.calls:
                return
            results = await asyncio.gather(
                *(
                    call_tool(
                        self.registry,
                        CallToolInput(
                            run_id=run_id,
                            agent="Weather Agent",
                            call_id=c["id"],
                            name=c["function"]["name"],
                            args=json.loads(c["function"]["arguments"]),
                            turn=turn,
                        ),
                    )
                    for c in gen.calls
                )
            )
            for call, res in zip(gen.calls, results, strict=True):
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": res.result or ""}
                )


class Ours(Scenario):
    """`Agentor.arun` on a worker in this process, mirror on or off, model calls local or not."""

    def __init__(
        self, client: Client, model_url: str, *, mirror: bool, local: bool = False
    ) -> None:
        self.client = client
        self.queue = f"bench-ours-{uuid.uuid4().hex[:6]}"
        self.mirror = mirror
        self.name = f"ours, FileStore mirror {'on' if mirror else 'off'}"
        if local:
            self.name += ", local model calls"
        self.dir = tempfile.mkdtemp(prefix="bench-runs-") if mirror else None
        self.agent = Agentor(
            name="Weather Agent",
            model="gpt-4o-mini",
            instructions=INSTRUCTIONS,
            tools=[get_weather],
            base_url=model_url,
            api_key="bench",
            temporal=client,
            task_queue=self.queue,
            embedded_worker=False,
            store=FileStore(self.dir) if self.dir else None,
            local_model_calls=local,
        )

    async def __aenter__(self) -> Ours:
        # sized by the plugin, as every user's worker is
        self.worker = build_worker(self.client, [self.agent], task_queue=self.queue)
        await self.worker.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.__aexit__(None, None, None)

    async def one(self, i: int) -> None:
        result = await self.agent.arun(PROMPT)
        if result.status != "completed":
            raise RuntimeError(f"run {result.run_id} ended {result.status}: {result.error}")

    def jsonl_bytes(self) -> float | None:
        """Mean bytes of one run's JSONL file."""
        if not self.dir:
            return None
        files = list(Path(self.dir).glob("*.jsonl"))
        return sum(f.stat().st_size for f in files) / len(files) if files else None
