"""A model endpoint that takes a request and holds it unanswered (a hung provider, a proxy
waiting on a stuck upstream): the process running it says so once, not after 570 s."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from temporalio.client import Client

from agentor_temporal.activities import _slow_model
from agentor_temporal.testing import Hang, Reply, ScriptedModelServer

from helpers import PROMPT, scripted_agent


async def test_a_model_request_held_unanswered_is_said_once(
    client: Client,
    task_queue: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request the endpoint held unanswered left the run silent for up to 570 s an
    attempt: nothing in the worker's log nor the caller's. Now, past
    `MODEL_SILENT_SAY_AFTER`, one line names the endpoint, run, turn and how long it is
    waited for; a reply that comes after it is taken as ever (asked once)."""
    monkeypatch.setattr(_slow_model, "MODEL_SILENT_SAY_AFTER", 1.0)
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    with ScriptedModelServer([Hang(3.0, Reply("sunny"))]) as model:
        agent = scripted_agent(model, client, task_queue)
        started = time.monotonic()
        result = await agent.arun(PROMPT)
        took = time.monotonic() - started
        requests = model.request_count
    assert result.status == "completed" and result.final_output == "sunny", result
    assert requests == 1, requests
    said = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
    assert len(said) == 1, said
    assert model.base_url.split("//")[1].split("/")[0] in said[0], said
    assert f"run {result.run_id!r}" in said[0] and "turn 1" in said[0], said
    assert "570 s" in said[0], said
    assert took >= 3.0, took


async def test_a_model_answering_in_time_says_nothing(
    client: Client,
    task_queue: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reply within the bound is no sign of trouble: nothing said."""
    monkeypatch.setattr(_slow_model, "MODEL_SILENT_SAY_AFTER", 5.0)
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    with ScriptedModelServer([Hang(0.5, Reply("sunny"))]) as model:
        result = await scripted_agent(model, client, task_queue).arun(PROMPT)
    assert result.status == "completed", result
    assert not [r for r in caplog.records if "has not answered" in r.getMessage()], caplog.text


async def test_a_streamed_request_held_before_its_first_byte_is_said_once(
    client: Client,
    task_queue: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for a streamed request (`stream_chat(stream_text=True)`): a provider
    holding it before its first byte is said once, and the text then streams as ever."""
    monkeypatch.setattr(_slow_model, "MODEL_SILENT_SAY_AFTER", 1.0)
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    with ScriptedModelServer([Hang(3.0, Reply("sunny"))]) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = f"silent-{uuid.uuid4().hex[:8]}"
        events = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
        requests = model.request_count
    assert events[-1].type == "run_end" and events[-1].status == "completed", events[-3:]
    assert requests == 1, requests
    said = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
    assert len(said) == 1, said
    assert f"run {run_id!r}" in said[0], said


async def test_a_streamed_reply_that_goes_quiet_midway_is_said_once(
    client: Client,
    task_queue: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider that hangs in the middle of a streamed reply (its first parts came, then
    nothing) was waited for up to 570 s a gap without a word: said once, however many
    gaps, and the reply then taken as ever (asked once)."""
    monkeypatch.setattr(_slow_model, "MODEL_SILENT_SAY_AFTER", 1.0)
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    # a part at once, then 1.6 s of quiet after each word
    with ScriptedModelServer([Reply("sunny and")], chunk_delay=1.6) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = f"quiet-{uuid.uuid4().hex[:8]}"
        events = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
        requests = model.request_count
    assert events[-1].type == "run_end" and events[-1].status == "completed", events[-3:]
    assert events[-2].text == "sunny and", events[-2]
    assert requests == 1, requests
    said = [r.getMessage() for r in caplog.records if "quiet" in r.getMessage()]
    assert len(said) == 1, said
    assert model.base_url.split("//")[1].split("/")[0] in said[0], said
    assert f"run {run_id!r}" in said[0] and "after 2 parts" in said[0], said
    assert "570 s" in said[0] and "part" in said[0], said
    assert not [r for r in caplog.records if "has not answered" in r.getMessage()], said
