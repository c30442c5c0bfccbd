"""A Temporal API key rotated on a live client is a secret of the process as the first was.

Temporal Cloud's API keys expire, and a long-lived worker rotates them in place:
`client.api_key = <the new key>` (or `client.rpc_metadata = {...}`), read from a vault or
a mounted file. The worker's client (`AgentorPlugin` on a user's worker) had its key
remembered when the worker started, so the new one was masked nowhere: a tool's error
quoting it (a tool reading the rotated key's file) was recorded as it was. Real dev server
(which ignores the key), scripted model, real `openai` client.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import Agentor, FileStore
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import history_text


@pytest.mark.parametrize("setting", ["api_key", "rpc_metadata"])
async def test_a_clients_rotated_api_key_is_masked(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path, setting: str
) -> None:
    """The key a user's worker's client is given after it started is `***` in a tool's
    error, history and the JSONL, as the key it started with is."""
    from temporalio.worker import Worker

    from agentor_temporal import AgentorPlugin, function_tool

    first = f"tcak-first-{uuid.uuid4().hex}"
    rotated = f"tcak-rotated-{uuid.uuid4().hex}"
    # the dev server ignores the key; the client sends it with every call
    users = await Client.connect(temporal_address, api_key=first, tls=False)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        raise RuntimeError(f"our namespace refused api keys {first} and {rotated}")

    store = FileStore(tmp_path)
    run_id = f"rotated-{uuid.uuid4().hex[:8]}"
    script = [CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Weather Agent",
            tools=[get_weather],
            base_url=model.base_url,
            api_key="sk-test-model-key-0123456789",
            embedded_worker=False,
        )
        plugin = AgentorPlugin(agents=[agent], store=store)
        async with Worker(users, task_queue=task_queue, plugins=[plugin]):
            # rotated while the worker runs, as a long-lived worker does before the first expires
            if setting == "api_key":
                users.api_key = rotated
            else:
                users.rpc_metadata = {"authorization": f"Bearer {rotated}"}
            handle = await users.start_workflow(
                "AgentRun",
                {"agent": "Weather Agent", "input": "Oslo?"},
                id=run_id,
                task_queue=task_queue,
            )
            assert (await handle.result())["status"] == "completed"
    texts = [await history_text(client, run_id), (tmp_path / f"{run_id}.jsonl").read_text()]
    assert "our namespace refused api keys *** and ***" in texts[-1]
    assert not [text for text in texts if first in text or rotated in text]
