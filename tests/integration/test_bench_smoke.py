"""The benchmark harness runs end to end (tiny sizes; the numbers are not judged here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT


# bounded by the subprocess timeout below, not the suite's 180 s per test
@pytest.mark.timeout(300)
def test_bench_harness_runs_and_reports() -> None:
    """`bench/run.py --smoke` finishes and writes results, a report and a plot."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads((ROOT / "bench" / "results" / "bench-smoke.json").read_text())
    assert set(results["latency"]) == {"0ms", "200ms"}
    # the peer floor ran beside ours, on the launcher's server and the stock one
    assert "Temporal OpenAI Agents integration" in results["latency"]["0ms"]
    assert "Temporal OpenAI Agents integration" in results["latency_stock"]
    # and the local-model-calls set-up beside the default, in each part
    local = "ours, FileStore mirror off, local model calls"
    assert local in results["latency"]["0ms"] and local in results["throughput"]
    flights = results["in_flight"]
    assert [f["local_model_calls"] for f in flights] == [False, True]
    for flight in flights:
        assert flight["statuses"] == {"completed": results["sizes"]["in_flight"][0]}
    assert [row["status"] for row in results["history"]] == ["completed", "completed"]
    report = (ROOT / "bench" / "results" / "bench-smoke.md").read_text()
    assert "## Targets" in report and "floor A" in report
    assert (ROOT / "bench" / "results" / "bench-smoke.png").stat().st_size > 10_000
