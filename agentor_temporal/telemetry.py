"""Switching telemetry on: OpenTelemetry traces and Prometheus metrics.

Both are off unless asked for, and neither costs an import when off.
Tracing is asked for by `Agentor(tracing=True)`, `AgentorPlugin(tracing=True)`,
the worker's `--otel`, or the standard OpenTelemetry environment
(`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`, ...); it needs the
`otel` extra (`pip install 'agentor-temporal[otel]'`). Spans are made by the
replay-safe tracer provider of `temporalio.contrib.opentelemetry` (its
`create_tracer_provider`), which the process's global provider must be: a run
replayed on another worker then continues its trace instead of starting a
second one. Metrics need no extra package: they are recorded on the Temporal
SDK runtime's metric meter and served by its Prometheus endpoint, so one
scrape returns Temporal's worker metrics and the agent metrics together.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar, cast

from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from agentor_temporal._span_masking import MaskingExporter
from agentor_temporal.workflows.tracing import TraceConfig

T = TypeVar("T")

#: The name spans are made under (the instrumentation scope).
TRACER_NAME = "agentor_temporal"
#: service.name when OTEL_SERVICE_NAME does not say.
DEFAULT_SERVICE_NAME = "agentor-temporal"
#: Latency buckets (seconds) of the model and tool histograms: a model call
#: takes from a fraction of a second to minutes, a tool anything.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Histograms recorded in seconds (the SDK's default buckets are milliseconds).
HISTOGRAMS = ("agentor_model_latency", "agentor_tool_latency")
#: The Python logger Temporal core's own log lines go to (see `core_logging`).
CORE_LOGGER = "temporalio.core"
#: The variable OpenTelemetry's GenAI instrumentations read to record contents.
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

logger = logging.getLogger("agentor_temporal")
_INSTALL_HINT = "install the extra: pip install 'agentor-temporal[otel]'"
_lock = threading.Lock()
_trace_config: TraceConfig | None = None


class TelemetryError(ValueError):
    """Telemetry was asked for but cannot be set up (the message says what to do)."""


# -- tracing -----------------------------------------------------------------------------


def tracing_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard OpenTelemetry environment asks for traces.

    On when `OTEL_TRACES_EXPORTER` names an exporter other than `none`, or an
    OTLP endpoint is set; `OTEL_SDK_DISABLED=true` turns it off.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def content_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment opts in to prompts and tool data on spans."""
    env = os.environ if environ is None else environ
    return env.get(CONTENT_VARIABLE, "").strip().lower() in ("true", "1", "yes")


def enable_tracing(*, content: bool | None = None) -> TraceConfig:
    """Set up tracing for this process (once) and return what workflows need.

    Uses the global tracer provider when it is already a replay-safe one (the
    application set it up); otherwise installs one exporting as the
    OpenTelemetry environment says (OTLP over HTTP by default, `console`,
    or `none`), with `BatchSpanProcessor` settings from `OTEL_BSP_*`.

    Args:
        content: put prompts, answers, tool arguments and results on spans
            (default: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).

    Raises:
        TelemetryError: when OpenTelemetry is not installed, an exporter is
            unknown, or the application's provider is not replay-safe.
    """
    global _trace_config
    capture = content_requested() if content is None else content
    with _lock:
        if _trace_config is None:
            _trace_config = _install()
        if _trace_config.content != capture:
            return TraceConfig(
                _trace_config.tracer, _trace_config.api, _trace_config.context, capture
            )
        return _trace_config


def worker_tracing(tracing: bool | None, content: bool | None = None) -> TraceConfig | None:
    """The tracing a worker runs with: asked for (`True`), refused, or from the environment.

    The environment alone never stops a worker: when it asks for traces that
    cannot be had (the extra is missing), a warning says so and runs go on
    untraced. Asking explicitly raises instead.

    Raises:
        TelemetryError: when `tracing` is True and tracing cannot be set up.
    """
    if tracing is False or (tracing is None and not tracing_requested()):
        return None
    try:
        return enable_tracing(content=content)
    except TelemetryError as exc:
        if tracing:
            raise
        logger.warning("The OTEL_* environment asks for traces, but runs go untraced: %s", exc)
        return None


def _install() -> TraceConfig:
    try:
        import opentelemetry.context
        import opentelemetry.trace
        from temporalio.contrib.opentelemetry import (
            ReplaySafeTracerProvider,
            create_tracer_provider,
        )
    except ImportError as exc:
        raise TelemetryError(f"tracing needs OpenTelemetry ({exc}); {_INSTALL_HINT}") from None
    current = opentelemetry.trace.get_tracer_provider()
    if isinstance(current, ReplaySafeTracerProvider):
        provider = current
    elif isinstance(current, opentelemetry.trace.ProxyTracerProvider):
        provider = _new_provider(create_tracer_provider)
        opentelemetry.trace.set_tracer_provider(provider)
    else:
        raise TelemetryError(
            f"the global tracer provider is a {type(current).__name__}, which would record a "
            "run's spans again on every replay; create it with "
            "temporalio.contrib.opentelemetry.create_tracer_provider() instead"
        )
    return TraceConfig(
        tracer=provider.get_tracer(TRACER_NAME),
        api=opentelemetry.trace,
        context=opentelemetry.context,
    )


def _new_provider(create: Any) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
    provider = create(resource=Resource.create(defaults))
    for exporter in _exporters():
        # a span may carry a run's content as its client sent it: known keys masked
        provider.add_span_processor(BatchSpanProcessor(cast(Any, MaskingExporter(exporter))))
    return provider


def _exporters() -> list[Any]:
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")
    exporters = []
    for name in (n.strip() for n in names):
        if name in ("", "none"):
            continue
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            exporters.append(_otlp_exporter())
        else:
            raise TelemetryError(
                f"OTEL_TRACES_EXPORTER={name!r} is not an exporter this package sets up "
                "(otlp, console or none); set up your own replay-safe provider for others"
            )
    return exporters


#: OTLP protocol -> the module of its span exporter
_OTLP_MODULES = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}


def _otlp_exporter() -> Any:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    module = _OTLP_MODULES.get(protocol)
    if module is None:
        raise TelemetryError(
            f"OTLP protocol {protocol!r} is not supported here ({' or '.join(_OTLP_MODULES)})"
        )
    try:
        exporter = importlib.import_module(module).OTLPSpanExporter
    except ImportError as exc:
        extra = " and opentelemetry-exporter-otlp-proto-grpc" if protocol == "grpc" else ""
        raise TelemetryError(f"no OTLP exporter ({exc}); {_INSTALL_HINT}{extra}") from None
    _remember_otlp_credentials()
    # endpoint, headers, timeout and compression come from OTEL_EXPORTER_OTLP_*
    return exporter()


#: The OTLP settings that may carry a credential: endpoints (userinfo, a key in
#: the query) and headers (`x-honeycomb-team=<key>`, `authorization=Basic ...`)
_OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_OTLP_HEADERS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")


def _remember_otlp_credentials() -> None:
    """Mask the exporter's credentials in every log line of this process: it logs
    each failed export with the request's URL (`Max retries exceeded with url:
    /v1/traces?api_key=...`)."""
    from urllib.parse import unquote

    from agentor_temporal.activities import _redact
    from agentor_temporal.workflows.redaction import header_secrets, url_secrets

    for name in _OTLP_ENDPOINTS:
        for secret in url_secrets(os.environ.get(name)):
            _redact.remember(secret)
    for name in _OTLP_HEADERS:
        # `key=value,key=value`, values percent-encoded (the OTLP exporter's format)
        for pair in (os.environ.get(name) or "").split(","):
            header, _, value = pair.partition("=")
            for secret in header_secrets(unquote(header), unquote(value)):
                _redact.remember(secret)


def flush(timeout: float = 5.0) -> None:
    """Export the spans still buffered (before a process leaves without `atexit`)."""
    if _trace_config is None:
        return
    import opentelemetry.trace

    provider = opentelemetry.trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush(int(timeout * 1000))


#: The header Temporal's OpenTelemetry interceptor carries a trace context in.
TRACE_HEADER = "_tracer-data"


def with_caller_context(coro: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
    """`coro`, run inside the caller's current span wherever it is awaited.

    The facade runs its calls on its own loop and thread, where the caller's
    span (a request handler's, say) would be unknown, and a run it starts
    would not be that span's child. Unchanged when OpenTelemetry is not in
    use or no span is current.
    """
    if "opentelemetry.context" not in sys.modules:
        return coro
    import opentelemetry.context
    import opentelemetry.trace

    context = opentelemetry.context.get_current()
    if not opentelemetry.trace.get_current_span(context).get_span_context().is_valid:
        return coro

    async def inside() -> T:
        token = opentelemetry.context.attach(context)
        try:
            return await coro
        finally:
            opentelemetry.context.detach(token)

    return inside()


def otel_interceptor() -> Any:
    """Temporal's OpenTelemetry interceptor: carries trace context in headers."""
    try:
        from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor
    except ImportError as exc:
        raise TelemetryError(f"tracing needs OpenTelemetry ({exc}); {_INSTALL_HINT}") from None
    return OpenTelemetryInterceptor()


def has_otel_interceptor(interceptors: Sequence[Any]) -> bool:
    """Whether a client or worker already carries trace context (any Temporal OTel interceptor)."""
    return any(
        type(i).__module__.startswith("temporalio.contrib.opentelemetry") for i in interceptors
    )


def client_traces(client: Client) -> bool:
    """Whether `client` carries trace context to the runs it starts."""
    return has_otel_interceptor(client.config(active_config=True).get("interceptors", []))


# -- metrics -----------------------------------------------------------------------------


def metrics_address(value: str | int) -> str:
    """`host:port` for a `--metrics-port` value (`9464`, `:9464`, `127.0.0.1:9464`).

    A bare port binds every interface, as a scraped service usually must.

    Raises:
        TelemetryError: for anything that is not a port (1-65535), optionally after a host.
    """
    text = str(value).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host = ""
    try:
        number = int(port)
    except ValueError:
        number = 0
    if not 0 < number < 65536:
        raise TelemetryError(f"metrics port must be PORT or HOST:PORT (1-65535), got {text!r}")
    return f"{host or '0.0.0.0'}:{number}"


def metrics_runtime(address: str | int) -> Runtime:
    """A Temporal runtime whose metrics (Temporal's and ours) are served for Prometheus.

    Give it to `Client.connect(..., runtime=...)`; workers on that client
    then serve `http://ADDRESS/metrics`.

    Raises:
        TelemetryError: for a bad address, or when the port cannot be bound.
    """
    bind = metrics_address(address)
    config = PrometheusConfig(
        bind_address=bind,
        histogram_bucket_overrides={name: list(LATENCY_BUCKETS) for name in HISTOGRAMS},
    )
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=config, logging=core_logging()))
    except Exception as exc:  # the core's bind error
        raise TelemetryError(f"cannot serve metrics on {bind}: {exc}") from None


# -- core logs -------------------------------------------------------------------------


def core_logging() -> LoggingConfig:
    """Temporal core's log lines (WARN and up) through Python logging, not the console.

    Left to itself the core prints them to stdout, in the middle of what a
    command prints there (`run --json`, `export`); forwarded, they reach the
    `temporalio.core` logger, so stderr and the process's log level.
    """
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )


#: Whether this process has tried `route_core_logs`: each try builds a core
#: runtime (its own threads), dropped again when a default exists already.
_routing_tried = False


def route_core_logs() -> bool:
    """Make the default runtime forward core logs (see `core_logging`); call before any client.

    Returns whether it did: a process whose default runtime already exists
    keeps it (its clients are bound to it). Tried once per process: `connect`
    calls it for every client.
    """
    global _routing_tried
    if _routing_tried:
        return False
    _routing_tried = True
    try:
        Runtime.set_default(
            Runtime(telemetry=TelemetryConfig(logging=core_logging())), error_if_already_set=True
        )
    except RuntimeError:
        return False
    return True


def runtime_meter(client: Client) -> MetricMeter | None:
    """The metric meter of the runtime `client` runs on, None when it records no metrics."""
    runtime = client.service_client.config.runtime or Runtime.default()
    meter = runtime.metric_meter
    return None if meter is MetricMeter.noop else meter
