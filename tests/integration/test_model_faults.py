"""Model endpoint faults end to end: retried with backoff through Temporal, and the run completes.

The mapping of each `openai` error is unit-tested in `tests/unit/test_activities.py`;
here the whole path runs (real dev server, real `openai` client, the embedded
worker) and the retry is read back from history: the generation's second
attempt carries the first attempt's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.activities.registry import AgentDefinition, AgentRegistry
from agentor_temporal.testing import (
    Fail,
    Hang,
    Raw,
    Reply,
    ScriptedModelServer,
    Step,
    tool_then_answer,
)
from agentor_temporal.workflows import policies

from helpers import ANSWER, PROMPT, free_port, weather_agent
from tls import TlsProxy, make_certs


class Recorder:
    """A model script that plays `first` once, then the default agent, timing each request."""

    def __init__(self, first: Step) -> None:
        self.first: Step | None = first
        self.times: list[float] = []

    def __call__(self, request: dict[str, Any]) -> Step:
        self.times.append(time.monotonic())
        step, self.first = self.first, None
        return step if step is not None else tool_then_answer(request)


async def _first_generation_attempts(client: Client, run_id: str) -> tuple[int, str]:
    """(attempt, previous attempt's failure) of the run's first generation."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            return attrs.attempt, attrs.last_failure.message
    raise AssertionError("no activity started")


@pytest.mark.parametrize(
    "fault, failure",
    [
        (Fail(429, "Rate limit reached", retry_after=2), "answered 429: Rate limit reached"),
        (Fail(500, "The server had an error"), "answered 500: The server had an error"),
        (Fail(503, "The engine is overloaded"), "answered 503: The engine is overloaded"),
        # a read timeout: the request (timeout=0.5 below) outlives the client's patience
        (Hang(3), "Model endpoint timed out"),
    ],
    ids=["429-retry-after", "500", "503", "read-timeout"],
)
async def test_transient_model_faults_are_retried_and_the_run_completes(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    fault: Step,
    failure: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """429 (honouring Retry-After), 5xx and read timeouts are retried; the run completes.

    Each failed attempt is said in one line: the SDK's 'Completing activity as
    failed' with a traceback from deep inside followed every one of them (a
    provider outage of five minutes printed dozens into the user's script).
    """
    script = Recorder(fault)
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            timeout=0.5,
        )
        result = await agent.arun(PROMPT)

    assert result.status == "completed" and result.final_output == ANSWER
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if failure in m and "attempt 1" in m], said
    assert not [m for m in said if "Completing activity as failed" in m], said
    assert len(script.times) == 3  # the failed request, its retry, the answer
    attempt, previous = await _first_generation_attempts(client, result.run_id)
    assert attempt == 2 and failure in previous
    if isinstance(fault, Fail) and fault.retry_after:
        # Retry-After (2 s) wins over the policy's first interval (1 s)
        assert script.times[1] - script.times[0] >= fault.retry_after - 0.1
    assert [e.to_dict() for e in FileStore(tmp_path).load(result.run_id)] == [
        e.to_dict() for e in await TemporalStore(client).aload(result.run_id)
    ]


async def test_refused_connection_is_retried_until_the_endpoint_is_up(
    client: Client, task_queue: str
) -> None:
    """A model endpoint that refuses connections is retried; once it listens, the run completes."""
    port = free_port()
    agent = weather_agent(
        base_url=f"http://127.0.0.1:{port}/v1", task_queue=task_queue, temporal=client
    )
    run_id = f"refused-{task_queue}"
    pending = asyncio.create_task(agent.arun(PROMPT, run_id=run_id))
    try:

        async def failed_once() -> str | None:
            try:
                desc = await client.get_workflow_handle(run_id).describe()
            except Exception:
                return None
            for act in desc.raw_description.pending_activities:
                if act.attempt >= 2:
                    return str(act.last_failure.message)
            return None

        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = await failed_once()
            await asyncio.sleep(0.05)
        assert message is not None, "the generation was not retried"
        assert f"unreachable at http://127.0.0.1:{port}/v1/chat/completions" in message
        # why, not only openai's "Connection error."
        assert "[Errno 111]" in message, message
        with ScriptedModelServer(port=port) as model:
            result = await asyncio.wait_for(pending, 60)
            assert model.request_count == 2
    finally:
        pending.cancel()
    assert result.status == "completed" and result.final_output == ANSWER


class Trickler:
    """An endpoint whose first request gets its headers and then a keep-alive every 0.2 s,
    never its end (a proxy waiting on a stuck upstream); later ones go to `upstream`."""

    def __init__(self, upstream: ScriptedModelServer, streamed: bool) -> None:
        self.upstream = upstream
        self.streamed = streamed
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.connections > 1:
                await self._pipe(reader, writer)
                return
            await reader.readuntil(b"\r\n\r\n")
            kind = "text/event-stream" if self.streamed else "application/json"
            length = "" if self.streamed else "Content-Length: 100000\r\n"
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n{length}\r\n".encode())
            while True:
                writer.write(b": keep-alive\n\n" if self.streamed else b" ")
                await writer.drain()
                await asyncio.sleep(0.2)
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client gave up on it
        finally:
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream.port)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        try:
            await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        finally:
            up_writer.close()


async def test_an_endpoint_dropping_connection_attempts_is_bounded_and_said(
    client: Client, task_queue: str
) -> None:
    """An endpoint that silently drops connection attempts (a firewall) is given
    MODEL_CONNECT_LIMIT (30 s) per try, not the request's 570 s (the kernel's SYN retries,
    ~127 s, in silence), and the retry's message says that nothing accepted the connection."""
    definition = AgentDefinition(
        name="A", model="m", tools=[], api_key="sk-connect-0001", base_url="http://unused/v1"
    )
    made = AgentRegistry([definition]).openai_client(definition)
    try:
        assert made.timeout.connect == policies.MODEL_CONNECT_LIMIT.total_seconds() == 30
        assert made.timeout.read == policies.MODEL_REPLY_LIMIT.total_seconds()
    finally:
        await made.close()

    # a listener whose accept queue is full: the kernel drops further SYNs, as a firewall does
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            agent = weather_agent(
                base_url=f"http://127.0.0.1:{port}/v1",
                task_queue=task_queue,
                temporal=client,
                timeout=0.5,  # the agent's own bound: connect within it too
            )
            run_id = f"dropped-{task_queue}"
            pending = asyncio.create_task(agent.arun(PROMPT, run_id=run_id))
            try:

                async def failure() -> str | None:
                    with contextlib.suppress(Exception):
                        desc = await client.get_workflow_handle(run_id).describe()
                        for act in desc.raw_description.pending_activities:
                            if act.attempt >= 2:
                                return str(act.last_failure.message)
                    return None

                message = None
                deadline = time.monotonic() + 30
                while message is None and time.monotonic() < deadline:
                    message = await failure()
                    await asyncio.sleep(0.05)
            finally:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
                with contextlib.suppress(Exception):  # cancelling it may have ended it
                    await client.get_workflow_handle(run_id).terminate("test over")
    assert message is not None, "the generation was not retried"
    assert message.startswith(
        f"Model endpoint at http://127.0.0.1:{port}/v1/chat/completions did not accept a "
        "connection within 0.5 s (nothing answered: a firewall"
    ), message


@pytest.mark.parametrize("streamed", [True, False], ids=["keep-alive-events", "trickled-body"])
async def test_a_reply_kept_open_for_ever_is_a_failed_request_retried(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
    streamed: bool,
) -> None:
    """A reply that never ends though bytes keep coming is given up at MODEL_REPLY_LIMIT and
    retried; the run completes (the client's timeout bounds each read only: the request
    was held for ever, each attempt timed out and its retry joined it)."""
    monkeypatch.setattr(policies, "MODEL_REPLY_LIMIT", timedelta(seconds=2), raising=False)
    trickler = Trickler(model, streamed)
    async with trickler as base_url:
        agent = weather_agent(base_url=base_url, task_queue=task_queue, temporal=client)
        run_id = f"kept-open-{task_queue}"
        if streamed:
            events = agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)
            received = await asyncio.wait_for(_all(events), 30)
            assert received[-1].type == "run_end" and received[-1].status == "completed"
        else:
            result = await asyncio.wait_for(agent.arun(PROMPT, run_id=run_id), 30)
            assert result.status == "completed" and result.final_output == ANSWER
    assert trickler.connections >= 2 and model.request_count == 2
    attempt, previous = await _first_generation_attempts(client, run_id)
    said = "sent no part of its streamed reply for 2 s" if streamed else "no complete reply in 2 s"
    assert attempt == 2 and said in previous and "kept the connection open" in previous
    assert base_url.removesuffix("/v1") in previous
    if not streamed:
        return
    # a streamed answer that keeps coming is not cut at the limit, however long it takes
    with ScriptedModelServer([Reply("one two three four five six")], chunk_delay=0.5) as slow:
        agent = weather_agent(base_url=slow.base_url, task_queue=task_queue, temporal=client)
        started = time.monotonic()
        events = agent.stream_chat(PROMPT, run_id=f"slow-{run_id}", stream_text=True)
        received = await asyncio.wait_for(_all(events), 30)
    assert time.monotonic() - started > 2.5 and slow.request_count == 1
    assert received[-1].type == "run_end" and received[-1].text == "one two three four five six"


async def _all(events: Any) -> list[Any]:
    return [e async for e in events]


async def test_an_untrusted_tls_certificate_fails_the_run_at_once_saying_so(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """An endpoint whose certificate this worker does not trust: the same certificate is
    refused on every retry, so the run fails at once, saying what to fix (before: "Model
    endpoint unreachable: Connection error.", retried for MODEL_RETRY_BUDGET, 5 min)."""
    with TlsProxy(
        model.base_url.split("//")[1].split("/")[0], make_certs(tmp_path), require_client_cert=False
    ) as proxy:
        agent = weather_agent(
            base_url=f"https://{proxy.address}/v1", task_queue=task_queue, temporal=client
        )
        result = await asyncio.wait_for(agent.arun(PROMPT), 30)
    assert result.status == "failed", result.status
    (ended,) = [e for e in result.events if e.type == "run_end"]
    said = str(ended.error)
    assert f"https://{proxy.address}/v1" in said and "certificate is not trusted" in said, said
    assert "not retried" in said and model.request_count == 0, said


async def test_an_error_event_mid_stream_is_retried_and_the_run_completes(
    client: Client, task_queue: str
) -> None:
    """A provider overloaded mid-reply (an SSE error event) is retried, not blamed on us."""
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "Hel"}}],
    }
    overloaded = {"error": {"message": "Overloaded", "type": "server_error"}}
    events = "".join(f"data: {json.dumps(e)}\n\n" for e in (chunk, overloaded))
    script = Recorder(Raw(events + "data: [DONE]\n\n", content_type="text/event-stream"))
    with ScriptedModelServer(script) as model:
        agent = weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client)
        run_id = f"overloaded-{task_queue}"
        received = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
    assert received[-1].type == "run_end" and received[-1].status == "completed"
    assert "".join(e.text or "" for e in received if e.type == "message") == ANSWER
    assert len(script.times) == 3  # the failed request, its retry, the answer
    attempt, previous = await _first_generation_attempts(client, run_id)
    assert attempt == 2 and "error mid-reply: Overloaded" in previous


_HELLO = {
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
}
_FINISHED = {
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}],
}


@pytest.mark.parametrize(
    "body, content_type, failure",
    [
        # the connection closed mid-event: its JSON cut off, no [DONE], no finish_reason
        (
            f'data: {json.dumps(_HELLO)}\n\ndata: {{"object": "chat.comp',
            "text/event-stream",
            "streamed reply ended after 1 chunks, before it was complete",
        ),
        # closed between events
        (
            f"data: {json.dumps(_HELLO)}\n\n",
            "text/event-stream",
            "streamed reply ended after 1 chunks, before it was complete",
        ),
        # closed after the finish_reason, before the usage count and [DONE]: taken,
        # the answer would record 0 tokens for a generation that was paid for
        (
            f"data: {json.dumps(_HELLO)}\n\ndata: {json.dumps(_FINISHED)}\n\n",
            "text/event-stream",
            "streamed reply ended after 2 chunks, after its finish_reason but before its usage",
        ),
        # a proxy's page where the events should be
        (
            "<html><body>Gateway timeout</body></html>",
            "text/html",
            "not a stream of events, but text/html",
        ),
    ],
    ids=["mid-json", "between-events", "before-usage", "html"],
)
async def test_a_streamed_reply_cut_off_is_retried_not_taken_as_the_answer(
    client: Client, task_queue: str, tmp_path: Path, body: str, content_type: str, failure: str
) -> None:
    """A streamed reply that ends before it is complete (no [DONE], and no finish_reason or
    no usage count after it) is a failed request."""
    script = Recorder(Raw(body, content_type=content_type))
    with ScriptedModelServer(script) as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
        )
        run_id = f"cut-off-{task_queue}"
        received = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
    assert received[-1].type == "run_end" and received[-1].status == "completed"
    assert len(script.times) == 3  # the cut-off request, its retry, the answer
    attempt, previous = await _first_generation_attempts(client, run_id)
    assert attempt == 2 and failure in previous, previous
    # the part that arrived was never recorded as a turn's answer
    texts = [e.text for e in FileStore(tmp_path).load(run_id) if e.type == "message"]
    assert "Hel" not in texts and "Hello" not in texts and texts[-1] == ANSWER
