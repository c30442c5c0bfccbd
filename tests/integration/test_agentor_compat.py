"""Logs move both ways between this project and Agentor 0.1.1 itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore
from agentor_temporal.store import replay_messages, total_usage
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer

import agentor_ref
from helpers import PROMPT, weather_agent

agentor_store = agentor_ref.load()
needs_agentor = pytest.mark.skipif(
    agentor_store is None,
    reason="Agentor 0.1.1's wheel is not in .cache/wheels (scripts/test downloads it)",
)


@needs_agentor
async def test_our_logs_load_in_agentors_file_store(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A resumed, multi-segment log written here reads the same in Agentor's FileStore."""
    script = [Fail(400, "bad"), CallTool("get_weather", {"city": "London"}), Reply("Sunny.")]
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
        )
        failed = await agent.arun(PROMPT)
        result = await agent.aresume(failed.run_id)
    assert result.status == "completed"

    theirs = agentor_store.FileStore(tmp_path).load(result.run_id)
    ours = FileStore(tmp_path).load(result.run_id)
    assert [e.to_json() for e in theirs] == [e.to_json() for e in ours]
    assert agentor_store.replay_messages(theirs) == replay_messages(ours)
    assert agentor_store.is_complete(theirs)
    usage = agentor_store.total_usage(theirs)
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == tuple(
        vars(total_usage(ours)).values()
    )
    assert agentor_store.FileStore(tmp_path).list_runs() == FileStore(tmp_path).list_runs()


@needs_agentor
def test_agentor_written_logs_load_here(tmp_path: Path) -> None:
    """A log Agentor writes with its own FileStore loads here with the same replay."""
    from agentor.engine.events import Event as TheirEvent  # type: ignore[import-not-found]

    theirs = agentor_store.FileStore(tmp_path)
    theirs.append(
        "r", TheirEvent(type="run_start", agent="A", messages=[{"role": "user", "content": "hi"}])
    )
    theirs.append(
        "r",
        TheirEvent(
            type="generation", turn=1, messages=[{"role": "user", "content": "hi"}], text="hello"
        ),
    )
    ours = FileStore(tmp_path).load("r")
    assert [e.to_json() for e in ours] == [e.to_json() for e in theirs.load("r")]
    assert replay_messages(ours) == agentor_store.replay_messages(theirs.load("r"))
