"""Activities through `ActivityEnvironment`, against the scripted model server."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import ssl
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from openai import DefaultAsyncHttpxClient, Timeout
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentor_temporal import Agentor
from agentor_temporal.activities import (
    AgentActivities,
    AgentDefinition,
    AgentRegistry,
    function_tool,
)
from agentor_temporal.store import Event, FileStore
from agentor_temporal.testing import CallTool, Drop, Fail, Hang, Raw, Reply, ScriptedModelServer
from agentor_temporal.workflows.activity_types import (
    CallToolInput,
    DescribeAgentInput,
    GenerateInput,
    JournalInput,
)
from agentor_temporal.workflows.payloads import clip_to_size, encoded_size
from agentor_temporal.workflows.policies import MAX_TOOL_RESULT_BYTES


@function_tool
def echo(text: str) -> str:
    """Echo."""
    return text


@function_tool
def explode() -> str:
    """Raises."""
    raise KeyError("missing")


@function_tool
def huge() -> str:
    """Too big for a payload."""
    return "x" * (3 * 1024 * 1024)


@function_tool
def huge_emoji() -> str:
    """Too big for a payload once escaped, though shorter than the cut in characters."""
    return "\U0001f600" * 200_000  # 0.8 MB of UTF-8, 2.4 MB of escaped JSON


@function_tool
def complain() -> str:
    """Raises at length."""
    raise RuntimeError("é" * 3_000)  # 18 kB as encoded


def registry(base_url: str, store: object = None) -> AgentActivities:
    agent = AgentDefinition(
        name="A",
        model="m",
        instructions="sys",
        tools=[echo, explode, huge, huge_emoji],
        base_url=base_url,
        api_key="k",
        store=store,
    )  # type: ignore[arg-type]
    return AgentActivities(AgentRegistry([agent]))


def request(**kw: object) -> GenerateInput:
    return GenerateInput(
        run_id="r", agent="A", model="m", messages=[{"role": "user", "content": "hi"}], **kw
    )  # type: ignore[arg-type]


async def test_generate_returns_text_calls_usage_and_timing() -> None:
    with ScriptedModelServer(
        [CallTool("echo", {"text": "a"}, id="call_1"), Reply("done", reasoning="thought")]
    ) as model:
        acts = registry(model.base_url)
        first = await ActivityEnvironment().run(acts.generate, request())
        second = await ActivityEnvironment().run(acts.generate, request())
    assert first.calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "echo", "arguments": '{"text": "a"}'},
        }
    ]
    assert first.usage == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    assert first.started_at is not None and first.ended_at is not None
    assert first.started_at <= first.ended_at
    assert (second.text, second.reasoning, second.calls) == ("done", "thought", [])


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
async def test_retryable_statuses_are_retryable(status: int) -> None:
    with ScriptedModelServer([Fail(status, "busy", retry_after=7)]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(registry(model.base_url).generate, request())
    assert not info.value.non_retryable
    assert f"answered {status}: busy" in info.value.message
    assert info.value.next_retry_delay == timedelta(seconds=7)


@pytest.mark.parametrize(
    ("header", "delay"),
    [
        (86400, timedelta(minutes=5)),
        (float("inf"), timedelta(minutes=5)),
        (1e300, timedelta(minutes=5)),
        (-5, timedelta(0)),
        ("Wed, 21 Oct 2099 07:28:00 GMT", timedelta(minutes=5)),
        ("Wed, 21 Oct 2015 07:28:00 GMT", timedelta(0)),
        ("Fri, 31 Dec 99999 23:59:59 GMT", None),
    ],
    ids=["a-day", "inf", "1e300", "negative", "date-2099", "date-past", "date-unreadable"],
)
async def test_any_retry_after_is_a_bounded_retry(header: float | str, delay: timedelta) -> None:
    """Whatever Retry-After says, a 429 is retried after at most MAX_RETRY_AFTER, never at
    once as an unclassified error (an 'inf' raised OverflowError: retried for ever, unwarned)."""
    with ScriptedModelServer([Fail(429, "slow down", retry_after=header)]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(registry(model.base_url).generate, request())
    assert info.value.type == "ModelUnavailable" and not info.value.non_retryable
    assert "answered 429: slow down" in info.value.message
    assert info.value.next_retry_delay == delay
    # the wait is said (the worker's log, the pending call's last failure), not silent
    wait = f"asked again in {delay.total_seconds():g} s, as its Retry-After says" if delay else ""
    assert wait in info.value.message
    most = delay == timedelta(minutes=5)
    assert ("the most a Retry-After is waited" in info.value.message) == most


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_fail_at_once_with_the_providers_message(status: int) -> None:
    with ScriptedModelServer([Fail(status, "The model `m` does not exist")]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(registry(model.base_url).generate, request())
    assert info.value.non_retryable and info.value.type == "ModelRequestError"
    assert info.value.message == f"Model request failed with {status}: The model `m` does not exist"


def _stream_with(error: dict[str, Any]) -> Raw:
    """A streamed reply that begins, then carries `error` as an event."""
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "H"}}],
    }
    events = "".join(f"data: {json.dumps(e)}\n\n" for e in (chunk, {"error": error}))
    return Raw(events + "data: [DONE]\n\n", content_type="text/event-stream")


_QUOTA = "You exceeded your current quota, please check your plan and billing details."
_CONTEXT = "This model's maximum context length is 128000 tokens."


@pytest.mark.parametrize(
    "step, final, said",
    [
        (
            Raw({"error": {"message": _QUOTA, "type": "insufficient_quota"}}, status=429),
            True,
            f"failed with 429: {_QUOTA} (insufficient_quota: not a rate limit",
        ),
        (
            _stream_with({"message": _CONTEXT, "code": "context_length_exceeded"}),
            True,
            f"refused the request mid-reply: {_CONTEXT} (context_length_exceeded)",
        ),
        # a proxy relaying its upstream's 400 as a stream's error event
        (_stream_with({"message": "bad tools", "code": 400}), True, "bad tools (400)"),
        # what retrying does fix stays retried
        (
            Raw({"error": {"message": "Rate limit", "code": "rate_limit_exceeded"}}, status=429),
            False,
            "answered 429: Rate limit",
        ),
        (_stream_with({"message": "Overloaded", "code": 529}), False, "mid-reply: Overloaded"),
    ],
    ids=["quota-429", "context-mid-stream", "400-mid-stream", "rate-limit", "529-mid-stream"],
)
async def test_a_refusal_retrying_cannot_change_fails_at_once_whatever_its_status(
    step: Raw, final: bool, said: str
) -> None:
    """A spent quota (429 insufficient_quota) or a request refused in a stream's error
    event fails at once: both were retried for MODEL_RETRY_BUDGET (5 minutes), the same
    answer each time; a rate limit and an overloaded provider are still retried."""
    with ScriptedModelServer([step]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(
                registry(model.base_url).generate, request(stream_text=True)
            )
    assert info.value.non_retryable == final, info.value.message
    assert info.value.type == ("ModelRequestError" if final else "ModelUnavailable")
    assert said in info.value.message


async def test_connection_refused_and_dropped_connections_are_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(registry(f"http://127.0.0.1:{port}/v1").generate, request())
    assert not info.value.non_retryable and "unreachable" in info.value.message
    assert f"127.0.0.1:{port}" in info.value.message
    with ScriptedModelServer([Drop()]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(registry(model.base_url).generate, request())
    assert not info.value.non_retryable


async def test_read_timeout_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedModelServer([Hang(5)]) as model:
        acts = registry(model.base_url)
        acts.registry.get("A").model_settings["timeout"] = 0.3
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(acts.generate, request(model_settings={"timeout": 0.3}))
    assert not info.value.non_retryable and "timed out" in info.value.message


async def test_missing_api_key_is_a_clear_non_retryable_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = AgentDefinition(name="A", model="m")
    acts = AgentActivities(AgentRegistry([agent]))
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.generate, request())
    assert info.value.non_retryable and "OPENAI_API_KEY" in info.value.message


@pytest.mark.parametrize(
    "setting, fragment",
    [
        ({"api_key": "sk-abc123\n"}, "API key (api_key, or OPENAI_API_KEY) begins or ends"),
        ({"api_key": "sk-abc\x00123"}, "API key (api_key, or OPENAI_API_KEY) holds"),
        ({"env_key": "sk-abc123\r\n"}, "OPENAI_API_KEY) begins or ends with whitespace"),
        ({"extra_headers": {"X-Title": "a\r\nb"}}, "extra_headers['X-Title'] holds a line"),
        ({"timeout": -1}, "timeout must be a positive number of seconds"),
        # caught only when the client refuses to send it: a header name h11 rejects
        ({"extra_headers": {"X Title": "a"}}, "not sent: an HTTP header it would carry is"),
        ({"base_url": "localhost:1/v1"}, "not sent: base_url does not begin with http://"),
    ],
    ids=["key-newline", "key-nul", "env-key-crlf", "header-crlf", "timeout", "header-name", "url"],
)
async def test_a_request_that_cannot_be_sent_fails_at_once_naming_the_setting(
    setting: dict[str, Any], fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A setting the HTTP client cannot send is ours to fix: never retried as an outage."""
    with ScriptedModelServer([Reply("never")]) as model:
        acts = registry(setting.get("base_url", model.base_url))
        agent = acts.registry.get("A")
        # set after the definition checked its own: a run recorded before, a key
        # from the worker's environment
        if "api_key" in setting:
            agent.api_key = setting["api_key"]
        if "env_key" in setting:
            agent.api_key = None
            monkeypatch.setenv("OPENAI_API_KEY", setting["env_key"])
        if "extra_headers" in setting:
            agent.client_options["extra_headers"] = setting["extra_headers"]
        settings = {"timeout": setting["timeout"]} if "timeout" in setting else {}
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(acts.generate, request(model_settings=settings))
        assert model.request_count == 0
    error = info.value
    assert error.non_retryable and error.type == "ModelRequestError", error.message
    assert fragment in error.message
    assert "sk-abc" not in error.message and "a\r\nb" not in error.message


@pytest.mark.parametrize(
    "setting",
    [
        {"api_key": "sk-abc123\n"},
        {"api_key": " sk-abc123"},
        {"api_key": "sk-abc 123"},
        {"api_key": "sk-abc\u2026"},
        {"extra_headers": {"X-Title": "a\r\nb"}},
        {"extra_headers": {"X-Title": "a\nb"}},
        {"extra_headers": {"X-Title": "ab "}},
        {"timeout": -1},
        {"timeout": 0},
        {"timeout": float("nan")},
        {"timeout": True},
        {"timeout": "30"},
        # the client merges these into each request: every one failed, after the run began
        {"extra_headers": {"X-Title": object()}},
        {"extra_headers": {"X-Title": None}},
        {"default_headers": {"X-Title": 5}},
        {"extra_headers": {5: "a"}},
        {"extra_headers": [("X-Title", "a")]},
        {"extra_body": [1]},
        {"extra_query": "a=b"},
    ],
)
def test_an_agent_refuses_a_setting_the_client_could_never_send(setting: dict[str, Any]) -> None:
    """A key, header, client option or timeout no request could carry is refused where given."""
    with pytest.raises(ValueError) as info:
        Agentor(name="A", **setting)
    message = str(info.value)
    assert any(name in message for name in ("api_key", "extra_", "timeout")), message
    assert "sk-abc" not in message and "a\r\nb" not in message
    Agentor(name="A", api_key="sk-abc123", extra_headers={"X-Title": "a b"}, timeout=30)
    Agentor(name="A", extra_headers={"X-Raw": b"v"}, extra_body={"k": 1}, extra_query={"q": 1})
    Agentor(name="A", timeout=Timeout(30, connect=5))


def _chunk(delta: Any = None, **fields: Any) -> dict[str, Any]:
    choices = [{"index": 0, "delta": delta, "finish_reason": None}]
    return {"id": "x", "object": "chat.completion.chunk", "choices": choices, **fields}


def _sse(*events: Any) -> Raw:
    """A streamed reply of these events (each as it comes: JSON, or bytes as they are)."""
    data = b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )
    return Raw(data + b"data: [DONE]\n\n", content_type="text/event-stream")


def _call(**fields: Any) -> dict[str, Any]:
    return _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}, **fields}]})


def _reply(message: Any) -> Raw:
    return Raw({"id": "x", "object": "chat.completion", "choices": [{"message": message}]})


def _not_utf8(value: Any) -> bytes:
    """`value` as JSON, its text "XX" replaced by bytes that are not UTF-8."""
    return json.dumps(value).encode().replace(b"XX", b"\xff\xfe")


@pytest.mark.parametrize(
    "step, stream, fragment",
    [
        (_reply({"role": "assistant", "tool_calls": 5}), False, "tool_calls are a number"),
        (_reply({"role": "assistant", "tool_calls": {}}), False, "tool_calls are an object"),
        (Raw(_not_utf8({"choices": [{"message": {"content": "XX"}}]})), False, "not UTF-8"),
        (_sse(_not_utf8(_chunk({"content": "XX"}))), True, "not UTF-8 text"),
        (_sse(_chunk({"content": 5})), True, "a chunk's content is a number, not text"),
        (_sse(_chunk({"content": {"a": 1}})), True, "a chunk's content is an object"),
        (_sse(_chunk("abc")), True, "a chunk's delta is a string, not an object"),
        (_sse({**_chunk(), "choices": "abc"}), True, "a chunk's choices are a string"),
        (_sse({**_chunk(), "choices": ["abc"]}), True, "a chunk's first choice is a string"),
        (_sse(_chunk({"tool_calls": 5})), True, "a chunk's tool_calls are a number"),
        (_sse(_call(index=None)), True, "a chunk's tool call index is null, not a number"),
        (_sse(_call(function={"name": "f", "arguments": 5})), True, "has a number as its arg"),
        (_sse(_call(function="f")), True, "tool call 0's function is a string"),
    ],
    ids=[
        "tool-calls-number",
        "tool-calls-object",
        "not-utf8",
        "stream-not-utf8",
        "content-number",
        "content-object",
        "delta-string",
        "choices-string",
        "choice-string",
        "stream-tool-calls-number",
        "index-null",
        "arguments-number",
        "function-string",
    ],
)
async def test_a_reply_of_the_wrong_shape_is_malformed(
    step: Raw, stream: bool, fragment: str
) -> None:
    """A reply (or a streamed chunk) of the wrong shape is the provider's malformed reply,
    retried briefly, never our error or the client's refusal."""
    with ScriptedModelServer([step]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(
                registry(model.base_url).generate, request(stream_text=stream)
            )
    assert info.value.type == "ModelReplyMalformed", info.value.message
    assert not info.value.non_retryable and fragment in info.value.message


async def test_an_error_event_mid_stream_is_the_providers_and_retried() -> None:
    """What a provider streams when it is overloaded mid-reply: retried as its outage."""
    overloaded = {"error": {"message": "Overloaded", "type": "server_error"}}
    with ScriptedModelServer([_sse(_chunk({"content": "Hel"}), overloaded)]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(
                registry(model.base_url).generate, request(stream_text=True)
            )
    assert info.value.type == "ModelUnavailable" and not info.value.non_retryable
    assert info.value.message == "The model endpoint reported an error mid-reply: Overloaded"


async def test_call_tool_answers_errors_instead_of_raising() -> None:
    acts = registry("http://unused")
    env = ActivityEnvironment()
    ok = await env.run(acts.call_tool, CallToolInput("r", "A", "c1", "echo", {"text": "hi"}))
    assert (ok.result, ok.error) == ("hi", None)
    bad = await env.run(acts.call_tool, CallToolInput("r", "A", "c2", "explode", {}))
    assert bad.error == "KeyError: 'missing'" and bad.result == "Error: KeyError: 'missing'"
    invalid = await env.run(
        acts.call_tool, CallToolInput("r", "A", "c3", "echo", {"text": {"a": 1}})
    )
    assert invalid.error is not None and "invalid arguments for echo" in invalid.error
    unknown = await env.run(acts.call_tool, CallToolInput("r", "A", "c4", "nope", {}))
    assert (
        unknown.error == "unknown tool"
        and "Available tools: echo, explode, huge, huge_emoji" in (unknown.result or "")
    )


@pytest.mark.parametrize("tool", ["huge", "huge_emoji"])
async def test_oversized_tool_results_are_truncated_to_fit_a_payload(tool: str) -> None:
    """A result is cut by its encoded size (what Temporal counts), not its length."""
    big = await ActivityEnvironment().run(
        registry("x").call_tool, CallToolInput("r", "A", "c", tool, {})
    )
    assert big.truncated and big.result is not None
    assert MAX_TOOL_RESULT_BYTES - 20 <= encoded_size(big.result) <= MAX_TOOL_RESULT_BYTES
    assert big.result.endswith("characters are shown]")


async def test_a_call_cuts_its_result_to_its_share_of_the_turn() -> None:
    """A call given a share cuts its answer to it, as the workflow's cut would; an error's too."""
    acts, env = registry("x"), ActivityEnvironment()
    share = CallToolInput("r", "A", "c", "huge", {}, max_result_bytes=10_000)
    big = await env.run(acts.call_tool, share)
    assert big.truncated and big.result == clip_to_size("x" * (3 * 1024 * 1024), 10_000)
    loud = AgentDefinition(name="A", model="m", tools=[complain])  # type: ignore[arg-type]
    failed = await env.run(
        AgentActivities(AgentRegistry([loud])).call_tool,
        CallToolInput("r", "A", "c2", "complain", {}, max_result_bytes=5_000),
    )
    # its text is there twice: as the error, and as the answer the model reads
    said = "RuntimeError: " + "é" * 3_000
    assert failed.error == clip_to_size(said, 2_500)
    assert failed.result == clip_to_size(f"Error: {said}", 2_500)
    small = CallToolInput("r", "A", "c3", "echo", {"text": "hi"}, max_result_bytes=10_000)
    assert (await env.run(acts.call_tool, small)).result == "hi"


def test_clip_to_size_keeps_the_original_length_when_cutting_again() -> None:
    """A second cut says how long the text was before the first one."""
    once = clip_to_size("é" * 100_000, 60_000)
    twice = clip_to_size(once, 30_000)
    assert encoded_size(once) <= 60_000 and encoded_size(twice) <= 30_000
    assert twice.startswith("é" * 4000) and twice.endswith(" of 100000 characters are shown]")
    assert clip_to_size("short", 100) == "short"


async def test_describe_unknown_agent_names_the_known_ones() -> None:
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(registry("x").describe_agent, DescribeAgentInput("B"))
    assert (
        info.value.non_retryable
        and "Unknown agent 'B': this worker knows 'A'" in info.value.message
    )


async def test_journal_returns_new_events_and_mirrors_idempotently(tmp_path: Path) -> None:
    """Journal results carry only new events (requests by reference); no mirror duplicates."""
    store = FileStore(tmp_path)
    acts = registry("x", store)
    evs = [
        Event(type="run_start", messages=[{"role": "user", "content": "hi"}]).to_dict(),
        Event(type="generation", turn=1, messages=[{"role": "user", "content": "hi"}]).to_dict(),
    ]
    inp = JournalInput(
        run_id="r",
        agent="A",
        mirror=True,
        start=0,
        events=evs,
        new_from=0,
        refs={"1": "generate-1"},
    )
    first = await ActivityEnvironment().run(acts.journal, inp)
    again = await ActivityEnvironment().run(acts.journal, inp)
    assert first.mirrored == again.mirrored == 2
    assert first.events[0]["messages"] and "messages" not in first.events[1]
    assert first.start == 0 and first.refs == {"1": "generate-1"}
    assert [e.to_dict() for e in store.load("r")] == evs


async def test_journal_survives_a_failing_store() -> None:
    class Broken:
        def append(self, run_id: str, event: Event) -> None:
            raise OSError("disk full")

        def load(self, run_id: str) -> list[Event]:
            return []

        def list_runs(self) -> list[str]:
            return []

    acts = registry("x", Broken())
    inp = JournalInput(
        run_id="r",
        agent="A",
        mirror=True,
        start=0,
        events=[Event(type="run_start").to_dict()],
        new_from=0,
    )
    result = await ActivityEnvironment().run(acts.journal, inp)
    assert result.error == "OSError: disk full" and result.mirrored is None
    assert result.events == [{"type": "run_start"}]
    inp.strict = True
    with pytest.raises(ApplicationError, match="disk full"):
        await ActivityEnvironment().run(acts.journal, inp)


def test_clients_of_a_closed_loop_are_closed_when_dropped() -> None:
    """An openai client whose event loop is gone is closed when dropped, never left for its
    finaliser to schedule an `aclose()` that no loop awaits."""
    with ScriptedModelServer([Reply("hi")]) as model:
        definition = AgentDefinition(
            name="A", model="m", tools=[], api_key="sk-dropped-0001", base_url=model.base_url
        )
        registry = AgentRegistry([definition])

        async def used() -> Any:
            client = registry.openai_client(definition)
            await client.chat.completions.create(model="m", messages=[])
            return client

        first = asyncio.run(used())  # its loop closed, a connection still in its pool
        loop = asyncio.new_event_loop()
        try:
            second = loop.run_until_complete(used())
        finally:
            loop.close()
    assert second is not first and first.is_closed()


class _Evicting(BaseException):
    """What a workflow's event loop raises for a task made while it is evicted."""


def test_a_client_dropped_open_schedules_nothing_on_the_loop_that_collects_it() -> None:
    """An openai client dropped open and collected on a loop that refuses new tasks (a
    workflow's, being evicted: the SDK raises a BaseException there) prints nothing:
    openai's own HTTP pool's finaliser would schedule its `aclose()` on that loop."""
    definition = AgentDefinition(
        name="A", model="m", tools=[], api_key="sk-dropped-0002", base_url="http://127.0.0.1:9/v1"
    )
    registry = AgentRegistry([definition])
    unraisable: list[Any] = []

    class Refusing(asyncio.SelectorEventLoop):
        evicting = False

        def create_task(self, coro: Any, **kwargs: Any) -> Any:
            if not self.evicting:
                return super().create_task(coro, **kwargs)
            coro.close()
            raise _Evicting("Ignoring create task while evicting workflow.")

    async def dropped() -> None:
        registry.openai_client(definition, loop)
        loop.evicting = True
        registry._clients.clear()  # dropped open, as a registry nobody closed
        gc.collect()
        loop.evicting = False

    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    loop = Refusing()
    try:
        loop.run_until_complete(dropped())
    finally:
        sys.unraisablehook = hook
        loop.close()
    assert unraisable == []


def test_every_model_client_of_a_process_shares_one_tls_context() -> None:
    """Clients for two endpoints, and for one endpoint on two loops, load the trust store
    once between them (each loading its own cost 45-60 ms of CPU and its certificates'
    memory), and it is the context the HTTP library would make for a client by itself."""
    definitions = [
        AgentDefinition(
            name=name, model="m", tools=[], api_key="sk-tls-0001", base_url=f"https://{host}/v1"
        )
        for name, host in (("A", "one.example"), ("B", "two.example"))
    ]
    registry = AgentRegistry(definitions)

    def contexts() -> list[Any]:
        async def made() -> list[Any]:
            clients = [registry.openai_client(definition) for definition in definitions]
            return [client._client._transport._pool._ssl_context for client in clients]

        return asyncio.run(made())

    first, second = contexts(), contexts()
    assert len({id(context) for context in first + second}) == 1
    (context,) = {*first}
    alone = DefaultAsyncHttpxClient()._transport._pool._ssl_context
    assert context is not alone
    assert context.verify_mode == alone.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname and alone.check_hostname
    assert context.cert_store_stats() == alone.cert_store_stats()
    assert context.get_ca_certs() == alone.get_ca_certs()
