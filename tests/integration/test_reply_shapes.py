"""A model reply of a shape or value servers really send is read, or refused clearly.

Real dev server, embedded worker, the real `openai` client against the
scripted model server. An integer past Python's 4300-digit limit anywhere in
a reply (standard JSON) failed the run as an error of our own code (a whole
reply) or as "not JSON" after every retry (a streamed one), throwing away a
paid answer; content given as a list of parts and tool-call arguments given
as an object were refused as malformed on every retry (whole or streamed);
a stream of data lines that are no chunk at all (`null`, `[1, 2]`, a string)
was taken as an empty final answer; and streamed calls without ids were all
recorded and answered under the one id "".
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import Event, function_tool
from agentor_temporal.testing import Raw, Reply, ScriptedModelServer, Step

from helpers import scripted_agent

#: an integer of 5000 digits: standard JSON, past what Python reads by default
HUGE = "9" * 5000


@function_tool
def echo(text: str) -> str:
    """Echoes.

    Args:
        text: what to echo.
    """
    return text


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    body["choices"][0]["finish_reason"] = finish
    return f"data: {json.dumps(body)}\n\n"


def _sse(*lines: str) -> Raw:
    return Raw("".join(lines) + "data: [DONE]\n\n", content_type="text/event-stream")


def _completion(message: dict[str, Any], finish: str = "stop", usage: str = "") -> Raw:
    body = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        }
    )
    return Raw(body[:-1] + usage + "}")


#: the usage count's fields, one of them an integer too long for Python to read
HUGE_USAGE = f', "usage": {{"prompt_tokens": {HUGE}, "completion_tokens": 3, "total_tokens": 4}}'
HUGE_USAGE_CHUNK = (
    'data: {"object": "chat.completion.chunk", "choices": [], "created": '
    + HUGE
    + HUGE_USAGE
    + "}\n\n"
)


async def _events(agent: Any, streamed: bool, **kwargs: Any) -> list[Event]:
    if streamed:
        return [e async for e in agent.stream_chat("go", stream_text=True, **kwargs)]
    return (await agent.arun("go", **kwargs)).events


@pytest.mark.parametrize("via", ["plain", "streamed", "client-options"])
async def test_an_integer_too_long_for_python_in_a_reply_is_read(
    via: str, client: Client, task_queue: str
) -> None:
    """A reply holding a 5000-digit integer is the run's answer, its count read as 0, asked once."""
    streamed = via == "streamed"
    reply: Step = (
        _sse(_chunk({"content": "hi"}, "stop"), HUGE_USAGE_CHUNK)
        if streamed
        else _completion({"role": "assistant", "content": "hi"}, usage=HUGE_USAGE)
    )
    with ScriptedModelServer([reply, Reply("asked twice")]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[echo])
        if via == "client-options":
            agent.definition.model_settings["timeout"] = 30  # the client's own request path
        events = await asyncio.wait_for(_events(agent, streamed), 30)
        assert model.request_count == 1
    end = events[-1]
    assert end.type == "run_end" and end.status == "completed", end.error
    [generation] = [e for e in events if e.type == "generation"]
    assert generation.text == "hi"
    assert generation.usage is not None and generation.usage.input_tokens == 0
    assert generation.usage.output_tokens == 3


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_content_parts_and_object_arguments_are_read(
    streamed: bool, client: Client, task_queue: str
) -> None:
    """Content as a list of parts is its text parts joined; arguments as an object run the tool."""
    call = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]}],
        "tool_calls": [
            {
                "id": "c_obj",
                "type": "function",
                "function": {"name": "echo", "arguments": {"text": "from an object"}},
            }
        ],
    }
    parts = [{"type": "text", "text": "Here "}, {"type": "text", "text": "it is."}]
    script: list[Step] = [
        _completion(call, "tool_calls"),
        _completion({"role": "assistant", "content": parts}),
    ]
    if streamed:
        [tool_call] = call["tool_calls"]
        script = [
            _sse(_chunk({"tool_calls": [{**tool_call, "index": 0}]}, "tool_calls")),
            _sse(_chunk({"content": parts[:1]}), _chunk({"content": parts[1:]}, "stop")),
        ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[echo])
        started = time.monotonic()
        events = await asyncio.wait_for(_events(agent, streamed), 30)
        took = time.monotonic() - started
        assert model.request_count == 2
    end = events[-1]
    assert end.type == "run_end" and end.status == "completed", end.error
    assert [e.text for e in events if e.type == "message"] == ["Here it is."]
    [answer] = [e for e in events if e.type == "tool_result"]
    assert answer.call_id == "c_obj" and answer.error is None
    assert answer.result == "from an object"
    assert took < 10  # not a malformed reply retried


#: data lines that are no chunk, and how the refusal names them
NOT_CHUNKS = {
    "null": ("data: null\n\n", "null"),
    "list": ("data: [1, 2]\n\n", "a list"),
    "string": ('data: "text"\n\n', "a string"),
}


@pytest.mark.parametrize("kind", list(NOT_CHUNKS))
async def test_a_streamed_line_that_is_no_chunk_fails_clearly_and_resume_goes_on(
    kind: str, client: Client, task_queue: str
) -> None:
    """A stream of non-object data lines is a malformed reply, not an empty final answer."""
    line, what = NOT_CHUNKS[kind]
    with ScriptedModelServer(lambda request: _sse(line, _chunk({}, "stop"))) as model:
        agent = scripted_agent(model, client, task_queue, tools=[echo])
        started = time.monotonic()
        run_id = uuid.uuid4().hex
        events = await asyncio.wait_for(_events(agent, True, run_id=run_id), 30)
        took = time.monotonic() - started
        end = events[-1]
        assert end.type == "run_end" and end.status == "failed", end
        assert f"malformed (a streamed chunk is {what}, not an object)" in (end.error or "")
        assert took < 20
        model.set_script([Reply("done")])
        resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == "done", resumed.error


async def test_streamed_calls_without_ids_are_named_as_a_whole_replys_are(
    client: Client, task_queue: str
) -> None:
    """Streamed calls whose id never came are call_0, call_1 (they were all "", one id shared)."""

    def call(index: int, text: str) -> dict[str, Any]:
        arguments = json.dumps({"text": text})
        return {
            "index": index,
            "type": "function",
            "function": {"name": "echo", "arguments": arguments},
        }

    reply = _sse(
        _chunk({"tool_calls": [call(0, "a")]}), _chunk({"tool_calls": [call(1, "b")]}, "tool_calls")
    )
    with ScriptedModelServer([reply, Reply("done")]) as model:
        agent = scripted_agent(model, client, task_queue, tools=[echo])
        events = await asyncio.wait_for(_events(agent, True), 30)
        sent = [
            (m.get("tool_call_id"), m.get("content"))
            for m in model.requests[1]["messages"]
            if m.get("role") == "tool"
        ]
    assert events[-1].type == "run_end" and events[-1].status == "completed", events[-1]
    answers = {e.call_id: e.result for e in events if e.type == "tool_result"}
    assert answers == {"call_0": "a", "call_1": "b"}
    assert sorted(sent) == [("call_0", "a"), ("call_1", "b")]


def _error_event(data: str, done: bool) -> Raw:
    text = _chunk({"content": "Hel"}) + f"event: error\ndata: {data}\n\n"
    return Raw(text + ("data: [DONE]\n\n" if done else ""), content_type="text/event-stream")


@pytest.mark.parametrize("done", [True, False], ids=["then-done", "then-closed"])
async def test_an_error_event_without_an_error_key_is_the_providers_failure(
    done: bool, client: Client, task_queue: str
) -> None:
    """`event: error` whose data has no `error` key: the provider's message, its kind honoured.

    The client passed such an event on as a chunk with no choices: followed by
    [DONE] the run completed with the text before it, "Hel"; closed after it,
    the reply was retried for minutes as cut off, the provider's message
    (here a final one) never shown.
    """
    final = json.dumps({"message": "prompt is too long", "code": "context_length_exceeded"})
    transient = json.dumps({"message": "upstream overloaded"})
    script: list[Step] = [_error_event(transient, done), Reply("done")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[echo])
        retried = await asyncio.wait_for(_events(agent, True), 30)
        assert model.request_count == 2
        model.set_script([_error_event(final, done)])
        started = time.monotonic()
        run_id = uuid.uuid4().hex
        refused = await asyncio.wait_for(_events(agent, True, run_id=run_id), 30)
        took = time.monotonic() - started
        assert model.request_count == 3
        model.set_script([Reply("fixed")])
        resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert retried[-1].type == "run_end" and retried[-1].status == "completed", retried[-1]
    assert [e.text for e in retried if e.type == "message"] == ["done"]
    end = refused[-1]
    assert end.type == "run_end" and end.status == "failed", end
    assert "refused the request mid-reply: prompt is too long (context_length_exceeded)" in (
        end.error or ""
    )
    assert took < 10
    assert resumed.status == "completed" and resumed.final_output == "fixed", resumed.error
