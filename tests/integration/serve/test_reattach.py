"""Streams survive the web tier: a killed server, a dropped A2A stream, no worker at all.

The server process is SIGKILLed mid-run and started again; the run goes on
in the worker, and a client that reconnects with `Last-Event-ID` (or an A2A
client that resubscribes) gets exactly what it has not seen yet.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import TemporalStore

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, history_shows
from serve_http import Proc, Server, ledger_for, read_sse, settle


def rpc(method: str, params: dict[str, Any], rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def text_message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "message": {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": text}],
            **fields,
        }
    }


def test_sse_reattaches_after_the_server_is_killed_and_restarted(
    server: Server, http: httpx.Client, gates: Path
) -> None:
    """Read 3 events, SIGKILL the server, restart it: Last-Event-ID: 3 gets exactly the rest."""
    run_id = uuid.uuid4().hex
    (gates / run_id).touch()  # the tool waits: the run is live across the restart
    assert http.post("/runs", json={"input": PROMPT, "run_id": run_id}).status_code == 202
    seen: list[dict[str, Any]] = []
    with http.stream("GET", f"/runs/{run_id}/events") as first:
        for message in read_sse(first):
            if "id" in message:
                seen.append(message)
            if len(seen) == 3:
                break  # the client goes away
    assert [m["id"] for m in seen] == ["1", "2", "3"]
    assert [json.loads(m["data"])["type"] for m in seen] == SEED_EVENT_TYPES[:3]

    server.kill()
    server.start()
    rest: list[dict[str, Any]] = []
    with (
        server.client() as again,
        again.stream("GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": "3"}) as resumed,
    ):
        assert resumed.status_code == 200
        for message in read_sse(resumed):
            if "retry" in message:
                (gates / run_id).unlink()  # attached again: now the run may move on
            elif "id" in message:
                rest.append(message)
        # the stream ended by itself, after run_end
    assert [m["id"] for m in rest] == ["4", "5", "6", "7"]
    events = [json.loads(m["data"]) for m in seen + rest]
    assert [e["type"] for e in events] == SEED_EVENT_TYPES
    assert events == http.get(f"/runs/{run_id}").json()["events"]
    assert events[-1]["text"] == ANSWER


def test_a2a_stream_dropped_then_resubscribe_continues(http: httpx.Client, gates: Path) -> None:
    """message/stream drops after the tool call; tasks/resubscribe carries the task to its end."""
    city = "Q" + uuid.uuid4().hex[:8]
    (gates / city).touch()
    frames: list[dict[str, Any]] = []
    with http.stream(
        "POST", "/", json=rpc("message/stream", text_message(f"What is the weather in {city}?"))
    ) as stream:
        for message in read_sse(stream):
            frames.append(message)
            if "Calling get_weather" in message["data"]:
                break
    task = json.loads(frames[0]["data"])["result"]
    assert task["kind"] == "task" and task["status"]["state"] in ("submitted", "working")
    task_id = task["id"]
    calling = json.loads(frames[-1]["data"])["result"]
    assert calling["kind"] == "status-update" and frames[-1]["id"] == "3"

    results: list[dict[str, Any]] = []
    with http.stream("POST", "/", json=rpc("tasks/resubscribe", {"id": task_id}, 2)) as again:
        for message in read_sse(again):
            body = json.loads(message["data"])
            assert body["id"] == 2
            results.append(body["result"])
            if len(results) == 1:
                assert body["result"]["kind"] == "task"
                assert body["result"]["status"]["state"] == "working"
                (gates / city).unlink()
    assert results[-1]["kind"] == "status-update" and results[-1]["final"] is True
    assert results[-1]["status"]["state"] == "completed"
    answers = [r for r in results if r["kind"] == "artifact-update" and r.get("lastChunk")]
    assert answers[-1]["artifact"]["parts"][0]["text"].endswith(f"in {city} is sunny and 22C.")

    # a resubscriber that says where it was gets exactly what followed, finished or not
    with http.stream(
        "POST", "/", json=rpc("tasks/resubscribe", {"id": task_id, "metadata": {"after": 3}}, 3)
    ) as replay:
        ids = [m.get("id") for m in read_sse(replay)]
    assert ids == [None, "4", "6", "7"]  # the task, the tool's answer, the answer, the end

    missing = http.post("/", json=rpc("tasks/resubscribe", {"id": uuid.uuid4().hex}, 4)).json()
    assert missing["error"]["code"] == -32001


def test_a2a_send_get_cancel_and_input_required(
    http: httpx.Client, gates: Path, serve_env: dict[str, str]
) -> None:
    """message/send blocks to a result; a waiting run is input-required; cancel and its errors."""
    done = http.post("/", json=rpc("message/send", text_message(PROMPT))).json()["result"]
    assert done["status"]["state"] == "completed"
    assert done["artifacts"][0]["parts"][0]["text"] == ANSWER
    assert done["history"][0]["parts"][0]["text"] == PROMPT

    meta = {"agent": "Treasurer"}
    paying = text_message("Pay dave", metadata=meta)
    waiting = http.post("/", json=rpc("message/send", paying)).json()["result"]
    assert waiting["status"]["state"] == "input-required"
    assert "transfer(amount=1, to='dave')" in waiting["status"]["message"]["parts"][0]["text"]
    [pending] = waiting["metadata"]["pending_approvals"]
    got = http.post("/", json=rpc("tasks/get", {"id": waiting["id"]})).json()["result"]
    assert got["status"]["state"] == "input-required"
    reply = {
        "message": {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "taskId": waiting["id"],
            "parts": [{"kind": "data", "data": {"call_id": pending["call_id"], "approve": True}}],
        }
    }
    paid = http.post("/", json=rpc("message/send", reply)).json()["result"]
    assert paid["status"]["state"] == "completed"
    assert paid["artifacts"][0]["parts"][0]["text"] == "Answer based on tool: Sent 1 to dave."
    # the same message again (its send timed out) is answered with the task, deciding nothing
    again = http.post("/", json=rpc("message/send", reply)).json()["result"]
    assert again["status"]["state"] == "completed"
    assert len(ledger_for(serve_env, waiting["id"])) == 1
    another = {"message": {**reply["message"], "messageId": uuid.uuid4().hex}}
    refused = http.post("/", json=rpc("message/send", another)).json()
    assert refused["error"]["code"] == -32602 and "not waiting" in refused["error"]["message"]

    # a plain-text reply decides the one waiting call; streamed, it carries on from there
    other = http.post("/", json=rpc("message/send", text_message("Pay erin", metadata=meta)))
    other_id = other.json()["result"]["id"]
    vague = http.post("/", json=rpc("message/send", text_message("hmm", taskId=other_id))).json()
    assert vague["error"]["code"] == -32602 and "reply with a DataPart" in vague["error"]["message"]
    deny = rpc("message/stream", text_message("deny not this week", taskId=other_id))
    with http.stream("POST", "/", json=deny) as denied:
        frames = [json.loads(m["data"])["result"] for m in read_sse(denied)]
    assert frames[0]["kind"] == "task" and frames[-1]["final"] is True
    assert frames[-1]["status"]["state"] == "completed"
    said = [f for f in frames if f["kind"] == "status-update" and "message" in f["status"]]
    assert "transfer denied" in said[0]["status"]["message"]["parts"][0]["text"]
    assert "not this week" in frames[-2]["artifact"]["parts"][0]["text"]

    not_cancelable = http.post("/", json=rpc("tasks/cancel", {"id": done["id"]})).json()
    assert not_cancelable["error"]["code"] == -32002
    unknown = http.post("/", json=rpc("tasks/cancel", {"id": uuid.uuid4().hex})).json()
    assert unknown["error"]["code"] == -32001


async def test_a2a_cancel_of_a_working_task_keeps_what_its_tool_did(
    http: httpx.Client, gates: Path, client: Client, serve_env: dict[str, str]
) -> None:
    """`tasks/cancel` while a sync tool works: the task is canceled once the tool, which a
    cancel cannot stop, has finished; its result is kept, so a resume never runs it again."""
    city = "C" + uuid.uuid4().hex[:8]
    (gates / city).touch()
    try:
        params = text_message(f"What is the weather in {city}?", metadata={})
        params["configuration"] = {"blocking": False}
        sent = await asyncio.to_thread(http.post, "/", json=rpc("message/send", params))
        running = sent.json()["result"]
        assert running["status"]["state"] in ("submitted", "working")
        task_id = running["id"]
        await history_shows(client, task_id, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        asking = asyncio.ensure_future(
            asyncio.to_thread(http.post, "/", json=rpc("tasks/cancel", {"id": task_id}))
        )
        await history_shows(client, task_id, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED)
    finally:
        (gates / city).unlink()
    cancelled = (await asyncio.wait_for(asking, 30)).json()["result"]
    assert cancelled["status"]["state"] == "canceled"
    events = await TemporalStore(client).aload(task_id)
    [result] = [e for e in events if e.type == "tool_result"]
    assert result.result == f"The weather in {city} is sunny and 22C."
    assert len(ledger_for(serve_env, task_id)) == 1


def test_a2a_protocol_errors(http: httpx.Client) -> None:
    """Malformed JSON-RPC gets the JSON-RPC error codes, never a stack trace."""
    parse = http.post("/", content=b"{nope", headers={"Content-Type": "application/json"})
    assert parse.status_code == 200 and parse.json()["error"]["code"] == -32700
    assert parse.json()["id"] is None
    assert http.post("/", json={"id": 1, "method": "tasks/get"}).json()["error"]["code"] == -32600
    unknown = http.post("/", json=rpc("tasks/frobnicate", {}, 7)).json()
    assert (unknown["id"], unknown["error"]["code"]) == (7, -32601)
    push = http.post("/", json=rpc("tasks/pushNotificationConfig/set", {})).json()
    assert push["error"]["code"] == -32003
    no_params = http.post("/", json=rpc("tasks/get", {})).json()
    assert no_params["error"]["code"] == -32602
    empty = http.post("/", json=rpc("message/send", text_message("   "))).json()
    assert empty["error"]["code"] == -32602 and "no text" in empty["error"]["message"]
    nobody = http.post("/", json=rpc("message/send", text_message("hi", metadata={"agent": "X"})))
    assert "no agent named 'X'" in nobody.json()["error"]["message"]


def test_finished_task_and_run_read_with_no_worker_running(
    http: httpx.Client, worker: Proc
) -> None:
    """tasks/get, GET /runs/{id} and its events come from history: no worker needed."""
    task = http.post("/", json=rpc("message/send", text_message(PROMPT))).json()["result"]
    worker.kill()
    try:
        got = http.post("/", json=rpc("tasks/get", {"id": task["id"], "historyLength": 1}))
        result = got.json()["result"]
        assert result["status"]["state"] == "completed"
        assert result["artifacts"][0]["parts"][0]["text"] == ANSWER
        assert len(result["history"]) == 1 and result["history"][0]["role"] == "agent"
        run = settle(http, task["id"], "completed", timeout=5)
        assert [e["type"] for e in run["events"]] == SEED_EVENT_TYPES
        with http.stream("GET", f"/runs/{task['id']}/events?after=5") as tail:
            assert [m["id"] for m in read_sse(tail) if "id" in m] == ["6", "7"]
    finally:
        worker.start()
        worker.wait_for_output("worker ready")


def test_an_a2a_message_sent_again_attaches_to_the_run_it_started(
    http: httpx.Client, serve_env: dict[str, str]
) -> None:
    """A client whose send timed out sends the message again (same messageId): it gets the
    task the first started, and the agent (its tools too) ran once. Before, each send
    started a run of its own."""
    city = "C" + uuid.uuid4().hex[:8]
    message = text_message(f"What is the weather in {city}?")
    first = http.post("/", json=rpc("message/send", message)).json()["result"]
    again = http.post("/", json=rpc("message/send", message)).json()["result"]
    with http.stream("POST", "/", json=rpc("message/stream", message)) as streamed:
        frames = [json.loads(m["data"])["result"] for m in read_sse(streamed)]
    assert first["status"]["state"] == again["status"]["state"] == "completed"
    assert again["id"] == first["id"] and frames[0]["id"] == first["id"]
    ran = [line for line in ledger_for(serve_env, first["id"]) if city in line]
    assert len(ran) == 1, ran
    # another message with the same text is another task
    other = http.post("/", json=rpc("message/send", text_message(f"Weather in {city}?")))
    assert other.json()["result"]["id"] != first["id"]
