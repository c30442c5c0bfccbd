"""Search attributes: paused runs found by `AgentStatus`, costly ones by `AgentTokens`.

Asked the way an operator asks, with the `temporal` CLI against the server;
and `pending` (`waiting_calls`) finds exactly the same runs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal import Agentor, function_tool, plugin
from agentor_temporal._runs import waiting_calls
from agentor_temporal.connection import (
    DEV_SEARCH_ATTRIBUTES,
    start_dev_server,
    stop_dev_server,
    temporal_binary,
)
from agentor_temporal.testing import USAGE, CallTool, Fail, Hang, Reply, ScriptedModelServer, Step
from agentor_temporal.workflows import policies

from helpers import (
    ANSWER,
    PROMPT,
    free_port,
    transfer_tool,
    wait_until,
    weather_agent,
    weather_tool,
)

TOKENS = USAGE["total_tokens"]


def script(request: dict[str, Any]) -> Step:
    """Pay -> a transfer (waits for a person); Weather -> the weather tool; Break -> a 400."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return Reply("Done.")
    prompt = messages[-1]["content"]
    if prompt.startswith("Pay"):
        _, to, amount = prompt.split()
        return CallTool("transfer", {"amount": int(amount), "to": to}, id=f"call_{to}")
    if prompt.startswith("Weather"):
        return CallTool("get_weather", {"city": "Oslo"})
    return Fail(400, "bad request")


def temporal_list(address: str, query: str) -> dict[str, dict[str, Any]]:
    """`temporal workflow list --query ...` as an operator runs it: id -> search attributes."""
    listed = subprocess.run(
        [temporal_binary(), "workflow", "list", "--address", address, "-o", "json",
         "--query", query],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = json.loads(listed.stdout or "[]")
    found = {}
    for row in rows:
        fields = (row.get("searchAttributes") or {}).get("indexedFields") or {}
        found[row["execution"]["workflowId"]] = {
            name: json.loads(base64.b64decode(payload["data"])) for name, payload in fields.items()
        }
    return found


async def test_agent_status_and_tokens(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """AgentStatus='awaiting_approval' lists exactly the paused runs; AgentTokens is their usage."""
    name = f"Payer-{uuid.uuid4().hex[:6]}"
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name=name,
            tools=[transfer_tool(), weather_tool()],
            base_url=model.base_url,
            api_key="test-key",
            temporal=client,
            task_queue=task_queue,
        )
        paused = [await agent.arun(f"Pay {to} {n}") for to, n in (("alice", 5), ("bob", 7))]
        assert [r.status for r in paused] == ["awaiting_approval"] * 2
        done = await agent.arun("Weather in Oslo?")
        approved = await agent.arun("Pay carol 9")
        await agent.aapprove(approved.run_id, "call_carol", by="dana")
        approved = await agent.aresume(approved.run_id)
        failed = await agent.arun("Break.")
    assert [done.status, approved.status, failed.status] == ["completed", "completed", "failed"]

    mine = f"AgentName = '{name}'"
    waiting = wait_until(
        lambda: temporal_list(temporal_address, f"{mine} AND AgentStatus = 'awaiting_approval'"),
        "the paused runs in visibility",
    )
    assert set(waiting) == {r.run_id for r in paused}

    everything = wait_until(
        lambda: (
            (rows := temporal_list(temporal_address, mine))
            and all(r.get("AgentStatus") not in (None, "running") for r in rows.values())
            and rows
        ),
        "every run's final status in visibility",
    )
    expected = {
        paused[0].run_id: ("awaiting_approval", TOKENS),
        paused[1].run_id: ("awaiting_approval", TOKENS),
        done.run_id: ("completed", 2 * TOKENS),
        approved.run_id: ("completed", 2 * TOKENS),
        failed.run_id: ("failed", 0),
    }
    assert {k: (v["AgentStatus"], v["AgentTokens"]) for k, v in everything.items()} == expected
    for result in (*paused, done, approved):
        assert everything[result.run_id]["AgentTokens"] == result.usage.total_tokens
    costly = temporal_list(temporal_address, f"{mine} AND AgentTokens >= {2 * TOKENS}")
    assert set(costly) == {done.run_id, approved.run_id}

    # `pending` reads the same attribute
    calls = await waiting_calls(client, agent=name)
    assert sorted((c.run_id, c.call_id) for c in calls) == sorted(
        [(paused[0].run_id, "call_alice"), (paused[1].run_id, "call_bob")]
    )
    for result in paused:
        await client.get_workflow_handle(result.run_id).terminate("test over")


async def test_a_run_without_attributes_is_still_found_waiting(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that could not learn the attributes (the server was down) runs without them.

    Its runs set neither AgentName nor AgentStatus; `pending --agent` must
    still find their waiting calls (the chaos soak once waited forever on one).
    """

    async def refused(client: Client) -> set[str]:
        raise RPCError("the server is not reachable", RPCStatusCode.PERMISSION_DENIED, b"")

    monkeypatch.setattr(plugin, "_registered", refused)
    name = f"Payer-{uuid.uuid4().hex[:6]}"
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name=name,
            tools=[transfer_tool()],
            base_url=model.base_url,
            api_key="test-key",
            temporal=client,
            task_queue=task_queue,
        )
        paused = await agent.arun("Pay erin 3")
    assert paused.status == "awaiting_approval"
    described = await client.get_workflow_handle(paused.run_id).describe()
    assert not {"AgentName", "AgentStatus"} & set(described.search_attributes)

    calls = await waiting_calls(client, agent=name)
    assert [(c.run_id, c.call_id, c.agent) for c in calls] == [(paused.run_id, "call_erin", name)]
    assert not [
        c for c in await waiting_calls(client, agent="Someone Else") if c.run_id == paused.run_id
    ]
    await client.get_workflow_handle(paused.run_id).terminate("test over")


async def test_attributes_registered_with_other_types_are_left_unset(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A namespace with AgentName as Int and AgentTokens as Keyword: runs complete without them.

    The worker saw the names registered and upserted them; the server refused
    each upsert (BadSearchAttributes), which failed every workflow task of
    every run, for ever. An attribute cannot change its type, so the worker
    names each in a warning saying what to do, and runs leave it (and the one
    set with it) unset.
    """
    namespace = f"mistyped-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86_400)
        )
    )
    other = await Client.connect(client.service_client.config.target_host, namespace=namespace)
    mistyped = {
        "AgentName": IndexedValueType.INDEXED_VALUE_TYPE_INT,
        "AgentTokens": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    }

    deadline = time.monotonic() + 30
    while True:
        try:
            await other.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=mistyped)
            )
            break
        except RPCError:  # the new namespace is not served yet
            assert time.monotonic() < deadline, "the namespace never took search attributes"
            await asyncio.sleep(0.1)
    with ScriptedModelServer() as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=other)
        result = await asyncio.wait_for(agent.arun(PROMPT), 60)
    assert (result.status, result.final_output) == ("completed", ANSWER)
    handle = other.get_workflow_handle(result.run_id)
    kinds = [event.event_type async for event in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    values = {p.key.name for p in (await handle.describe()).typed_search_attributes}
    assert not {"AgentName", "AgentModel", "AgentStatus", "AgentTokens"} & values
    warned = [r.getMessage() for r in caplog.records if "registered as" in r.getMessage()]
    assert any(
        "Search attribute AgentName is registered as Int in this namespace, not Keyword" in w
        and "temporal operator search-attribute remove --name AgentName" in w
        for w in warned
    ), warned
    assert any("AgentTokens is registered as Keyword" in w for w in warned), warned


async def test_tokens_alone_are_sent_once_the_interval_has_passed(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's AgentTokens follows its usage while it runs, at most once per TOKENS_INTERVAL.

    The first generation ends past the interval, so its tokens are sent while
    the run goes on (a short run sends them with its end instead:
    `test_history_shape.py` counts its two upserts).
    """
    # the workflow (in this process, outside the sandbox) reads it at each check
    monkeypatch.setattr(policies, "TOKENS_INTERVAL", timedelta(seconds=2))
    release = threading.Event()

    @function_tool
    def hold(city: str) -> str:
        """Wait until the test has looked.

        Args:
            city: Any city.
        """
        release.wait(60)
        return "held"

    slow = policies.TOKENS_INTERVAL.total_seconds() + 0.5
    run_id = f"tokens-{uuid.uuid4().hex[:8]}"
    with ScriptedModelServer(
        [Hang(slow, CallTool("hold", {"city": "Oslo"})), Reply("Done.")]
    ) as model:
        agent = Agentor(
            name=f"Slow-{uuid.uuid4().hex[:6]}",
            tools=[hold],
            base_url=model.base_url,
            api_key="test-key",
            temporal=client,
            task_queue=task_queue,
        )
        running = asyncio.ensure_future(agent.arun("Weather in Oslo?", run_id=run_id))
        try:
            handle = client.get_workflow_handle(run_id)
            deadline = time.monotonic() + slow + 30
            seen: dict[str, Any] = {}
            while seen.get("AgentTokens") != [TOKENS] and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                with contextlib.suppress(RPCError):
                    seen = dict((await handle.describe()).search_attributes)
            assert seen.get("AgentTokens") == [TOKENS] and seen.get("AgentStatus") == ["running"]
        finally:
            release.set()
            result = await running
    assert result.status == "completed"
    final = (await client.get_workflow_handle(run_id).describe()).search_attributes
    assert final["AgentStatus"] == ["completed"] and final["AgentTokens"] == [2 * TOKENS]


async def test_the_embedded_server_knows_every_attribute_before_the_first_run(
    tmp_path: Path,
) -> None:
    """The embedded dev server caches search attributes, so it registers ours at start.

    Its cached check does not see an attribute added through the API for
    seconds (the first run's workflow task would fail and retry); registered
    at start, the first run sets all of them without a failed task.
    """
    names = {
        name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()
        for name, kind in plugin.SEARCH_ATTRIBUTES.items()
    }
    assert names == DEV_SEARCH_ATTRIBUTES
    data = tmp_path / "temporal"
    server = start_dev_server(data, free_port(), free_port())
    try:
        client = await Client.connect(server.address)
        with ScriptedModelServer() as model:
            agent = weather_agent(base_url=model.base_url, task_queue="first-run", temporal=client)
            result = await asyncio.wait_for(agent.arun(PROMPT), 60)
        assert (result.status, result.final_output) == ("completed", ANSWER)
        handle = client.get_workflow_handle(result.run_id)
        kinds = [event.event_type async for event in handle.fetch_history_events()]
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
        attributes = (await handle.describe()).typed_search_attributes
        values = {pair.key.name: pair.value for pair in attributes}
        assert values["AgentStatus"] == "completed"
        assert values["AgentName"] == "Weather Agent"
        assert values["AgentTokens"] == 2 * TOKENS
    finally:
        stop_dev_server(data)
