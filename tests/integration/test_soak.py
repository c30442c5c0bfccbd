"""The chaos soak, short: runs of mixed shape survive killed workers and a killed server.

Runs `bench/soak.py --short` (24 runs, under a minute on 2 cores): three
worker processes, a random one SIGKILLed every 5 to 15 s, one SIGTERMed, the
Temporal server SIGKILLed and restarted once on its database file. The soak
checks the promise itself and lists what broke it; this test asserts the
list is empty and that the chaos really happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

# the soak bounds itself (the subprocess timeout below); the suite's 180 s
# per-test timeout is too tight when it shares two cores with an xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.timeout(660)]


def test_the_short_soak_keeps_the_promise() -> None:
    """Every run ends; no completed call runs twice or is lost; every log equals the record."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--short", "--json", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    start = proc.stdout.find("{\n")
    assert start >= 0, f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(proc.stdout[start:])
    assert result["problems"] == [], result["problems"]
    assert proc.returncode == 0
    assert result["statuses"] == {"completed": result["runs"]}
    assert result["duplicates"] == 0 and result["lost"] == 0
    assert result["kills"] >= 2 and result["sigterms"] == 1 and result["server_restarts"] == 1
    # the runs were busy when the chaos came: calls ran and followers reattached
    assert result["tool_calls"] > result["runs"] and result["follower_reattaches"] > 0
