"""A scripted OpenAI-compatible chat-completions server for tests and demos.

A real HTTP server on localhost (the real `openai` client talks to it), run on
its own thread and event loop so hundreds of concurrent requests cost little.
Script it with steps: `Reply`, `CallTool`, `Fail` (an HTTP error, optionally
with Retry-After), `Drop` (close the connection), `Hang` (answer late), `Raw`
(any body at all: a malformed reply), or a function of the request. Without a
script it plays the default agent: call the first tool offered, then answer
with its result.

    with ScriptedModelServer([CallTool("get_weather", {"city": "London"}),
                              Reply("Sunny in London.")]) as server:
        agent = Agentor(..., base_url=server.base_url, api_key="test")

Run `python -m agentor_temporal.testing --port 8000` to serve the default
agent from a shell. The steps and the default agent live in `_script`, the
chat-completions wire format in `_chat_wire`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentor_temporal._chat_wire import USAGE, completion, send_json, stream_reply
from agentor_temporal._script import (
    CallTool,
    Drop,
    Fail,
    Hang,
    Raw,
    Reply,
    Step,
    assistant_message,
    tool_then_answer,
)

__all__ = [
    "USAGE",
    "CallTool",
    "Drop",
    "Fail",
    "Hang",
    "Raw",
    "Reply",
    "ScriptedModelServer",
    "Step",
    "main",
    "tool_then_answer",
]


class ScriptedModelServer:
    """The server; use as a context manager or call `start()` / `stop()`.

    Args:
        script: steps played in order (then the default agent), or a function
            from the request body to a step.
        latency: seconds every response waits before it is sent.
        chunk_delay: seconds between the chunks of a streamed response.
        host, port: where to listen (port 0 picks a free one).
        keep_requests: keep only this many recent request bodies in
            `requests` (a long run's requests add up to gigabytes).
    """

    #: the assistant message a step answers with (a subclass may answer others)
    _message = staticmethod(assistant_message)

    def __init__(
        self,
        script: Sequence[Step] | Callable[[dict[str, Any]], Step] | None = None,
        *,
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_requests: int | None = None,
    ) -> None:
        self.latency = latency
        self.keep_requests = keep_requests
        self._received = 0
        self.chunk_delay = chunk_delay
        self.host = host
        self.port = port
        #: every request body received, in order of arrival
        self.requests: list[dict[str, Any]] = []
        #: the query string and headers (names lower-cased) of the last request
        self.last_query = ""
        self.last_headers: dict[str, str] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self.set_script(script)

    # -- scripting -------------------------------------------------------------------

    def set_script(self, script: Sequence[Step] | Callable[[dict[str, Any]], Step] | None) -> None:
        """Replace the script (steps still queued are dropped)."""
        with self._lock:
            if callable(script):
                self._responder: Callable[[dict[str, Any]], Step] | None = script
                self._queue: list[Step] = []
            else:
                self._responder = None
                self._queue = list(script or [])

    def push(self, *steps: Step) -> None:
        """Queue more steps after the current ones."""
        with self._lock:
            self._queue.extend(steps)

    @property
    def request_count(self) -> int:
        """How many chat-completions requests arrived."""
        with self._lock:
            return self._received

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> None:
        """Block until `count` requests arrived.

        Raises:
            TimeoutError: naming how many did arrive.
        """
        deadline = time.monotonic() + timeout
        while self.request_count < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.request_count} of {count} model requests arrived")
            time.sleep(0.01)

    def _next_step(self, request: dict[str, Any]) -> Step:
        with self._lock:
            self.requests.append(request)
            self._received += 1
            if self.keep_requests is not None and len(self.requests) > self.keep_requests:
                del self.requests[: len(self.requests) - self.keep_requests]
            if self._responder is not None:
                return self._responder(request)
            if self._queue:
                return self._queue.pop(0)
        return tool_then_answer(request)

    # -- lifecycle -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The `base_url` to give `Agentor` / the `openai` client."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> ScriptedModelServer:
        """Start serving on a background thread; returns self."""
        self._thread = threading.Thread(target=self._serve, name="scripted-model", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the scripted model server did not start")
        return self

    def stop(self) -> None:
        """Stop serving."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, self.host, self.port, backlog=2048)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    # -- HTTP ------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # asyncio sets it on TCP transports already; said here, since a
            # reply held back by Nagle's algorithm adds 40 ms to every turn
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = h.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                keep = await self._respond(method, path, body, writer, headers)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError):
            return  # a client hung up, or the server is stopping
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _respond(
        self,
        method: str,
        path: str,
        body: bytes,
        writer: asyncio.StreamWriter,
        headers: dict[str, str] | None = None,
    ) -> bool:
        route, _, query = path.partition("?")
        if method != "POST" or not route.rstrip("/").endswith("/chat/completions"):
            if route.rstrip("/").endswith("/models"):
                send_json(
                    writer, 200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                )
                return True
            send_json(
                writer,
                404,
                {"error": {"message": f"no route {method} {path}", "type": "not_found"}},
            )
            return True
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            send_json(
                writer,
                400,
                {"error": {"message": "body is not JSON", "type": "invalid_request_error"}},
            )
            return True
        with self._lock:
            self.last_query, self.last_headers = query, dict(headers or {})
        step: Any = self._next_step(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        while True:
            if isinstance(step, Hang):
                await asyncio.sleep(step.seconds)
                step = step.then if step.then is not None else tool_then_answer(request)
            elif callable(step) and not isinstance(step, (Reply, CallTool, Fail, Drop, Raw)):
                step = step(request)
            else:
                break
        if isinstance(step, Drop):
            writer.transport.abort()
            return False
        if isinstance(step, Raw):
            raw: Any = step.body
            if isinstance(raw, bytes):
                data = raw
            else:
                data = (raw if isinstance(raw, str) else json.dumps(raw)).encode()
            writer.write(
                (
                    f"HTTP/1.1 {step.status} Scripted\r\nContent-Type: {step.content_type}\r\n"
                    + "".join(f"{name}: {value}\r\n" for name, value in step.headers.items())
                    + f"Content-Length: {len(data)}\r\n\r\n"
                ).encode()
                + data
            )
            return True
        if isinstance(step, Fail):
            after = step.retry_after
            extra = (
                {}
                if after is None
                else {"retry-after": after if isinstance(after, str) else f"{after:g}"}
            )
            kind = "rate_limit_error" if step.status == 429 else "invalid_request_error"
            send_json(
                writer, step.status, {"error": {"message": step.message, "type": kind}}, extra
            )
            return True
        message = self._message(step)
        model = str(request.get("model") or "scripted")
        ident = f"chatcmpl-{next(self._ids)}"
        if request.get("stream"):
            await stream_reply(writer, ident, request, message, model, self.chunk_delay)
            return False
        send_json(writer, 200, completion(ident, model, message))
        return True


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the default agent until interrupted."""
    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible model server.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    args = parser.parse_args(argv)
    server = ScriptedModelServer(latency=args.latency, port=args.port).start()
    print(f"serving the scripted model at {server.base_url} (Ctrl-C stops)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.stop()


if __name__ == "__main__":
    main()
