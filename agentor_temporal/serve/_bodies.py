"""Request bodies read only from a client with the token, a decision's only up to its size.

FastAPI reads and parses a route's body before its dependencies run, so the
token's check came after the whole body was in memory: a client without the
token could send gigabytes (it was answered 400 for the body, not 401), and
a decision's body, a few kilobytes at most, had no bound either. This ASGI
layer answers 401 to a request that sends a body without the token before a
byte of it is read, and 413 to a decision's body past `DECISION_BODY_BYTES`
(declared or as it streams).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentor_temporal.workflows.policies import MAX_DECISION_TEXT

#: A decision's body at most: its reason and name at MAX_DECISION_TEXT characters
#: each, every one JSON-escaped as a surrogate pair (12 bytes), with room to spare.
DECISION_BODY_BYTES = 256 * 1024

_DECISION_ROUTE = re.compile(r"^/runs/[^/]+/approvals/.+$")
#: methods whose requests carry a body; the routes open without a token are GETs
_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: the route's own 401 (the message and header `_guard` sends)
Refusal = tuple[int, str, dict[str, str]]


class BodyGuard:
    """Refuse a body sent without the token (401) or past a decision's size (413), unread."""

    def __init__(
        self, app: ASGIApp, authorized: Callable[[HTTPConnection], bool], refusal: Refusal
    ) -> None:
        self.app, self.authorized, self.refusal = app, authorized, refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        if not self.authorized(HTTPConnection(scope)):
            await _answer(send, *self.refusal)
            return
        if scope["method"] != "POST" or not _DECISION_ROUTE.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        too_large: Refusal = (
            413,
            f"a decision's body is at most {DECISION_BODY_BYTES} bytes (its reason and by "
            f"at most {MAX_DECISION_TEXT} characters each); nothing changed",
            {},
        )
        declared = HTTPConnection(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > DECISION_BODY_BYTES:
            await _answer(send, *too_large)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > DECISION_BODY_BYTES:
                await _answer(send, *too_large)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read, once, then what the connection says next (its disconnect)."""
    given = False

    async def again() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _answer(send: Send, status: int, error: str, headers: dict[str, str]) -> None:
    content = json.dumps({"error": error}).encode()
    raw: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        # the body left unread: the connection cannot carry another request
        (b"connection", b"close"),
        *((k.lower().encode(), v.encode()) for k, v in headers.items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})
