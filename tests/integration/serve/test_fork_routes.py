"""A fork read over HTTP: its whole log (the parent's events first) and SSE positions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import httpx

from helpers import PROMPT, SEED_EVENT_TYPES
from serve_http import ledger_for, read_sse, settle


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


def test_post_fork_makes_a_fork_at_once_and_refuses_bad_requests(http: httpx.Client) -> None:
    """POST /runs/{id}/fork: 202 with the fork's id, which completes; 400/404/409 say why not."""
    parent = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
    done = settle(http, parent, "completed")
    fork_id = f"fork-{uuid.uuid4().hex[:8]}"

    made = http.post(
        f"/runs/{parent}/fork", json={"input": "Now do the same for Paris.", "fork_id": fork_id}
    )

    assert made.status_code == 202, made.text
    assert made.json() == {"run_id": fork_id, "forked_from": parent}
    assert made.headers["location"] == f"/runs/{fork_id}"
    fork = settle(http, fork_id, "completed")
    assert fork["events"][:7] == done["events"]
    assert fork["events"][7]["forked_from"] == parent
    assert "Paris" in fork["final_output"]
    # no body: a finished parent's snapshot; at=N: its first N events, then the fork's own
    snapshot = http.post(f"/runs/{parent}/fork")
    assert snapshot.status_code == 202, snapshot.text
    copy = settle(http, snapshot.json()["run_id"], "completed")
    assert [e["type"] for e in copy["events"]] == [*SEED_EVENT_TYPES, "fork"]
    assert copy["final_output"] == done["final_output"]
    early = http.post(f"/runs/{parent}/fork", json={"at": 4})
    assert early.status_code == 202, early.text
    again = settle(http, early.json()["run_id"], "completed")
    assert again["events"][:4] == done["events"][:4] and again["events"][4]["type"] == "fork"

    def refused(path: str, body: dict[str, object], status: int, words: str) -> None:
        answer = http.post(path, json=body)
        assert answer.status_code == status, answer.text
        assert words in answer.json()["error"]

    refused(f"/runs/{parent}/fork", {"fork_id": fork_id}, 409, "already exists")
    refused(f"/runs/{parent}/fork", {"input": []}, 400, "empty list")
    refused(f"/runs/{parent}/fork", {"at": 99}, 400, "at=99")
    refused(f"/runs/{parent}/fork", {"fork_id": "../x"}, 400, "")
    refused(f"/runs/{parent}/fork", {"max_turns": 0}, 400, "max_turns")
    refused(f"/runs/no-such-run-{uuid.uuid4().hex[:6]}/fork", {}, 404, "no-such-run")


def test_a_fork_sent_again_with_its_idempotency_key_is_the_first_fork(
    http: httpx.Client, serve_env: dict[str, str]
) -> None:
    """A client that retries `POST /runs/{id}/fork` (a timeout, a dropped connection) with the
    same `Idempotency-Key` gets the fork its first request made: no second fork paying the
    model and running the tool again."""
    parent = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
    settle(http, parent, "completed")
    key = {"Idempotency-Key": f"fork-{uuid.uuid4().hex}"}
    body = {"input": "Now do the same for Paris."}

    made = [http.post(f"/runs/{parent}/fork", json=body, headers=key) for _ in range(2)]

    assert [m.status_code for m in made] == [202, 202], [m.text for m in made]
    fork_id = made[0].json()["run_id"]
    assert made[1].json() == {"run_id": fork_id, "forked_from": parent}
    assert made[1].headers["location"] == f"/runs/{fork_id}"
    settle(http, fork_id, "completed")
    late = http.post(f"/runs/{parent}/fork", json=body, headers=key)
    assert late.status_code == 202 and late.json()["run_id"] == fork_id
    assert len(ledger_for(serve_env, fork_id)) == 1
    # the key names a fork of this parent: another parent, or another key, forks anew
    other = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
    settle(http, other, "completed")
    elsewhere = http.post(f"/runs/{other}/fork", headers=key)
    assert elsewhere.status_code == 202 and elsewhere.json()["run_id"] != fork_id
    fresh = http.post(f"/runs/{parent}/fork", headers={"Idempotency-Key": "another"})
    assert fresh.status_code == 202 and fresh.json()["run_id"] != fork_id
    both = http.post(f"/runs/{parent}/fork", json={"fork_id": "f-x"}, headers=key)
    assert both.status_code == 400 and "not both" in both.json()["error"]
    bad = http.post(f"/runs/{parent}/fork", headers={"Idempotency-Key": "x" * 256})
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]
