"""Keys a run's record holds as a client sent them never leave through our outputs.

A run started by any Temporal client (`temporal workflow start`, a user's own
workflow, another language) records its input as it was sent: history holds
it, and nothing of ours can mask it there. What we write and serve from it
does mask the keys the process knows: the JSONL mirror the worker writes, and
the codec server's decoded payloads (the Temporal UI's view of an encrypted
run). Real dev server, scripted model, real `openai` client, real HTTP.
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client

from agentor_temporal import Agentor, FileStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import INSTRUCTIONS, weather_tool


def _key() -> str:
    return f"sk-recorded-{uuid.uuid4().hex}"


async def test_a_key_in_a_plain_clients_input_is_masked_in_the_mirror(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key the worker knows, sent in a run's input by a plain Temporal client, is `***`
    in every line of the JSONL mirror, and the masked copy still matches the run."""
    key = _key()
    store = tmp_path / "runs"
    script = [CallTool("get_weather", {"city": "London"}), Reply("It is sunny.")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            tools=[weather_tool()],
            base_url=model.base_url,
            api_key=key,
            temporal=client,
            task_queue=task_queue,
            store=FileStore(store),
        )
        run_id = f"plain-{uuid.uuid4().hex[:8]}"
        await client.start_workflow(
            "AgentRun",
            {"agent": "Weather Agent", "input": f"my key is {key}, what is the weather?"},
            id=run_id,
            task_queue=task_queue,
        )
        result = await agent.aresume(run_id)
        assert result.status == "completed", result.error
        again = await agent.aresume(run_id)  # a finished run's mirror is checked again
    assert again.final_output == "It is sunny."
    text = (store / f"{run_id}.jsonl").read_text()
    assert key not in text
    lines = [json.loads(line) for line in text.splitlines()]
    said = {"role": "user", "content": "my key is ***, what is the weather?"}
    assert said in lines[0]["messages"]
    assert [e["type"] for e in lines][-1] == "run_end"
    # one file: the masked copy was taken for the run's, never set aside as foreign
    assert [p.name for p in store.iterdir()] == [f"{run_id}.jsonl"]
    assert "did not match the run" not in caplog.text
