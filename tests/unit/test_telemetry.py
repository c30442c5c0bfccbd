"""Telemetry switches: what turns traces and metrics on, and what it costs when they are off."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from agentor_temporal.activities import _redact
from agentor_temporal.plugin import AgentorPlugin, ConfigError
from agentor_temporal.telemetry import (
    TelemetryError,
    content_requested,
    metrics_address,
    tracing_requested,
)
from agentor_temporal.workflows.tracing import run_trace_ids

from helpers import ROOT, free_port


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "agents"}, False),
    ],
)
def test_the_otel_environment_turns_tracing_on(environ: dict[str, str], expected: bool) -> None:
    """Only an exporter or an endpoint asks for traces; OTEL_SDK_DISABLED wins."""
    assert tracing_requested(environ) is expected


def test_contents_only_when_asked() -> None:
    """Prompts and tool data go on spans only with the GenAI capture variable set."""
    variable = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    assert not content_requested({})
    assert not content_requested({variable: "false"})
    assert content_requested({variable: "true"}) and content_requested({variable: "1"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("9464", "0.0.0.0:9464"),
        (9464, "0.0.0.0:9464"),
        (":9464", "0.0.0.0:9464"),
        ("127.0.0.1:9000", "127.0.0.1:9000"),
    ],
)
def test_metrics_address(value: str | int, expected: str) -> None:
    """A bare port listens everywhere; HOST:PORT where asked."""
    assert metrics_address(value) == expected


@pytest.mark.parametrize("value", ["", "abc", "0", "70000", "host:", "host:x"])
def test_bad_metrics_address_is_refused(value: str) -> None:
    """Anything but a port (after an optional host) is a clear error."""
    with pytest.raises(TelemetryError, match="metrics port must be PORT or HOST:PORT"):
        metrics_address(value)


def test_run_trace_ids_are_stable_and_distinct() -> None:
    """The trace of a run started without context is a function of its id alone."""
    assert run_trace_ids("r1") == run_trace_ids("r1")
    assert run_trace_ids("r1") != run_trace_ids("r2")
    trace_id, span_id = run_trace_ids("r1")
    assert 0 < trace_id < 2**128 and 0 < span_id < 2**64


async def test_metrics_port_on_a_worker_only_says_where_it_goes() -> None:
    """metrics_port takes effect on Client.connect; on a worker alone it names the fix."""
    client = await Client.connect("127.0.0.1:1", lazy=True)
    with pytest.raises(ConfigError, match=r"Client.connect\(\.\.\., plugins="):
        Worker(client, task_queue="q", plugins=[AgentorPlugin(metrics_port=9464)])


def test_off_means_no_telemetry_imports() -> None:
    """With tracing and metrics off, the package imports neither OpenTelemetry nor matplotlib."""
    code = (
        "import sys\n"
        "import agentor_temporal.cli, agentor_temporal.worker, agentor_temporal.plugin\n"
        "from agentor_temporal import Agentor, AgentorPlugin\n"
        "Agentor(name='quiet', api_key='k')\n"
        "AgentorPlugin()\n"
        "bad = sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in ('opentelemetry', 'matplotlib', 'prometheus_client'))\n"
        "print(bad)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_worker_refuses_a_bad_metrics_port_before_connecting() -> None:
    """A bad --metrics-port is a usage error (exit 2) with the reason, not a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "agentor_temporal", "worker", "--agents", "procs.cli_agents:agent",
         "--temporal", "127.0.0.1:1", "--metrics-port", "nope"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "metrics port must be PORT or HOST:PORT" in done.stderr
    assert "Traceback" not in done.stderr


def test_timeline_reads_temporal_only() -> None:
    """`show --timeline` with --store is a usage error, said before anything connects."""
    done = subprocess.run(
        [sys.executable, "-m", "agentor_temporal", "show", "r1", "--timeline", "r1.png",
         "--store", "runs"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--timeline reads Temporal history" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failed_export_never_logs_the_collectors_credentials(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The OTLP exporter logs a failed export with its request's URL: a key in the
    endpoint's query, its userinfo and the headers' values are masked there."""
    from opentelemetry.sdk.trace import TracerProvider

    from agentor_temporal import telemetry

    query_key, password, header = "otlpKEY-0060-q", "otlpPW-0061", "otlpHDR-0062-h"
    port = free_port()  # nothing listens: the export fails at once
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        f"http://u:{password}@127.0.0.1:{port}/v1/traces?api_key={query_key}",
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-honeycomb-team={header}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")  # one retry
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    [exporter] = telemetry._exporters()
    span = TracerProvider().get_tracer("t").start_span("s")
    span.end()
    caplog.set_level(logging.WARNING)
    exporter.export([span])
    exporter.shutdown()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "/v1/traces" in logged  # the failure is logged, with its URL
    assert [s for s in (query_key, password, header) if s in logged] == []
    # and wherever else this process shows them
    assert _redact.clean(f"{password} {header}") == "*** ***"
