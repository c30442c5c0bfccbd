"""Logs move both ways between this project and Agentor 0.1.1 itself."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, function_tool
from agentor_temporal.store import replay_messages, total_usage
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer

import agentor_ref
from helpers import PROMPT, scripted_agent

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
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path))
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


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PARIS = "Now do the same for Paris."


def _normalized(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with what differs between two recordings (ids, clocks) replaced by placeholders."""
    ids: dict[str, str] = {}
    text = json.dumps(events)
    for call_id in re.findall(r'"(call_[0-9a-f]+)"', text):
        ids.setdefault(call_id, f"call-{len(ids)}")
    for call_id, placeholder in ids.items():
        text = text.replace(call_id, placeholder)
    out = json.loads(text)
    for event in out:
        for key in ("started_at", "ended_at"):
            if key in event:
                event[key] = "<time>"
        if "forked_from" in event:
            event["forked_from"] = "<parent>"
    return list(out)


@needs_agentor
async def test_our_fork_is_agentors_fork_field_for_field(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The same fork made here and by Agentor 0.1.1 writes the same log (ids and clocks aside)."""
    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path))
        parent = await agent.arun(PROMPT)
        assert parent.run_id is not None
        fork = await agent.afork(parent.run_id, PARIS)
    assert fork.run_id is not None

    theirs = [json.loads(line) for line in (FIXTURES / "forked-run.jsonl").read_text().splitlines()]
    ours = [
        json.loads(line) for line in (tmp_path / f"{fork.run_id}.jsonl").read_text().splitlines()
    ]
    assert _normalized(ours) == _normalized(theirs)


@needs_agentor
async def test_our_fork_loads_in_agentors_file_store_and_replays_the_same(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A fork written here reads the same in Agentor's FileStore, and equals its own fork_run."""
    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path))
        parent = await agent.arun(PROMPT)
        assert parent.run_id is not None
        fork = await agent.afork(parent.run_id, PARIS)
        snapshot = await agent.afork(parent.run_id)
    assert fork.run_id is not None and snapshot.run_id is not None

    theirs = agentor_store.FileStore(tmp_path)
    for run_id in (fork.run_id, snapshot.run_id):
        loaded = theirs.load(run_id)
        ours = FileStore(tmp_path).load(run_id)
        assert [e.to_json() for e in loaded] == [e.to_json() for e in ours]
        assert agentor_store.replay_messages(loaded) == replay_messages(ours)
        assert agentor_store.is_complete(loaded)
        usage = agentor_store.total_usage(loaded)
        assert usage.total_tokens == total_usage(ours).total_tokens
    # Agentor's own fork_run of our parent: the same events and the same marker
    copied = agentor_store.fork_run(theirs, parent.run_id, f"theirs-{task_queue}")
    mine = [e.to_dict() for e in FileStore(tmp_path).load(snapshot.run_id)]
    assert _normalized([e.to_dict() for e in theirs.load(copied)]) == _normalized(mine)
    assert theirs.load(copied)[-1].forked_from == mine[-1]["forked_from"] == parent.run_id


async def test_agentors_crashed_fork_is_resumed_here(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A fork Agentor wrote, killed after its tool answered, finishes here: model once, no tool."""
    run_id = f"agentor-fork-{task_queue}"
    shutil.copy(FIXTURES / "forked-crashed-after-tool.jsonl", tmp_path / f"{run_id}.jsonl")
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        calls.append(city)
        return f"The weather in {city} is sunny and 22C."

    with ScriptedModelServer() as model:
        agent = scripted_agent(
            model, client, task_queue, store=FileStore(tmp_path), tools=[get_weather]
        )
        result = await agent.aresume(run_id)

    assert result.status == "completed"
    assert result.final_output == "Answer based on tool: The weather in Paris is sunny and 22C."
    assert model.request_count == 1 and calls == []
    assert model.requests[0]["messages"][-1]["content"] == "The weather in Paris is sunny and 22C."
    types = [e.type for e in result.events]
    assert types[7:] == [
        "fork",
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    assert [e.to_dict() for e in FileStore(tmp_path).load(run_id)] == [
        e.to_dict() for e in result.events
    ]
    # and it forks on: the copy of Agentor's fork keeps both its ancestry and its marker
    with ScriptedModelServer() as model:
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path))
        again = await agent.afork(run_id, "And in Rome?")
    assert [e.type for e in again.events].count("fork") == 2
    assert again.final_output == "Answer based on tool: The weather in Rome is sunny and 22C."
