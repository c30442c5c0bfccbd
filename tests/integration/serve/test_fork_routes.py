"""A fork read over HTTP: its whole log (the parent's events first) and SSE positions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import httpx

from helpers import PROMPT, SEED_EVENT_TYPES
from serve_http import read_sse, settle


def test_a_fork_reads_whole_over_http(http: httpx.Client, serve_env: dict[str, str]) -> None:
    """GET /runs/{fork} and its SSE carry the parent's events, the marker, then the fork's."""
    parent = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
    done = settle(http, parent, "completed")
    fork_id = f"fork-{uuid.uuid4().hex[:8]}"
    forked = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentor_temporal",
            "fork",
            parent,
            "--fork-id",
            fork_id,
            "--input",
            "Now do the same for Paris.",
            "--agent",
            "procs.serve_agents:weather",
            "--task-queue",
            serve_env["AGENT_TASK_QUEUE"],
            "--temporal",
            serve_env["TEMPORAL_ADDRESS"],
            "--no-worker",  # the serve tests' worker process runs it
        ],
        env={**os.environ, **serve_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forked.returncode == 0, forked.stderr

    fork = settle(http, fork_id, "completed")
    assert [e["type"] for e in fork["events"]] == [*SEED_EVENT_TYPES, "fork", *SEED_EVENT_TYPES]
    assert fork["events"][:7] == done["events"]
    assert fork["events"][7]["forked_from"] == parent
    assert fork["usage"]["total_tokens"] == 60
    with http.stream("GET", f"/runs/{fork_id}/events", headers={"Last-Event-ID": "6"}) as rest:
        tail = [m for m in read_sse(rest) if "id" in m]
    assert [int(m["id"]) for m in tail] == list(range(7, 16))
    assert json.loads(tail[1]["data"])["type"] == "fork"
    assert http.get(f"/runs/{fork_id}/events", headers={"Last-Event-ID": "15"}).status_code == 204
