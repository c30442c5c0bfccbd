"""What crosses into a model request, and what comes back, never poisons or slows a run.

Real dev server, embedded worker, the real `openai` client. A tool result
with a lone surrogate is sent as U+FFFD (not retried for minutes as an
outage); an error of our own code fails at once and `resume` continues the
run; a malformed reply fails clearly within seconds; an input too big for one
payload is refused before anything starts; and no failure text anywhere (the
UI's last failure, history, the JSONL, `RunResult.error`, worker logs) shows
URL credentials, query values or the API key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal import FileStore, TemporalStore, function_tool
from agentor_temporal.testing import CallTool, Fail, Raw, Reply, ScriptedModelServer

from helpers import free_port, weather_agent


@function_tool
def list_files() -> str:
    """Names in a directory, decoded as the OS gave them."""
    return b"report-\xff.txt".decode("utf-8", "surrogateescape")


async def test_a_lone_surrogate_never_poisons_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with ScriptedModelServer([CallTool("list_files"), Reply("One report.")]) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            tools=[list_files],
            store=FileStore(tmp_path),
        )
        result = await asyncio.wait_for(agent.arun("What files are there?"), 30)
        sent = model.requests[1]["messages"][-1]["content"]
    assert result.status == "completed" and result.final_output == "One report."
    assert sent == "report-\ufffd.txt"
    mirrored = (tmp_path / f"{result.run_id}.jsonl").read_text(encoding="utf-8")
    assert "\\udcff" not in mirrored
    assert "report-\\ufffd.txt" in mirrored  # the replacement character, escaped


async def test_our_own_error_fails_at_once_and_resume_continues(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours is not retried as a provider outage; once it is gone, resume finishes."""
    from agentor_temporal.activities import model as model_module

    def broken(*args: Any) -> Any:
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    with ScriptedModelServer() as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        monkeypatch.setattr(model_module, "prepared_request", broken)
        started = time.monotonic()
        failed = await asyncio.wait_for(agent.arun("What is the weather in Rome?"), 30)
        assert time.monotonic() - started < 10
        assert failed.status == "failed" and failed.error is not None
        assert "not a provider outage" in failed.error and "UnicodeEncodeError" in failed.error
        assert model.request_count == 0
        monkeypatch.undo()
        resumed = await asyncio.wait_for(agent.aresume(failed.run_id), 30)
    assert resumed.status == "completed", resumed.error
    assert "Rome" in (resumed.final_output or "")


@pytest.mark.parametrize(
    "body, what",
    [
        ({"id": "x", "object": "chat.completion", "choices": []}, "no choices"),
        ("<html><body>502 Bad Gateway</body></html>", "not JSON"),
        ({"choices": [{"message": {"tool_calls": [{"id": "c"}]}}]}, "no function name"),
        ({"choices": [{"message": {"tool_calls": 5}}]}, "tool_calls are a number"),
        (b'{"choices": [{"message": {"content": "\xff\xfe"}}]}', "not UTF-8 text"),
    ],
    ids=["choices-empty", "html", "call-without-name", "tool-calls-number", "not-utf8"],
)
async def test_a_malformed_reply_fails_clearly_within_seconds(
    body: Any, what: str, client: Client, task_queue: str
) -> None:
    from agentor_temporal.testing import Raw

    with ScriptedModelServer(lambda request: Raw(body)) as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        started = time.monotonic()
        result = await asyncio.wait_for(agent.arun("What is the weather in Rome?"), 30)
        took = time.monotonic() - started
        requests = model.request_count
    assert result.status == "failed" and result.error is not None
    assert "malformed" in result.error and what in result.error
    assert took < 30 and 2 <= requests <= 10


def _chunk(delta: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def _sse(*chunks: Any) -> Raw:
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return Raw(events + "data: [DONE]\n\n", content_type="text/event-stream")


@pytest.mark.parametrize(
    "chunk, what",
    [
        (_chunk({"content": 5}), "a chunk's content is a number"),
        (_chunk({"tool_calls": [{"index": None, "function": {"name": "f"}}]}), "index is null"),
        (_chunk("abc"), "a chunk's delta is a string"),
    ],
    ids=["content-number", "index-null", "delta-string"],
)
async def test_a_malformed_streamed_reply_fails_clearly_within_seconds(
    chunk: dict[str, Any], what: str, client: Client, task_queue: str
) -> None:
    """A streamed chunk of the wrong shape is a malformed reply, not our error."""
    with ScriptedModelServer(lambda request: _sse(chunk)) as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        started = time.monotonic()
        stream = agent.stream_chat("What is the weather in Rome?", stream_text=True)
        events = await asyncio.wait_for(_collect(stream), 30)
        took = time.monotonic() - started
        requests = model.request_count
    end = events[-1]
    assert end.type == "run_end" and end.status == "failed" and end.error is not None
    assert "malformed" in end.error and what in end.error, end.error
    assert took < 30 and 2 <= requests <= 10


async def _collect(stream: Any) -> list[Any]:
    return [event async for event in stream]


def _completion(message: dict[str, Any]) -> Raw:
    body = {"object": "chat.completion", "choices": [{"message": message}]}
    return Raw(json.dumps(body))


SURROGATE_CALL = {"name": "get_weather", "arguments": '{"city": "RomeLONE"}'}
SURROGATE_REPLIES = {
    "plain": [
        _completion(
            {"content": "LONE", "tool_calls": [{"id": "cLONE", "function": SURROGATE_CALL}]}
        ),
        _completion({"content": "cafLONE", "reasoning_content": "thoughtLONE"}),
    ],
    "streamed": [
        _sse(_chunk({"tool_calls": [{"index": 0, "id": "cLONE", "function": SURROGATE_CALL}]})),
        _sse(
            _chunk({"reasoning_content": "thoughtLONE"}),
            _chunk({"content": "ca"}),
            _chunk({"content": "fLONE"}),
        ),
    ],
}


@pytest.mark.parametrize("how", ["plain", "streamed"])
async def test_a_lone_surrogate_in_a_reply_is_recorded_encodable(
    how: str, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A reply's text, reasoning and calls are stored as U+FFFD, never as a lone surrogate
    that would break every reader of the run (print, `show`, GET /runs/{id})."""
    # each "LONE" as a provider's JSON escapes a lone surrogate
    replies = [
        Raw(r.body.replace("LONE", "\\ud800"), content_type=r.content_type)
        for r in SURROGATE_REPLIES[how]
    ]
    with ScriptedModelServer(replies) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
        )
        run_id = uuid.uuid4().hex
        events = await asyncio.wait_for(
            _collect(agent.stream_chat("Weather?", run_id=run_id, stream_text=how == "streamed")),
            30,
        )
        result = await agent.aresume(run_id)
    assert result.status == "completed" and result.final_output == "caf\ufffd"
    recorded = [e.to_dict() for e in await TemporalStore(client).aload(run_id)]
    generation = next(e for e in recorded if e.get("type") == "generation")
    assert "Rome\ufffd" in json.dumps(generation, ensure_ascii=False)
    assert "thought\ufffd" in json.dumps(recorded, ensure_ascii=False)
    deltas = "".join(e.text or "" for e in events if e.type == "text_delta")
    assert deltas == ("caf\ufffd" if how == "streamed" else "")
    # as `show`, the HTTP routes and print() encode them
    for value in (recorded, [e.to_dict() for e in events], result.final_output):
        json.dumps(value, ensure_ascii=False).encode("utf-8")


REFUSAL = "I'm sorry, I can't help with that request."
REFUSAL_REPLIES = {
    "plain": _completion({"role": "assistant", "content": None, "refusal": REFUSAL}),
    "streamed": _sse(
        _chunk({"role": "assistant", "content": None, "refusal": ""}),
        _chunk({"refusal": REFUSAL[:12]}),
        _chunk({"refusal": REFUSAL[12:]}),
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        },
    ),
}


@pytest.mark.parametrize("how", ["plain", "streamed"])
async def test_a_refusal_is_the_runs_answer(
    how: str, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A refusal (`content: null`, its text in `refusal`) is the final output, the
    `message` event's text and the streamed deltas alike: never an empty answer."""
    with ScriptedModelServer(lambda request: REFUSAL_REPLIES[how]) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
        )
        run_id = uuid.uuid4().hex
        events = await asyncio.wait_for(
            _collect(agent.stream_chat("Weather?", run_id=run_id, stream_text=how == "streamed")),
            30,
        )
        result = await agent.aresume(run_id)
    assert result.status == "completed" and result.final_output == REFUSAL
    message = [e for e in result.events if e.type == "message"]
    assert [e.text for e in message] == [REFUSAL]
    mirrored = [
        json.loads(line) for line in (tmp_path / f"{run_id}.jsonl").read_text().splitlines()
    ]
    assert [e["text"] for e in mirrored if e["type"] == "message"] == [REFUSAL]
    assert mirrored[-1]["type"] == "run_end" and mirrored[-1]["text"] == REFUSAL
    deltas = "".join(e.text or "" for e in events if e.type == "text_delta")
    assert deltas == (REFUSAL if how == "streamed" else "")


async def test_a_lone_surrogate_in_the_input_is_recorded_as_it_is_sent(
    client: Client, task_queue: str
) -> None:
    """The user's input is recorded as the model request sends it: U+FFFD, encodable."""
    with ScriptedModelServer([Reply("Noted.")]) as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        run_id = await agent.astart("files: report-\udcff.txt")
        result = await asyncio.wait_for(agent.aresume(run_id), 30)
        sent = model.requests[0]["messages"][-1]["content"]
    assert result.status == "completed"
    assert sent == "files: report-\ufffd.txt"
    recorded = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert recorded[0]["messages"][-1]["content"] == sent
    json.dumps(recorded, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    "setting, what",
    [
        ({"api_key": "sk-test-0123456789\n"}, "begins or ends with whitespace"),
        ({"timeout": -1}, "timeout must be a positive number"),
    ],
    ids=["key-newline", "timeout"],
)
async def test_a_setting_the_client_cannot_send_fails_the_run_at_once(
    setting: dict[str, Any], what: str, client: Client, task_queue: str
) -> None:
    """A run whose definition changed after it was checked (a worker's own key, a run
    recorded before) fails at once naming the setting: not 5 minutes of 'unreachable'."""
    with ScriptedModelServer() as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        agent.definition.api_key = setting.get("api_key", "test-key")
        agent.definition.model_settings.update({k: v for k, v in setting.items() if k == "timeout"})
        started = time.monotonic()
        result = await asyncio.wait_for(agent.arun("What is the weather in Rome?"), 30)
        assert time.monotonic() - started < 10 and model.request_count == 0
    assert result.status == "failed" and what in (result.error or "")
    assert "0123456789" not in (result.error or "")


@pytest.mark.parametrize("how", ["run", "stream", "start"])
async def test_an_oversize_input_is_refused_before_anything_starts(
    how: str, client: Client, task_queue: str
) -> None:
    """A 3 MB prompt: ValueError naming the limit, no raw RPCError, and no workflow.

    `start` is `astart`, what the HTTP routes (`POST /runs`, A2A) start runs with.
    """
    agent = weather_agent(base_url="http://unused", task_queue=task_queue, temporal=client)
    run_id = uuid.uuid4().hex
    prompt = "x" * (3 * 1024 * 1024)
    with pytest.raises(ValueError, match=r"too large: .* over the 1\.5 MB limit") as info:
        if how == "run":
            await agent.arun(prompt, run_id=run_id)
        elif how == "start":
            await agent.astart(prompt, run_id=run_id)
        else:
            async for _ in agent.stream_chat(prompt, run_id=run_id):
                pass
    assert "Blob data size" not in str(info.value)
    with pytest.raises(RPCError):
        await client.get_workflow_handle(run_id).describe()


async def test_secrets_never_reach_the_ui_history_log_or_result(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Credentials in base_url and a key echoed by the provider are masked everywhere."""
    key = "sk-test-0123456789abcdefSECRET"
    port = free_port()
    unreachable = f"http://alice:hunter22pw@127.0.0.1:{port}/v1?api-key=QUERYSECRET42"
    agent = weather_agent(
        base_url=unreachable, task_queue=task_queue, temporal=client, store=FileStore(tmp_path)
    )
    agent.definition.api_key = key
    run_id = uuid.uuid4().hex
    caplog.set_level(logging.INFO)
    pending = asyncio.ensure_future(agent.arun("What is the weather in Rome?", run_id=run_id))
    try:

        async def last_failure() -> str | None:
            try:
                desc = await client.get_workflow_handle(run_id).describe()
            except RPCError:  # not started yet
                return None
            for act in desc.raw_description.pending_activities:
                if act.attempt >= 2 and act.last_failure.message:
                    return str(act.last_failure.message)
            return None

        shown: list[str] = []

        async def poll() -> bool:
            message = await last_failure()
            if message:
                shown.append(message)
            return bool(message)

        deadline = time.monotonic() + 30
        while not await poll():
            assert time.monotonic() < deadline, "the generation was not retried"
            await asyncio.sleep(0.1)
    finally:
        pending.cancel()
        await client.get_workflow_handle(run_id).terminate("test done")
    # what the Temporal UI shows as the activity's last failure
    assert f"unreachable at http://***@127.0.0.1:{port}/v1" in shown[0]
    # a provider that echoes the key: the run fails with a masked error
    with ScriptedModelServer([Fail(401, f"Incorrect API key provided: {key}")]) as model:
        agent.definition.base_url = model.base_url
        result = await agent.arun("What is the weather in Rome?")
    assert result.status == "failed" and "Incorrect API key provided: ***" in (result.error or "")
    stored = (tmp_path / f"{result.run_id}.jsonl").read_text()
    histories = [
        (await client.get_workflow_handle(r).fetch_history()).to_json()
        for r in (run_id, result.run_id)
    ]
    projected = [e.to_json() for e in await TemporalStore(client).aload(result.run_id)]
    for text in [*shown, result.error or "", stored, caplog.text, *histories, *projected]:
        for secret in (key, "hunter22pw", "QUERYSECRET42", "alice:"):
            assert secret not in text


async def test_keys_in_tool_calls_and_request_headers_never_reach_history(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A key the model puts in a tool call is masked; credential headers and query values
    reach the model but stay out of history, the store and the result."""
    key = "sk-test-toolcall-0123456789"
    header, signature = "hdr-SECRET-77770000", "sig-SECRET-99990000"
    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"The weather in {city} is sunny."

    script = [CallTool("get_weather", {"city": f"London {key}"}), Reply(f"Done, {key}.")]
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            tools=[get_weather],
            extra_headers={"api-key": header, "X-Title": "boundary test"},
            extra_query={"sig": signature, "api-version": "2024-06-01"},
        )
        agent.definition.api_key = key
        result = await agent.arun("What is the weather in London?")
        # the options still reach the model, from the worker's definition
        assert model.last_headers["api-key"] == header
        assert model.last_headers["x-title"] == "boundary test"
        assert (
            f"sig={signature}" in model.last_query and "api-version=2024-06-01" in model.last_query
        )
    assert result.status == "completed"
    assert result.final_output == "Done, ***."
    assert seen == ["London ***"]  # the tool is given what history holds
    history = (await client.get_workflow_handle(result.run_id).fetch_history()).to_json()
    texts = [
        history,
        str(await client.get_workflow_handle(result.run_id).fetch_history()),
        (tmp_path / f"{result.run_id}.jsonl").read_text(),
        *(e.to_json() for e in result.events),
    ]
    for text in texts:
        for secret in (key, header, signature):
            assert secret not in text


async def test_a_streamed_reply_never_shows_the_key(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Text deltas (signals in the run's history, events to followers) are masked too."""
    key = "sk-test-streamed-0123456789"
    with ScriptedModelServer([Reply(f"the key is {key} indeed")]) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            tools=[],
        )
        agent.definition.api_key = key
        run_id = uuid.uuid4().hex
        events = [e async for e in agent.stream_chat("Tell me.", run_id=run_id, stream_text=True)]
    deltas = "".join(e.text or "" for e in events if e.type == "text_delta")
    assert deltas == "the key is *** indeed"
    history = await client.get_workflow_handle(run_id).fetch_history()
    # the deltas' batches are payloads inside the signals' payloads: decode
    # base64 twice over, as the stream nests them
    inner, layer = [], [history.to_json()]
    for _ in range(2):
        layer = [
            decoded
            for text in layer
            for blob in re.findall(r"[A-Za-z0-9+/]{24,}={0,2}", text)
            for decoded in _base64_text(blob)
        ]
        inner += layer
    # the deltas were decoded and searched
    assert any('{"attempt":1,"text":' in text for text in inner)
    for text in [
        history.to_json(),
        str(history),
        *inner,
        (tmp_path / f"{run_id}.jsonl").read_text(),
    ]:
        assert key not in text


def _base64_text(blob: str) -> list[str]:
    """`blob` decoded, if it is base64 at all."""
    with contextlib.suppress(ValueError):
        return [base64.b64decode(blob, validate=True).decode("utf-8", "replace")]
    return []
