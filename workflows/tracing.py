"""Spans of a run, made by the workflow: the run, each generation, each tool call.

Off unless the worker traces (`AgentorPlugin(tracing=True)`, `--otel` or the
OTEL_* environment): then the plugin's interceptor puts a `TraceConfig` in
`CONFIG` for each workflow it runs, and spans come from the replay-safe tracer
provider of `temporalio.contrib.opentelemetry`. Its ids are drawn from the
workflow's seeded random, so a worker that replays a run after a crash opens
the very spans the dead one had opened and ends those still open, while spans
already ended (and exported) are not ended again on replay. Nothing here
imports OpenTelemetry: the tracer and the API module travel in the config.

One trace per run: a segment's run span is the child of the trace context its
start carried (a traced client's span), else of a context derived from the run
id alone, so every segment of a run, resumed ones included, lands in one trace
that `run_trace_ids(run_id)` names. Prompts, answers and tool arguments and
results stay out of spans unless `TraceConfig.content` is set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError

from agentor_temporal.store.events import Event
from agentor_temporal.workflows.formatting import failure_message

T = TypeVar("T")

#: The operations of OpenTelemetry's GenAI semantic conventions we emit.
OP_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_TOOL = "execute_tool"


@dataclass(frozen=True)
class TraceConfig:
    """What the workflow needs to make spans (set by the plugin's interceptor)."""

    #: a tracer from a `ReplaySafeTracerProvider`
    tracer: Any
    #: the `opentelemetry.trace` module (imported by the host, never here)
    api: Any
    #: the `opentelemetry.context` module
    context: Any
    #: put prompts, answers, tool arguments and results on spans
    content: bool = False


#: The running workflow's tracing, None when its worker does not trace.
CONFIG: ContextVar[TraceConfig | None] = ContextVar("agentor_trace", default=None)


def run_trace_ids(run_id: str) -> tuple[int, int]:
    """(trace id, parent span id) of a run started without a trace context.

    Derived from the run id alone, so every segment and every worker agrees
    on them, and anyone holding a run id can find its trace.
    """
    digest = hashlib.sha256(f"agentor-run:{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


#: Errors the run itself gives a call it does not run (fixed words, no content).
_RUN_ERRORS = ("denied", "approval expired", "tool disabled", "unknown tool")


def _error_type(error: str) -> str:
    """`ValueError` out of `ValueError: no such city` (the type alone is not content)."""
    if error in _RUN_ERRORS:
        return error.replace(" ", "_")
    head = error.split(":", 1)[0].strip()
    return head if head and " " not in head else "tool_error"


class RunTrace:
    """The open spans of one run segment (all no-ops when the worker does not trace)."""

    def __init__(self) -> None:
        self.config: TraceConfig | None = None
        self.span: Any = None
        #: call id -> the span of a call waiting for a person
        self._approvals: dict[str, Any] = {}
        #: call ids whose tool ran as an activity (a span of its own)
        self._ran: set[str] = set()

    def start(self, agent: str, model: str, run_id: str) -> Any:
        """Open the run span; returns a context manager that makes it current and ends it."""
        self.config = config = CONFIG.get()
        if config is None:
            return _Nothing()
        api = config.api
        current = api.get_current_span().get_span_context()
        parent = None
        if not current.is_valid:
            trace_id, span_id = run_trace_ids(run_id)
            remote = api.SpanContext(
                trace_id=trace_id,
                span_id=span_id,
                is_remote=True,
                trace_flags=api.TraceFlags(api.TraceFlags.SAMPLED),
            )
            parent = api.set_span_in_context(api.NonRecordingSpan(remote))
        self.span = config.tracer.start_span(
            f"{OP_AGENT} {agent}",
            context=parent,
            kind=api.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": OP_AGENT,
                "gen_ai.agent.name": agent,
                "gen_ai.request.model": model,
                "gen_ai.conversation.id": run_id,
                "agentor.run_id": run_id,
                "temporal.workflow.run_id": workflow.info().run_id,
            },
        )
        return self._current(self.span)

    async def generation(
        self, model: str, turn: int, request: list[dict[str, Any]], call: Awaitable[T]
    ) -> T:
        """Await a `generate` activity inside its `chat` span (current, so the
        activity's attempts become its children)."""
        config = self.config
        if config is None:
            return await call
        span = config.tracer.start_span(
            f"{OP_CHAT} {model}",
            kind=config.api.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": OP_CHAT,
                "gen_ai.request.model": model,
                "agentor.turn": turn,
            },
        )
        if config.content:
            span.set_attribute("gen_ai.input.messages", _json(request))
        return await self._traced(span, call, self._generated)

    async def tool_call(
        self, name: str, call_id: str, args: dict[str, Any], turn: int, call: Awaitable[T]
    ) -> T:
        """Await a `call_tool` activity inside its `execute_tool` span."""
        config = self.config
        if config is None:
            return await call
        self._ran.add(call_id)
        span = self._tool_span(name, call_id, turn)
        if config.content:
            span.set_attribute("gen_ai.tool.call.arguments", _json(args))
        return await self._traced(span, call, self._called)

    async def _traced(self, span: Any, call: Awaitable[T], done: Callable[[Any, Any], None]) -> T:
        """Await `call` with `span` current; `done` reads the result onto the span."""
        failure: ActivityError | None = None
        with self._current(span):
            try:
                result = await call
            except ActivityError as exc:
                failure = exc
                self._failed(span, exc)
            else:
                done(span, result)
                self._attempts(span, result)
        if failure is not None:
            # raised once the span is closed: its status says why, no traceback
            raise failure
        return result

    def _generated(self, span: Any, result: Any) -> None:
        usage = getattr(result, "usage", None) or {}
        calls = getattr(result, "calls", None)
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
                "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0)),
                "gen_ai.response.finish_reasons": ["tool_calls" if calls else "stop"],
            }
        )
        if self.config is not None and self.config.content:
            answer = {"role": "assistant", "content": getattr(result, "text", None)}
            if calls:
                answer["tool_calls"] = calls
            span.set_attribute("gen_ai.output.messages", _json([answer]))

    def _called(self, span: Any, result: Any) -> None:
        error = getattr(result, "error", None)
        if error:
            self._tool_error(span, str(error))
        if self.config is not None and self.config.content:
            span.set_attribute("gen_ai.tool.call.result", str(getattr(result, "result", "")))

    @contextmanager
    def _current(self, span: Any) -> Iterator[None]:
        """Make `span` current for the block, then end it.

        An exception that escapes (a bug, not an activity's failure) is
        recorded, which tells the replay-safe span not to end on a workflow
        task that failed. The detach is skipped where the block ends in
        another context (a workflow evicted from the cache is torn down
        wherever that happens), which OpenTelemetry would log as an error.
        """
        assert self.config is not None
        config = self.config
        context = config.api.set_span_in_context(span)
        token = config.context.attach(context)
        try:
            yield
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(config.api.Status(config.api.StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            if config.context.get_current() is context:
                with suppress(ValueError):
                    token.var.reset(token)
            span.end()

    def on_event(self, event: Event) -> None:
        """Follow the run's recorded events: approval waits, rejected calls, the end."""
        config = self.config
        if config is None:
            return
        if event.type == "approval_request" and event.call_id:
            span = config.tracer.start_span(
                f"await_approval {event.name}",
                context=config.api.set_span_in_context(self.span),
                attributes={
                    "gen_ai.tool.name": str(event.name),
                    "gen_ai.tool.call.id": str(event.call_id),
                    "agentor.turn": event.turn or 0,
                },
            )
            self._approvals[event.call_id] = span
        elif event.type == "approval_decision" and event.call_id in self._approvals:
            span = self._approvals.pop(str(event.call_id))
            span.set_attribute("agentor.approval.decision", str(event.status))
            if event.status == "expired":
                span.add_event("approval_expired")
            span.end()
        elif event.type == "tool_result" and event.call_id and event.error:
            if str(event.call_id) not in self._ran:
                # answered without running (bad arguments, unknown, withdrawn
                # or denied tool): a span of no length that says so
                span = self._tool_span(str(event.name), str(event.call_id), event.turn or 0)
                self._tool_error(span, str(event.error))
                span.end()
        elif event.type == "run_end" and self.span is not None:
            self._ended(event)

    def _ended(self, event: Event) -> None:
        assert self.config is not None
        api = self.config.api
        usage = event.usage
        self.span.set_attributes(
            {
                "agentor.status": str(event.status),
                "gen_ai.usage.input_tokens": usage.input_tokens if usage else 0,
                "gen_ai.usage.output_tokens": usage.output_tokens if usage else 0,
            }
        )
        if event.status == "failed":
            self.span.set_attribute("error.type", "run_failed")
            self.span.set_status(api.Status(api.StatusCode.ERROR, str(event.error or "failed")))

    def _tool_span(self, name: str, call_id: str, turn: int) -> Any:
        assert self.config is not None
        return self.config.tracer.start_span(
            f"{OP_TOOL} {name}",
            context=self.config.api.set_span_in_context(self.span),
            kind=self.config.api.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": OP_TOOL,
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                "agentor.turn": turn,
            },
        )

    def _tool_error(self, span: Any, error: str) -> None:
        assert self.config is not None
        api = self.config.api
        kind = _error_type(error)
        span.set_attribute("error.type", kind)
        # the message may quote the tool's input or data: content
        span.set_status(api.Status(api.StatusCode.ERROR, error if self.config.content else kind))

    def _failed(self, span: Any, exc: ActivityError) -> None:
        """Retries ran out (or the error was not retryable): the message is the cause."""
        assert self.config is not None
        api = self.config.api
        message = failure_message(exc)
        span.set_attribute("error.type", type(exc.cause or exc).__name__)
        span.add_event("activity_failed", {"message": message})
        span.set_status(api.Status(api.StatusCode.ERROR, message))

    @staticmethod
    def _attempts(span: Any, result: Any) -> None:
        attempts = int(getattr(result, "attempt", 1) or 1)
        span.set_attribute("agentor.attempts", attempts)
        if attempts > 1:
            span.add_event("retried", {"agentor.attempts": attempts})


class _Nothing:
    """The context manager `start` returns when the worker does not trace."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
