"""A reply the provider ended with nothing in it fails the run saying why, and resume goes on.

A reply ended by the provider's content filter (`finish_reason`
"content_filter") or by its token limit ("length") before any text or tool
call completed the run with an empty answer, as if the model had nothing to
say. Real dev server, the real `openai` client, plain and streamed replies.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal.testing import Raw, Reply, ScriptedModelServer

from helpers import weather_agent

SAYS = {
    "content_filter": "content filter withheld it (finish_reason 'content_filter')",
    "length": "reached its token limit (finish_reason 'length')",
}


def _empty(reason: str, streamed: bool) -> Raw:
    if not streamed:
        message = {"role": "assistant", "content": None}
        choice = {"index": 0, "message": message, "finish_reason": reason}
        return Raw(json.dumps({"object": "chat.completion", "choices": [choice]}))
    chunks = [
        {"index": 0, "delta": {"role": "assistant", "content": ""}},
        {"index": 0, "delta": {}, "finish_reason": reason},
    ]
    body = "".join(
        f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [c]})}\n\n"
        for c in chunks
    )
    return Raw(body + "data: [DONE]\n\n", content_type="text/event-stream")


async def _collect(stream: Any) -> list[Any]:
    return [event async for event in stream]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("reason", ["content_filter", "length"])
async def test_a_reply_stopped_empty_fails_the_run_saying_why_and_resume_goes_on(
    reason: str, streamed: bool, client: Client, task_queue: str
) -> None:
    with ScriptedModelServer([_empty(reason, streamed), Reply("Sunny.")]) as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        run_id = uuid.uuid4().hex
        if streamed:
            events = await asyncio.wait_for(
                _collect(agent.stream_chat("Weather?", run_id=run_id, stream_text=True)), 30
            )
            status, error = events[-1].status, events[-1].error
        else:
            result = await asyncio.wait_for(agent.arun("Weather?", run_id=run_id), 30)
            status, error = result.status, result.error
        assert status == "failed", status
        assert error is not None and SAYS[reason] in error, error
        assert "\n" not in error
        assert model.request_count == 1  # not retried: the same input meets the same stop
        resumed = await asyncio.wait_for(agent.aresume(run_id), 30)
    assert resumed.status == "completed" and resumed.final_output == "Sunny."
