"""A reply whose answer is not in `content` or `tool_calls` is read, or fails the run saying so.

A reply calling a tool through the legacy `function_call` field (finish_reason
"function_call", as servers speaking the older functions API answer) and one
whose only content is audio (its transcript) or images completed the run with
an empty final output: the call silently dropped, the spoken answer lost, and
the images taken as the model having nothing to say. The call is now run (id
`call_0`, as a call without an id), the transcript is the reply's text, and a
reply of images only fails the run at once naming what the model sent; resume
asks again. Real dev server, the real `openai` client, plain and streamed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import Event
from agentor_temporal.testing import Raw, Reply, ScriptedModelServer, Step

from helpers import scripted_agent


def _reply(message: dict[str, Any], finish: str, streamed: bool) -> Step:
    """`message` as a whole completion, or streamed as one delta and a finishing chunk."""
    if not streamed:
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return Raw(json.dumps({"object": "chat.completion", "choices": [choice]}))
    chunks = [
        {"index": 0, "delta": message, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": finish},
    ]
    body = "".join(
        f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [c]})}\n\n"
        for c in chunks
    )
    return Raw(body + "data: [DONE]\n\n", content_type="text/event-stream")


async def _run(agent: Any, run_id: str, streamed: bool) -> tuple[str, str | None, str | None]:
    """The run's status, error and last generation's text."""
    if streamed:
        events: list[Event] = [
            e async for e in agent.stream_chat("Weather?", run_id=run_id, stream_text=True)
        ]
    else:
        events = (await agent.arun("Weather?", run_id=run_id)).events
    end = events[-1]
    texts = [e.text for e in events if e.type == "generation"]
    return end.status, end.error, texts[-1] if texts else None


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_a_legacy_function_call_runs_the_tool(
    streamed: bool, client: Client, task_queue: str
) -> None:
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    script = [_reply(legacy, "function_call", streamed), Reply("Sunny in Paris.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = uuid.uuid4().hex
        status, error, output = await asyncio.wait_for(_run(agent, run_id, streamed), 60)
        assert status == "completed", error
        assert model.request_count == 2, "the call was dropped: the model was not told"
        second = model.requests[1]["messages"]
        [asked] = [m for m in second if m.get("role") == "assistant" and m.get("tool_calls")]
        assert asked["tool_calls"][0]["function"]["name"] == "get_weather"
        [answer] = [m for m in second if m.get("role") == "tool"]
        assert answer["tool_call_id"] == asked["tool_calls"][0]["id"] == "call_0"
        assert "Paris" in answer["content"]
    assert output == "Sunny in Paris."


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_an_audio_reply_is_its_transcript(
    streamed: bool, client: Client, task_queue: str
) -> None:
    audio = {"id": "audio_1", "data": "UklGRg==", "expires_at": 0, "transcript": "Sunny."}
    spoken = {"role": "assistant", "content": None, "audio": audio}
    with ScriptedModelServer([_reply(spoken, "stop", streamed), Reply("asked twice")]) as model:
        agent = scripted_agent(model, client, task_queue)
        status, error, output = await asyncio.wait_for(_run(agent, uuid.uuid4().hex, streamed), 60)
        assert status == "completed", error
        assert model.request_count == 1
    assert output == "Sunny."


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_a_reply_of_images_only_fails_saying_so_and_resume_goes_on(
    streamed: bool, client: Client, task_queue: str
) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    drawn = {"role": "assistant", "content": [image]}
    with ScriptedModelServer([_reply(drawn, "stop", streamed), Reply("Sunny.")]) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = uuid.uuid4().hex
        status, error, _ = await asyncio.wait_for(_run(agent, run_id, streamed), 60)
        assert status == "failed", status
        assert error is not None and "image_url" in error and "no text" in error, error
        assert model.request_count == 1  # not retried: asked again, it draws again
        resumed = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert resumed.status == "completed" and resumed.final_output == "Sunny."
