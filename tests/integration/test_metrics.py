"""Metrics: a real worker process serving Prometheus text, scraped over HTTP.

Three runs (one retried model call and a good tool call, one failing tool,
one failing model request) and one run paused for a person; the scrape shows
Temporal's own worker metrics and the agent metrics side by side, with the
counts and labels those runs imply.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
import uuid
from typing import Any

import forkserver
import pytest
from temporalio.client import Client

from agentor_temporal.testing import USAGE, CallTool, Fail, Reply, ScriptedModelServer

from helpers import free_port, stop_process, wait_line, wait_until
from integration.test_cli import _env

pytestmark = pytest.mark.slow

AGENT = "procs.observed_agents:agent"
_SERIES = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every series on the endpoint: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    series = {}
    for line in text.splitlines():
        match = _SERIES.match(line)
        if match and not line.startswith("#"):
            name, labels, value = match.groups()
            series[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return series


def total(series: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of `name` over the series whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in series.items() if n == name and wanted <= set(ls))


async def test_worker_serves_temporal_and_agent_metrics(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """After three runs (one failing) and a pause, the counters say exactly that."""
    agent = f"Observed-{uuid.uuid4().hex[:6]}"
    port = free_port()
    script = [
        Fail(503, "overloaded"),  # retried by Temporal
        CallTool("get_weather", {"city": "London"}),
        Reply("Sunny in London."),
        CallTool("get_weather", {"city": "Nowhere"}),  # the tool raises
        Reply("I could not find it."),
        Fail(400, "bad request"),  # fails the run
        CallTool("transfer", {"amount": 5, "to": "bob"}),  # waits for a person
    ]
    with ScriptedModelServer(script) as model:
        env = _env(MODEL_BASE_URL=model.base_url, AGENT_TASK_QUEUE=task_queue, AGENT_NAME=agent)
        worker = forkserver.ForkedPopen(
            [sys.executable, "-m", "agentor_temporal", "worker", "--agents", AGENT,
             "--temporal", temporal_address, "--metrics-port", f"127.0.0.1:{port}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            wait_line(worker, "worker ready")
            outcomes = []
            for prompt in ("Weather in London?", "Weather in Nowhere?", "Break."):
                outcomes.append(
                    await client.execute_workflow(
                        "AgentRun",
                        {"agent": agent, "input": prompt},
                        id=uuid.uuid4().hex,
                        task_queue=task_queue,
                    )
                )
            assert [o["status"] for o in outcomes] == ["completed", "completed", "failed"]
            paused = await client.start_workflow(
                "AgentRun",
                {"agent": agent, "input": "Pay bob 5."},
                id=uuid.uuid4().hex,
                task_queue=task_queue,
            )
            labels = {"agent": agent, "model": "gpt-4o-mini"}
            # the gauge is refreshed from visibility every 15 s
            series = wait_until(
                lambda: (
                    (s := scrape(port))
                    and total(s, "agentor_runs_awaiting_approval", agent=agent) == 1
                    and s
                ),
                "the paused run in the gauge",
                timeout=45,
            )
        finally:
            stop_process(worker)
            await paused.terminate("test over")

    # runs: started, how they ended, the pause
    assert total(series, "agentor_runs_started", **labels) == 4
    assert total(series, "agentor_runs_ended", status="completed", **labels) == 2
    assert total(series, "agentor_runs_ended", status="failed", **labels) == 1
    assert total(series, "agentor_runs_paused", **labels) == 1
    assert total(series, "agentor_approvals_requested", tool="transfer", **labels) == 1
    # model requests by outcome, the retry, latency, tokens
    assert total(series, "agentor_model_requests", outcome="ok", **labels) == 5
    assert total(series, "agentor_model_requests", outcome="retryable_error", **labels) == 1
    assert total(series, "agentor_model_requests", outcome="error", **labels) == 1
    assert total(series, "agentor_model_retries", **labels) == 1
    assert total(series, "agentor_model_latency_count", **labels) == 7
    assert total(series, "agentor_model_latency_bucket", le="+Inf", **labels) == 7
    assert total(series, "agentor_input_tokens", **labels) == 5 * USAGE["prompt_tokens"]
    assert total(series, "agentor_output_tokens", **labels) == 5 * USAGE["completion_tokens"]
    # tools by name: two calls, one raised
    assert total(series, "agentor_tool_calls", agent=agent, tool="get_weather") == 2
    assert total(series, "agentor_tool_failures", agent=agent, tool="get_weather") == 1
    assert total(series, "agentor_tool_failures", reason="tool_error", tool="get_weather") == 1
    assert total(series, "agentor_tool_latency_count", agent=agent, tool="get_weather") == 2
    # and Temporal's own worker metrics on the same endpoint
    assert total(series, "temporal_workflow_completed", workflow_type="AgentRun") == 3
    # the final failure only: a retried one (the 503) is benign, said in one line and
    # counted in agentor_model_retries, not logged by the SDK with a traceback
    assert total(series, "temporal_activity_execution_failed", activity_type="generate") == 1
