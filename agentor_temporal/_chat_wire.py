"""How a scripted answer goes over HTTP: chat-completions JSON, or its event stream.

Written by hand onto the asyncio stream, with no HTTP framework, so the
scripted server costs little at hundreds of concurrent requests. Every
answer reports the same token usage (`USAGE`), which tests can count on.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def send_json(
    writer: asyncio.StreamWriter,
    status: int,
    payload: Any,
    headers: dict[str, str] | None = None,
) -> None:
    """Send `payload` as a JSON response with `status` (and extra `headers`)."""
    body = json.dumps(payload).encode()
    reason = {
        200: "OK",
        400: "Bad Request",
        401: "Unauthorized",
        404: "Not Found",
        429: "Too Many Requests",
    }.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    for key, value in (headers or {}).items():
        head += f"{key}: {value}\r\n"
    writer.write(head.encode() + b"\r\n" + body)


def completion(ident: str, model: str, message: dict[str, Any]) -> dict[str, Any]:
    """A whole (not streamed) chat completion answering with `message`."""
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": USAGE,
    }


async def stream_reply(
    writer: asyncio.StreamWriter,
    ident: str,
    request: dict[str, Any],
    message: dict[str, Any],
    model: str,
    chunk_delay: float = 0.0,
) -> None:
    """Send `message` as a streamed completion: text in word-sized chunks, then `[DONE]`.

    The connection closes after it (`Connection: close`).
    """
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        data: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            if delta is not None
            else [],
        }
        if usage is not None:
            data["usage"] = usage
        return f"data: {json.dumps(data)}\n\n".encode()

    writer.write(chunk({"role": "assistant", "content": ""}))
    text = message.get("content")
    if text:
        for piece in re.findall(r"\S+\s*|\s+", text):
            writer.write(chunk({"content": piece}))
            await writer.drain()
            if chunk_delay:
                await asyncio.sleep(chunk_delay)
    for index, call in enumerate(message.get("tool_calls") or []):
        writer.write(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": call["function"],
                        }
                    ]
                }
            )
        )
    writer.write(chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    if (request.get("stream_options") or {}).get("include_usage"):
        writer.write(chunk(None, usage=USAGE))  # type: ignore[arg-type]
    writer.write(b"data: [DONE]\n\n")
    await writer.drain()
