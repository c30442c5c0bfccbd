"""`TelemetryInterceptor`: the worker side of traces and metrics.

Every attempt of a `generate` or `call_tool` activity is measured here, on
the worker that ran it: counted, timed and labelled by agent and model (or
tool) on the worker's metric meter, and, when the worker traces, wrapped in a
span that names the attempt and the worker, with its error as the span's
status. The workflow learns the attempt number through the result, so its own
span of the call says how many attempts it took. For workflows the
interceptor only hands the worker's `TraceConfig` to the run (see
`agentor_temporal.workflows.tracing`); the activities themselves know nothing
of any of it. It is also where every activity's failure is made encodable
(`encodable_error`): a message Temporal cannot carry was replaced by the
SDK's own retryable error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from agentor_temporal.activities import AgentRegistry
from agentor_temporal.activities._errors import encodable_error
from agentor_temporal.store.encoding import encodable_text
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import (
    CallToolInput,
    CallToolResult,
    GenerateInput,
    GenerateResult,
)
from agentor_temporal.workflows.tracing import CONFIG, TraceConfig

logger = logging.getLogger("agentor_temporal.worker")

#: This process as the spans name it (Temporal's default worker identity).
WORKER = f"{os.getpid()}@{socket.gethostname()}"


class TelemetryInterceptor(Interceptor):
    """Metrics of every model and tool attempt; spans too when `trace` is given."""

    def __init__(self, trace: TraceConfig | None = None) -> None:
        self.trace = trace

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Measure our two kinds of activity."""
        return _Attempts(next, self.trace)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        """Hand the run its tracing (none when this worker does not trace)."""
        if self.trace is None:
            return None
        trace = self.trace

        class _Traced(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                # set in the workflow's own task: its child tasks inherit it,
                # and it goes when the workflow does
                CONFIG.set(trace)
                return await super().execute_workflow(input)

        return _Traced


class _Attempts(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, trace: TraceConfig | None) -> None:
        super().__init__(next)
        self.trace = trace

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self._execute(input)
        except Exception as exc:
            error = encodable_error(exc)
            if error is exc:
                raise
            raise error from None

    async def _execute(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        arg = input.args[0] if input.args else None
        if info.activity_type == policies.GENERATE and isinstance(arg, GenerateInput):
            # a label the core cannot take (a lone surrogate) failed every attempt
            labels = {"agent": encodable_text(arg.agent), "model": encodable_text(arg.model)}
            kind, name = "model", f"chat {arg.model}"
        elif info.activity_type == policies.CALL_TOOL and isinstance(arg, CallToolInput):
            labels = {"agent": encodable_text(arg.agent), "tool": arg.name}
            kind, name = "tool", f"execute_tool {arg.name}"
        else:
            return await super().execute_activity(input)
        meter = activity.metric_meter().with_additional_attributes(labels)
        if info.attempt > 1:
            meter.create_counter(
                f"agentor_{kind}_retries", f"{kind.capitalize()} call attempts after the first"
            ).add(1)
        span = self._span(name, arg, info)
        started = time.monotonic()
        outcome = "ok"
        try:
            result = await super().execute_activity(input)
        except BaseException as exc:
            outcome = _outcome(exc)
            if span is not None:
                span.record_exception(exc)
                self._error(span, f"{type(exc).__name__}: {exc}")
            raise
        else:
            if isinstance(result, (GenerateResult, CallToolResult)):
                result.attempt = info.attempt
            if isinstance(result, CallToolResult) and result.error is not None:
                outcome = "tool_error"
                if span is not None:
                    self._error(span, "the tool raised")
            if isinstance(result, GenerateResult) and span is not None:
                span.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": int(result.usage.get("input_tokens", 0)),
                        "gen_ai.usage.output_tokens": int(result.usage.get("output_tokens", 0)),
                    }
                )
            return result
        finally:
            elapsed = time.monotonic() - started
            _record(meter, kind, outcome, elapsed)
            if span is not None:
                span.end()

    def _span(self, name: str, arg: Any, info: activity.Info) -> Any:
        if self.trace is None:
            return None
        attributes: dict[str, Any] = {
            "agentor.run_id": arg.run_id,
            "agentor.attempt": info.attempt,
            "agentor.worker": WORKER,
            "temporal.activity.id": info.activity_id,
            "gen_ai.agent.name": arg.agent,
        }
        if isinstance(arg, GenerateInput):
            attributes.update({"gen_ai.operation.name": "chat", "gen_ai.request.model": arg.model})
        else:
            attributes.update(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": arg.name,
                    "gen_ai.tool.call.id": arg.call_id,
                }
            )
        api = self.trace.api
        # a child of the workflow's span of this call, which Temporal's
        # interceptor made current from the activity's headers
        return self.trace.tracer.start_span(
            f"{name} attempt {info.attempt}",
            kind=api.SpanKind.CLIENT if isinstance(arg, GenerateInput) else api.SpanKind.INTERNAL,
            attributes=attributes,
        )

    def _error(self, span: Any, message: str) -> None:
        assert self.trace is not None
        api = self.trace.api
        span.set_status(api.Status(api.StatusCode.ERROR, message))


def _outcome(exc: BaseException) -> str:
    """How an attempt that raised ended, as a metric label."""
    details = activity.cancellation_details() if activity.in_activity() else None
    if details is not None and (details.timed_out or details.not_found):
        return "cancelled"  # the server gave up on it: ended quietly, its call joined
    if isinstance(exc, ApplicationError):
        return "error" if exc.non_retryable else "retryable_error"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"  # the server gave up on it (a timeout), or the run was cancelled
    return "retryable_error"


def _record(meter: Any, kind: str, outcome: str, elapsed: float) -> None:
    if kind == "model":
        meter.create_counter("agentor_model_requests", "Model request attempts, by outcome").add(
            1, {"outcome": outcome}
        )
        meter.create_histogram_float(
            "agentor_model_latency", "Seconds one model request attempt took", "s"
        ).record(elapsed)
    else:
        meter.create_counter("agentor_tool_calls", "Tool call attempts").add(1)
        if outcome != "ok":
            meter.create_counter(
                "agentor_tool_failures", "Tool call attempts that raised or were lost"
            ).add(1, {"reason": outcome})
        meter.create_histogram_float(
            "agentor_tool_latency", "Seconds one tool call attempt took", "s"
        ).record(elapsed)


async def watch_waiting(
    client: Client, registry: AgentRegistry, meter: MetricMeter, interval: float | None = None
) -> None:
    """Keep `agentor_runs_awaiting_approval{agent}` current from visibility.

    A count across the fleet, not this worker's share: a paused run holds no
    worker, so only visibility knows how many wait (by their AgentStatus).
    Every worker reports the same value; aggregate with max, not sum.
    """
    gauge = meter.create_gauge(
        "agentor_runs_awaiting_approval", "Runs waiting for a person, fleet-wide (visibility)"
    )
    every = interval if interval is not None else policies.WAITING_GAUGE_INTERVAL.total_seconds()
    while True:
        for name in registry.names():
            if "'" in name:
                continue  # the visibility grammar has no escapes
            query = (
                f"WorkflowType = '{policies.WORKFLOW_TYPE}' AND AgentName = '{name}' "
                "AND AgentStatus = 'awaiting_approval' AND ExecutionStatus = 'Running'"
            )
            try:
                counted = await client.count_workflows(query)
            except Exception as exc:  # visibility down: keep the last value
                logger.debug("Counting runs awaiting approval failed: %s", exc)
                continue
            gauge.set(counted.count, {"agent": name})
        await asyncio.sleep(every)
