"""Traces: one trace per run, across a worker SIGKILLed mid-tool and the worker that finishes it.

The processes trace because of the standard OTEL_* variables alone, and
export over OTLP/HTTP to a receiver this test runs; the spans each process
sent are told apart by their resource (OTEL_SERVICE_NAME).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import TemporalStore
from agentor_temporal.testing import USAGE, CallTool, Fail, Reply, ScriptedModelServer
from agentor_temporal.workflows.tracing import run_trace_ids

from helpers import finish, ledger_lines, spawn, stop_process, wait_until
from otlp import OtlpReceiver, ReceivedSpan

pytestmark = pytest.mark.slow

TWO_CALLS = [
    [
        CallTool("get_weather", {"city": "London"}, id="call_london"),
        CallTool("get_weather", {"city": "Paris"}, id="call_paris"),
    ],
    Reply("Sunny in both."),
]


def _env(
    address: str, model: ScriptedModelServer, queue: str, otlp: OtlpReceiver, **extra: str
) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        **extra,
    }


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def test_one_trace_across_a_killed_worker(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """Two tool calls in one turn, their worker killed mid-tool: one trace, the expected tree."""
    ledger = str(tmp_path / "ledger")
    run_id = uuid.uuid4().hex
    trace_id = f"{run_trace_ids(run_id)[0]:032x}"
    with OtlpReceiver() as otlp, ScriptedModelServer(TWO_CALLS) as model:
        env = _env(temporal_address, model, task_queue, otlp, AGENT_LEDGER=ledger)
        first = spawn(
            ["run", "--run-id", run_id],
            {**env, "TOOL_DELAY": "60", "OTEL_SERVICE_NAME": "worker-1"},
        )
        second: subprocess.Popen[str] | None = None
        try:
            # both calls are running, and the first generation's span is out
            wait_until(
                lambda: (
                    len(ledger_lines(ledger)) == 2
                    and any(s.name == "chat gpt-4o-mini" for s in otlp.of_trace(trace_id))
                ),
                "both tools to start and the first chat span to arrive",
            )
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=10)
            second = spawn(["worker"], {**env, "OTEL_SERVICE_NAME": "worker-2"})
            outcome = await client.get_workflow_handle(run_id).result()
            wait_until(
                lambda: any(s.name.startswith("invoke_agent") for s in otlp.of_trace(trace_id)),
                "the run's span",
            )
        finally:
            stop_process(first)
            stop_process(second)
    assert outcome["status"] == "completed"
    assert len(ledger_lines(ledger)) == 4  # each call started on both workers

    spans = otlp.of_trace(trace_id)
    assert len({s.span_id for s in spans}) == len(spans), "a span was exported twice"
    # the run: a child of the context derived from the run id
    run = _one(spans, "invoke_agent Weather Agent")
    assert run.parent_id == f"{run_trace_ids(run_id)[1]:016x}"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "Weather Agent"
    assert run.attributes["agentor.run_id"] == run_id
    assert run.attributes["agentor.status"] == "completed"
    assert run.attributes["gen_ai.usage.input_tokens"] == 2 * USAGE["prompt_tokens"]
    assert run.attributes["gen_ai.usage.output_tokens"] == 2 * USAGE["completion_tokens"]
    assert run.resource["service.name"] == "worker-2"

    # two generations, the first ended (and exported) by the worker that died
    chats = sorted(
        (s for s in spans if s.name == "chat gpt-4o-mini"),
        key=lambda s: s.attributes["agentor.turn"],
    )
    assert [c.attributes["agentor.turn"] for c in chats] == [1, 2]
    assert [c.resource["service.name"] for c in chats] == ["worker-1", "worker-2"]
    for chat in chats:
        assert chat.parent_id == run.span_id
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert chat.attributes["gen_ai.usage.input_tokens"] == USAGE["prompt_tokens"]
        assert chat.attributes["gen_ai.usage.output_tokens"] == USAGE["completion_tokens"]

    # two tool calls, opened by the first worker, ended by the second after a retry
    tools = sorted(
        (s for s in spans if s.name == "execute_tool get_weather"),
        key=lambda s: s.attributes["gen_ai.tool.call.id"],
    )
    assert [t.attributes["gen_ai.tool.call.id"] for t in tools] == ["call_london", "call_paris"]
    for tool in tools:
        assert tool.parent_id == run.span_id
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == "get_weather"
        assert tool.attributes["agentor.attempts"] == 2
        assert ("retried", {"agentor.attempts": 2}) in tool.events
        assert tool.resource["service.name"] == "worker-2"
        # the attempt that finished it, on the second worker, is its child
        attempt = _one(
            [s for s in spans if s.parent_id == tool.span_id], "execute_tool get_weather attempt 2"
        )
        assert attempt.attributes["agentor.attempt"] == 2
        assert attempt.attributes["agentor.worker"].startswith(f"{second.pid}@")
    # each generation's attempt is the child of its chat span
    for chat in chats:
        attempt = _one(
            [s for s in spans if s.parent_id == chat.span_id], "chat gpt-4o-mini attempt 1"
        )
        assert attempt.attributes["gen_ai.usage.input_tokens"] == USAGE["prompt_tokens"]

    # nothing of the conversation is on any span unless asked for
    projected = await TemporalStore(client).aload(run_id)
    assert [e.call_id for e in projected if e.type == "tool_call"] == ["call_london", "call_paris"]
    text = repr([(s.attributes, s.events) for s in spans])
    for secret in ("London", "Paris", "Sunny", "weather assistant"):
        assert secret not in text


async def test_content_opt_in_and_one_trace_over_a_resume(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """A run started in a caller's span and resumed elsewhere stays in that trace; contents
    appear when asked."""
    run_id = uuid.uuid4().hex
    script = [Fail(400, "bad request"), CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    with OtlpReceiver() as otlp, ScriptedModelServer(script) as model:
        env = _env(
            temporal_address,
            model,
            task_queue,
            otlp,
            OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
        )
        started = spawn(["run", "--run-id", run_id], {**env, "PARENT_SPAN": "handle request"})
        assert finish(started)["status"] == "failed"
        request = wait_until(
            lambda: next((s for s in otlp.spans if s.name == "handle request"), None),
            "the caller's span",
        )
        # resumed by a process with no span of its own
        assert finish(spawn(["resume", "--run-id", run_id], env))["status"] == "completed"
        wait_until(
            lambda: (
                len(
                    [
                        s
                        for s in otlp.of_trace(request.trace_id)
                        if s.name.startswith("invoke_agent")
                    ]
                )
                == 2
            ),
            "both segments' spans in the caller's trace",
        )
    spans = otlp.of_trace(request.trace_id)
    runs = sorted((s for s in spans if s.name.startswith("invoke_agent")), key=lambda s: s.start_ns)
    assert [r.attributes["agentor.status"] for r in runs] == ["failed", "completed"]
    assert [r.parent_id for r in runs] == [request.span_id] * 2
    assert runs[0].status == 2 and "bad request" in runs[0].status_message
    failed_chat = next(s for s in spans if s.name == "chat gpt-4o-mini" and s.status == 2)
    assert "bad request" in failed_chat.status_message
    tool = _one(spans, "execute_tool get_weather")
    assert '"Oslo"' in tool.attributes["gen_ai.tool.call.arguments"]
    assert "Oslo" in tool.attributes["gen_ai.tool.call.result"]
    answers = [s.attributes.get("gen_ai.output.messages", "") for s in spans]
    assert any("Cold." in a for a in answers)
    assert any("Oslo" in s.attributes.get("gen_ai.input.messages", "") for s in spans)
