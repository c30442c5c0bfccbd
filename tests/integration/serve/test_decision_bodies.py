"""`POST /runs/{run_id}/approvals/{call_id}` with call ids and bodies a plain HTTP client sends.

A model's call id is any string (a `/` in it too), and the page and any
client put it in the address percent-encoded; a body is read only from a
client that holds the token, and only up to what a decision can hold.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import httpx

from agentor_temporal.serve._bodies import DECISION_BODY_BYTES
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from serve_http import Server, ledger_for, settle

#: A body far past any decision's, sent in pieces as a client streams it.
CHUNK, CHUNKS = 1_000_000, 200


def test_a_call_whose_id_holds_a_slash_is_decided_by_its_encoded_id(
    http: httpx.Client, serve_env: dict[str, str], serve_model: ScriptedModelServer
) -> None:
    """The route takes the call id with `/` (and `?`, `#`) in it: it answered 404 'Not Found'."""
    run_id = uuid.uuid4().hex
    call_id = "functions/transfer:0?x#1"
    serve_model.push(CallTool("transfer", {"amount": 3, "to": "dora"}, id=call_id), Reply("Sent."))
    http.post("/runs", json={"input": "Pay dora", "run_id": run_id, "agent": "Treasurer"})
    [pending] = settle(http, run_id, "awaiting_approval")["pending_approvals"]
    assert pending["call_id"] == call_id
    route = f"/runs/{run_id}/approvals/{quote(call_id, safe='')}"
    approved = http.post(route, json={"approve": True, "by": "alice"})
    assert approved.status_code == 200, approved.text
    assert (approved.json()["call_id"], approved.json()["approved"]) == (call_id, True)
    again = http.post(route, json={"approve": False})
    assert again.status_code == 409 and "already approved" in again.json()["error"], again.text
    # a prefix of the id (up to its slash) is no call of the run
    prefix = http.post(f"/runs/{run_id}/approvals/functions", json={"approve": True})
    assert prefix.status_code == 404 and "'functions'" in prefix.json()["error"], prefix.text
    settle(http, run_id, "completed")
    assert len(ledger_for(serve_env, run_id)) == 1


def _streamed(sent: list[int]) -> Iterator[bytes]:
    for i in range(CHUNKS):
        sent.append(i)
        yield b"{" + b" " * (CHUNK - 1)


def _post_streamed(client: httpx.Client, route: str) -> tuple[int | None, str, int]:
    """POST a huge streamed body: (status, or None if the server closed first; error; chunks)."""
    sent: list[int] = []
    try:
        response = client.post(
            route, content=_streamed(sent), headers={"content-type": "application/json"}
        )
    except httpx.TransportError:  # the server answered and closed while the body went out
        return None, "", len(sent)
    return response.status_code, response.json()["error"], len(sent)


def test_a_huge_decision_body_is_refused_before_it_is_read(server: Server) -> None:
    """Anonymous: 401 at once; with the token: 413 past DECISION_BODY_BYTES, unread.

    The server read every byte first (a 200 MB body took ~600 MB of its memory,
    from a client without the token too) and then answered 400 'JSON decode error'.
    """
    route = f"/runs/{uuid.uuid4().hex}/approvals/call_1"
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        status, error, chunks = _post_streamed(anonymous, route)
        assert status in (401, None) and chunks < CHUNKS // 4, (status, error, chunks)
        if status is not None:
            assert "needs a token" in error
        told = anonymous.post(route, content=b"{" * 10, headers={"content-type": "text/plain"})
        assert told.status_code == 401 and told.headers["www-authenticate"] == "Bearer"
    with server.client() as http:
        status, error, chunks = _post_streamed(http, route)
        assert status in (413, None) and chunks < CHUNKS // 4, (status, error, chunks)
        if status is not None:
            assert f"at most {DECISION_BODY_BYTES} bytes" in error, error
        declared = http.post(
            route,
            content=b" " * (DECISION_BODY_BYTES + 1),
            headers={"content-type": "application/json"},
        )
        assert declared.status_code == 413, declared.text
        assert f"at most {DECISION_BODY_BYTES} bytes" in declared.json()["error"]
        # the largest decision fits: its reason and name at their limits, escaped
        widest = "\U0001f600" * 4000
        fits = http.post(route, json={"approve": True, "reason": widest, "by": widest})
        assert fits.status_code == 404 and "no run" in fits.json()["error"], fits.text
