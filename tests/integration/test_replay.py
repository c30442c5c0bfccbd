"""Determinism: every workflow task replayed, fetched histories and a golden one replay cleanly."""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Replayer

from agentor_temporal import FileStore, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import AgentRunWorkflow

from helpers import PROMPT, scripted_agent, weather_tool

GOLDEN = Path(__file__).parent / "golden" / "agent_run_history.json"


@function_tool
def flaky(city: str) -> str:
    """Fails, to exercise the error path."""
    raise RuntimeError("down")


SCRIPT = [
    [CallTool("get_weather", {"city": "London"}), CallTool("flaky", {"city": "Paris"})],
    CallTool("get_weather", "{not json"),
    CallTool("nonexistent", {}),
    Reply("Done: sunny in London."),
]


async def test_uncached_worker_replays_every_task_and_history_replays(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """With max_cached_workflows=0 every task replays; the fetched history replays too."""
    with ScriptedModelServer(SCRIPT) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[weather_tool(), flaky],
            store=FileStore(tmp_path),
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue, max_cached_workflows=0):
            result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == "Done: sunny in London."
    errors = [e.error for e in result.events if e.type == "tool_result"]
    assert errors[0] is None and errors[1] == "RuntimeError: down"
    assert errors[2] is not None and errors[2].startswith("Invalid JSON arguments")
    assert errors[3] == "unknown tool"
    assert [e.to_dict() for e in FileStore(tmp_path).load(result.run_id)] == [
        e.to_dict() for e in result.events
    ]

    history = await client.get_workflow_handle(result.run_id).fetch_history()
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(history.to_json())
