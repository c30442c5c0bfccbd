"""The HTTP routes against a real server process, a real worker process and real HTTP.

Each route with its error cases: Agentor's (`/health`, `/chat`, the agent
card), the run routes, the token, and the page's own route.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path

import httpx
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal.testing import CallTool, ScriptedModelServer

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, wait_until
from serve_http import TOKEN, Server, ledger_for, read_sse, settle

APPROVED_TYPES = [
    "run_start",
    "generation",
    "tool_call",
    "approval_request",
    "approval_decision",
    "tool_result",
    "generation",
    "message",
    "run_end",
]


def test_health_and_agent_card_need_no_token_everything_else_does(server: Server) -> None:
    """/health and the agent card are open; every other route wants the bearer token."""
    # a connection each: uvicorn closes one idle for 5 s, and a request sent on it as it
    # did (a loaded machine's pause between two) was reset
    fresh = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=server.url, timeout=10, limits=fresh) as anonymous:
        health = anonymous.get("/health")
        assert (health.status_code, health.text) == (200, "OK")
        card = anonymous.get("/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json()["name"] == "Weather Agent"
        assert card.json()["security"] == [{"bearer": []}]
        for method, path in [
            ("POST", "/runs"),
            ("GET", "/runs/x"),
            ("GET", "/runs/x/events"),
            ("POST", "/runs/x/resume"),
            ("POST", "/runs/x/approvals/c"),
            ("POST", "/chat"),
            ("POST", "/"),
        ]:
            refused = anonymous.request(method, path, json={})
            assert refused.status_code == 401, (method, path, refused.text)
            assert "Bearer" in refused.json()["error"]
            assert refused.headers["www-authenticate"] == "Bearer"
        wrong = anonymous.get("/runs/x", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert anonymous.get("/").status_code == 401
        assert anonymous.get("/?token=nope").status_code == 401
        # the page's way in: the token once in the address, then a cookie
        entered = anonymous.get(f"/?token={TOKEN}", follow_redirects=True)
        assert entered.status_code == 200 and "<title>agentor-temporal</title>" in entered.text
        assert entered.history[0].status_code == 303
        cookie = entered.history[0].headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie
        # behind a TLS proxy (uvicorn trusts its X-Forwarded-Proto from 127.0.0.1): Secure
        proxied = httpx.get(
            f"{server.url}/?token={TOKEN}", headers={"X-Forwarded-Proto": "https"}, timeout=10
        )
        assert proxied.status_code == 303
        assert "; secure" in proxied.headers["set-cookie"].lower(), proxied.headers
        assert anonymous.get("/runs/x").status_code == 404  # past the token now
        # with a token, no interactive docs to walk around it
        assert anonymous.get("/docs").status_code == 404
        assert anonymous.get("/openapi.json").status_code == 404


def test_start_returns_at_once_and_get_reports_the_result(
    http: httpx.Client, serve_env: dict[str, str]
) -> None:
    """POST /runs answers 202 at once; GET shows the RunResult; one id never runs twice."""
    run_id = uuid.uuid4().hex
    started = http.post("/runs", json={"input": PROMPT, "run_id": run_id})
    assert started.status_code == 202
    assert started.json() == {"run_id": run_id}
    assert started.headers["location"] == f"/runs/{run_id}"
    done = settle(http, run_id, "completed")
    assert done["final_output"] == ANSWER and done["agent"] == "Weather Agent"
    assert [e["type"] for e in done["events"]] == SEED_EVENT_TYPES
    assert done["usage"]["total_tokens"] == 30 and done["pending_approvals"] == []
    again = http.post("/runs", json={"input": "something else", "run_id": run_id})
    assert again.status_code == 202 and again.json() == {"run_id": run_id}
    assert http.get(f"/runs/{run_id}").json()["events"] == done["events"]
    assert len(ledger_for(serve_env, run_id)) == 1
    fresh = http.post("/runs", json={"input": PROMPT}).json()["run_id"]
    assert len(fresh) == 32 and fresh != run_id


async def _taken(address: str) -> str:
    """The id of a closed workflow of another type (the app's own `order-1234`)."""
    client = await Client.connect(address)
    taken = f"order-{uuid.uuid4().hex[:8]}"
    await client.start_workflow("OrderWorkflow", "x", id=taken, task_queue="nobody")
    await client.get_workflow_handle(taken).terminate("done with it")
    return taken


def test_run_route_errors(http: httpx.Client, serve_env: dict[str, str]) -> None:
    """Bad bodies, bad ids, unknown agents, unknown runs and ids that another type of
    workflow holds (read as a run of no events, or a 500) are clear JSON errors."""
    cases = [
        ({}, "input: Field required"),
        ({"input": ""}, "input is an empty prompt"),
        ({"input": []}, "input is an empty message list"),
        ({"input": PROMPT, "agent": "Nobody"}, "no agent named 'Nobody'"),
        ({"input": PROMPT, "run_id": "../etc"}, "Invalid run id"),
        ({"input": PROMPT, "max_turns": 0}, "max_turns"),
        ({"input": PROMPT, "colour": "red"}, "colour"),
        ({"input": [{"content": "hi"}]}, "not a chat message"),
        # refused before anything starts, not Temporal's raw "Blob data size exceeds limit"
        ({"input": "x" * 3_000_000}, "The input is too large"),
    ]
    for body, message in cases:
        answer = http.post("/runs", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert message in answer.json()["error"], (body, answer.json())
    broken = http.post("/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert broken.status_code == 400 and "JSON" in broken.json()["error"]
    assert http.get("/runs/.hidden").status_code == 400
    assert "Invalid run id" in http.get("/runs/a:b").json()["error"]
    missing = http.get(f"/runs/{uuid.uuid4().hex}")
    assert missing.status_code == 404 and "no run with id" in missing.json()["error"]
    assert http.get("/no/such/route").status_code == 404
    assert "Traceback" not in http.post("/runs", json={"input": 5}).text
    taken = asyncio.run(_taken(serve_env["TEMPORAL_ADDRESS"]))
    said = f"{taken!r} is a workflow of type 'OrderWorkflow' in Temporal, not an agent run"
    for answer in (
        http.get(f"/runs/{taken}"),
        http.get(f"/runs/{taken}/events"),
        http.post(f"/runs/{taken}/resume"),
        http.post("/runs", json={"input": PROMPT, "run_id": taken}),
    ):
        assert answer.status_code in (400, 404), answer.text
        assert said in answer.json()["error"], answer.text


def test_events_stream_whole_run_positions_and_resume_points(http: httpx.Client) -> None:
    """SSE ids are whole-run positions; Last-Event-ID or ?after=N resumes after N; 204 at end."""
    run_id = http.post("/runs", json={"input": PROMPT, "stream_text": True}).json()["run_id"]
    with http.stream("GET", f"/runs/{run_id}/events?text=1") as live:
        assert live.status_code == 200
        assert live.headers["content-type"].startswith("text/event-stream")
        messages = list(read_sse(live))
    assert messages[0] == {"retry": "500", "data": ""}
    recorded = [m for m in messages if "id" in m]
    deltas = [json.loads(m["data"]) for m in messages if "id" not in m and m["data"]]
    assert [int(m["id"]) for m in recorded] == list(range(1, 8))
    assert [json.loads(m["data"])["type"] for m in recorded] == SEED_EVENT_TYPES
    assert deltas and {d["type"] for d in deltas} == {"text_delta"}
    assert "".join(d["text"] for d in deltas) == ANSWER
    whole = http.get(f"/runs/{run_id}").json()["events"]
    assert [json.loads(m["data"]) for m in recorded] == whole

    with http.stream("GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": "4"}) as rest:
        tail = [m for m in read_sse(rest) if "id" in m]
    assert [int(m["id"]) for m in tail] == [5, 6, 7]
    with http.stream("GET", f"/runs/{run_id}/events?after=6") as rest:
        assert [m["id"] for m in read_sse(rest) if "id" in m] == ["7"]
    # the header is what a reconnecting browser sends: it wins over the URL's after
    with http.stream(
        "GET", f"/runs/{run_id}/events?after=1", headers={"Last-Event-ID": "5"}
    ) as rest:
        assert [m["id"] for m in read_sse(rest) if "id" in m] == ["6", "7"]
    finished = http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "7"})
    assert finished.status_code == 204

    assert http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "x"}).status_code == 400
    assert http.get(f"/runs/{run_id}/events?after=-1").status_code == 400
    assert http.get(f"/runs/{uuid.uuid4().hex}/events").status_code == 404
    assert http.get("/runs/.x/events").status_code == 400


def test_approvals_map_outcomes_to_200_404_409(
    http: httpx.Client, serve_env: dict[str, str], gates: Path
) -> None:
    """A waiting call is approved once (200); unknown run or call 404; decided or finished 409."""
    run_id = uuid.uuid4().hex
    (gates / run_id).touch()  # the approved transfer waits here, so the run is still running
    http.post("/runs", json={"input": "Pay bob", "run_id": run_id, "agent": "Treasurer"})
    waiting = settle(http, run_id, "awaiting_approval")
    [pending] = waiting["pending_approvals"]
    assert pending["tool"] == "transfer" and pending["args"] == {"amount": 1, "to": "bob"}
    call_id = pending["call_id"]
    route = f"/runs/{run_id}/approvals/{call_id}"

    unknown_run = http.post(f"/runs/{uuid.uuid4().hex}/approvals/{call_id}", json={"approve": True})
    assert unknown_run.status_code == 404 and "no run" in unknown_run.json()["error"]
    unknown_call = http.post(f"/runs/{run_id}/approvals/call_nope", json={"approve": True})
    assert unknown_call.status_code == 404 and "call_nope" in unknown_call.json()["error"]
    assert http.post(route, json={"approve": "maybe"}).status_code == 400
    assert http.post(route, json={}).status_code == 400
    assert http.post(route, json={"approve": True, "turn": 0}).status_code == 400
    # a decision naming another turn's call with this id (models reuse ids) decides nothing
    other_turn = http.post(route, json={"approve": True, "turn": 2})
    assert other_turn.status_code == 409, other_turn.text
    assert "not waiting for turn 2's call" in other_turn.json()["error"]
    # pinned to the execution that asked (a cancelled and resumed run asks in another)
    execution = pending["execution_run_id"]
    assert execution, pending
    assert http.post(route, json={"approve": True, "execution_run_id": "x"}).status_code == 400
    elsewhere = http.post(route, json={"approve": True, "execution_run_id": str(uuid.uuid4())})
    assert elsewhere.status_code == 404, elsewhere.text
    assert "has no execution" in elsewhere.json()["error"]
    assert ledger_for(serve_env, run_id) == []

    approved = http.post(
        route,
        json={
            "approve": True,
            "reason": "invoice 42",
            "by": "alice",
            "turn": 1,
            "execution_run_id": execution,
        },
    )
    assert approved.status_code == 200, approved.text
    assert approved.json() == {
        "run_id": run_id,
        "call_id": call_id,
        "tool": "transfer",
        "args": {"amount": 1, "to": "bob"},
        "turn": 1,
        "approved": True,
    }
    again = http.post(route, json={"approve": False, "reason": "changed my mind"})
    assert again.status_code == 409 and "already approved" in again.json()["error"]
    (gates / run_id).unlink()
    done = settle(http, run_id, "completed")
    assert [e["type"] for e in done["events"]] == APPROVED_TYPES
    decision = done["events"][4]
    assert (decision["status"], decision["result"], decision["text"]) == (
        "approved",
        "alice",
        "invoice 42",
    )
    late = http.post(route, json={"approve": True})
    assert late.status_code == 409 and "not waiting" in late.json()["error"]
    assert len(ledger_for(serve_env, run_id)) == 1


def test_deny_tells_the_model_and_resume_returns_the_result(http: httpx.Client) -> None:
    """Deny with a reason; POST /resume returns the finished RunResult; resume errors are JSON."""
    run_id = uuid.uuid4().hex
    http.post("/runs", json={"input": "Pay carol", "run_id": run_id, "agent": "Treasurer"})
    [pending] = settle(http, run_id, "awaiting_approval")["pending_approvals"]
    denied = http.post(
        f"/runs/{run_id}/approvals/{pending['call_id']}",
        json={"approve": False, "reason": "over the limit"},
    )
    assert denied.status_code == 200 and denied.json()["approved"] is False
    resumed = http.post(f"/runs/{run_id}/resume")
    assert resumed.status_code == 200, resumed.text
    body = resumed.json()
    assert body["status"] == "completed" and "over the limit" in body["final_output"]
    assert body["agent"] == "Treasurer"
    with_body = http.post(f"/runs/{run_id}/resume", json={"max_turns": 3})
    assert with_body.json()["events"] == body["events"]  # finished: nothing runs again
    assert http.post(f"/runs/{run_id}/resume", json={"max_turns": 0}).status_code == 400
    assert http.post(f"/runs/{uuid.uuid4().hex}/resume").status_code == 404
    assert http.post("/runs/a'b/resume").status_code == 400


def test_chat_answers_as_agentor_does(http: httpx.Client) -> None:
    """POST /chat: the answer as a JSON string, or Agentor's streamed AgentOutput chunks."""
    answer = http.post("/chat", json={"input": PROMPT})
    assert answer.status_code == 200
    assert answer.json() == ANSWER
    run_id = answer.headers["x-agentor-run-id"]
    assert http.get(f"/runs/{run_id}").json()["status"] == "completed"

    with http.stream("POST", "/chat", json={"input": PROMPT, "stream": True}) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        body = streamed.read().decode()
    decoder, chunks, at = json.JSONDecoder(), [], 0
    while at < len(body):
        chunk, end = decoder.raw_decode(body, at)
        chunks.append(chunk)
        assert body[end] == "\n"
        at = end + 1
    assert body.startswith('{\n  "type": "run_item_stream_event",\n  "message": null,')
    assert [list(c) for c in chunks] == [
        ["type", "message", "chunk", "tool_action", "reasoning", "raw_event"]
    ] * 3
    assert [c["tool_action"] for c in chunks] == [
        {"name": "get_weather", "type": "tool_called"},
        {"name": "get_weather", "type": "tool_output"},
        None,
    ]
    assert chunks[1]["message"] == "The weather in London is sunny and 22C."
    assert chunks[2]["message"] == ANSWER

    assert http.post("/chat", json={"input": ""}).status_code == 400
    assert http.post("/chat", json={"stream": True}).status_code == 400
    assert http.post("/chat", json={"input": PROMPT, "agent": "Nobody"}).status_code == 400


def test_a_start_sent_again_with_its_idempotency_key_attaches_to_the_first_run(
    http: httpx.Client, serve_env: dict[str, str]
) -> None:
    """A client that retries `POST /chat` or `POST /runs` (a timeout, a dropped connection)
    with the same `Idempotency-Key` gets the run its first request started: no second
    run, so no tool runs twice."""
    key = {"Idempotency-Key": f"order-{uuid.uuid4().hex}"}
    first = http.post("/chat", json={"input": PROMPT}, headers=key)
    again = http.post("/chat", json={"input": PROMPT}, headers=key)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == ANSWER
    run_id = first.headers["x-agentor-run-id"]
    assert again.headers["x-agentor-run-id"] == run_id
    with http.stream("POST", "/chat", json={"input": PROMPT, "stream": True}, headers=key) as s:
        assert s.headers["x-agentor-run-id"] == run_id
        assert ANSWER in s.read().decode()
    assert len(ledger_for(serve_env, run_id)) == 1
    # another key is another run; without one, every request is a run of its own
    other = http.post("/chat", json={"input": PROMPT}, headers={"Idempotency-Key": "other"})
    assert other.headers["x-agentor-run-id"] != run_id

    key = {"Idempotency-Key": uuid.uuid4().hex}
    started = [http.post("/runs", json={"input": PROMPT}, headers=key) for _ in range(2)]
    assert [r.status_code for r in started] == [202, 202]
    assert started[0].json()["run_id"] == started[1].json()["run_id"]
    settle(http, started[0].json()["run_id"], "completed")
    assert len(ledger_for(serve_env, started[0].json()["run_id"])) == 1

    both = http.post("/runs", json={"input": PROMPT, "run_id": "r-x"}, headers=key)
    assert both.status_code == 400 and "not both" in both.json()["error"]
    for bad in (b"x" * 256, "café".encode()):
        refused = http.post("/chat", json={"input": PROMPT}, headers={"Idempotency-Key": bad})
        assert refused.status_code == 400, bad
        assert "Idempotency-Key" in refused.json()["error"]


def test_page_is_one_self_contained_file(http: httpx.Client) -> None:
    """GET / is one HTML document with inline script and style, fetching nothing elsewhere."""
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert 'const AGENTS = ["Weather Agent","Treasurer"]' in html.replace(", ", ",")
    for external in ("<script src", "<link", "http://", "https://", "@import"):
        assert external not in html, external


async def _cancel(address: str, run_id: str) -> None:
    client = await Client.connect(address)
    handle = client.get_workflow_handle(run_id)
    await handle.cancel()
    with contextlib.suppress(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 30)


def test_a_decision_names_the_request_it_answers_by_its_event_position(
    http: httpx.Client, serve_env: dict[str, str]
) -> None:
    """`asked_at` (the approval request's `id:` in the event stream, what the page sends)
    decides that request's call only: once the run was cancelled and resumed, and asks
    again, the request read before decides nothing (409), the new one's position decides
    the call waiting now."""
    run_id = uuid.uuid4().hex
    http.post("/runs", json={"input": "Pay bob", "run_id": run_id, "agent": "Treasurer"})
    first = settle(http, run_id, "awaiting_approval")
    [pending] = first["pending_approvals"]
    call_id, before = pending["call_id"], len(first["events"])
    assert first["events"][before - 1]["type"] == "approval_request"
    route = f"/runs/{run_id}/approvals/{call_id}"
    not_a_request = http.post(route, json={"approve": True, "asked_at": 1})
    assert not_a_request.status_code == 409, not_a_request.text
    assert "not the approval request" in not_a_request.json()["error"]
    assert http.post(route, json={"approve": True, "asked_at": 0}).status_code == 400
    conflicting = http.post(route, json={"approve": True, "asked_at": before, "turn": 2})
    assert conflicting.status_code == 409, conflicting.text

    asyncio.run(_cancel(serve_env["TEMPORAL_ADDRESS"], run_id))
    resumed = http.post(f"/runs/{run_id}/resume").json()
    assert resumed["status"] == "awaiting_approval", resumed
    [again] = resumed["pending_approvals"]
    assert again["execution_run_id"] != pending["execution_run_id"]
    now = max(i + 1 for i, e in enumerate(resumed["events"]) if e["type"] == "approval_request")
    assert now > before
    # the request read before the cancel, by its position: its execution has ended
    stale = http.post(route, json={"approve": True, "asked_at": before})
    assert stale.status_code == 409, stale.text
    assert "that has ended" in stale.json()["error"]
    assert ledger_for(serve_env, run_id) == []
    route = f"/runs/{run_id}/approvals/{again['call_id']}"
    approved = http.post(route, json={"approve": True, "by": "alice", "asked_at": now})
    assert approved.status_code == 200, approved.text
    assert settle(http, run_id, "completed")["final_output"]
    assert len(ledger_for(serve_env, run_id)) == 1


def test_the_page_token_never_reaches_the_servers_log(server: Server) -> None:
    """Opening the page as `/?token=...` (as documented) leaves the token out of the log.

    Before: `agentor-temporal serve` printed
    `"GET /?token=<AGENTOR_SERVE_TOKEN> HTTP/1.1" 303` (uvicorn's access log),
    so anyone who reads the logs (a log shipper, a shared terminal) could use
    the API. Now the access log's path is redacted like every other URL, and the
    token is a secret of the server's process, masked whatever name it came under.
    """
    with httpx.Client(base_url=server.url, timeout=10) as anonymous:
        entered = anonymous.get(f"/?token={TOKEN}")
        assert entered.status_code == 303
        # the query's name percent-encoded: the server decodes it (still the token), and
        # the log's line masked a value only after a name it could read
        assert anonymous.get(f"/?%74oken={TOKEN}").status_code == 303
        # a request after it: the access line of the first is written by then
        assert anonymous.get("/health").status_code == 200
    wait_until(lambda: "/health" in server.output(), "the server to log the requests", 10)
    assert TOKEN not in server.output()


#: updates the capped server takes per execution (Temporal's default: 2,000)


def test_a_resume_sent_again_with_its_idempotency_key_starts_no_second_segment(
    http: httpx.Client, serve_env: dict[str, str], serve_model: ScriptedModelServer
) -> None:
    """A client that retries `POST /runs/{id}/resume` with the same `Idempotency-Key` after
    the segment its first request started has ended (at its turn limit again, or failed)
    gets that segment's outcome: no third segment, no model request, no tool run again.
    Another key (or none) resumes the run as before."""
    run_id = uuid.uuid4().hex
    http.post("/runs", json={"input": PROMPT, "run_id": run_id, "max_turns": 1})
    settle(http, run_id, "max_turns")
    assert len(ledger_for(serve_env, run_id)) == 1
    serve_model.push(CallTool("get_weather", {"city": "Paris"}))  # the resumed turn calls again
    key = {"Idempotency-Key": f"resume-{uuid.uuid4().hex}"}
    first = http.post(f"/runs/{run_id}/resume", json={"max_turns": 1}, headers=key)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "max_turns"
    assert len(ledger_for(serve_env, run_id)) == 2
    requests = serve_model.request_count

    again = http.post(f"/runs/{run_id}/resume", json={"max_turns": 1}, headers=key)
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "max_turns"
    assert again.json()["events"] == first.json()["events"]
    assert serve_model.request_count == requests
    assert len(ledger_for(serve_env, run_id)) == 2

    other = http.post(f"/runs/{run_id}/resume", headers={"Idempotency-Key": "another"})
    assert other.status_code == 200 and other.json()["status"] == "completed"
    assert serve_model.request_count == requests + 1
    bad = http.post(f"/runs/{run_id}/resume", headers={"Idempotency-Key": "x" * 256})
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]
