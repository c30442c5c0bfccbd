"""Activities through `ActivityEnvironment`, against the scripted model server."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentor_temporal.activities import (
    AgentActivities,
    AgentDefinition,
    AgentRegistry,
    function_tool,
)
from agentor_temporal.store import Event, FileStore
from agentor_temporal.testing import CallTool, Drop, Fail, Hang, Reply, ScriptedModelServer
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


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_fail_at_once_with_the_providers_message(status: int) -> None:
    with ScriptedModelServer([Fail(status, "The model `m` does not exist")]) as model:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(registry(model.base_url).generate, request())
    assert info.value.non_retryable and info.value.type == "ModelRequestError"
    assert info.value.message == f"Model request failed with {status}: The model `m` does not exist"


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
