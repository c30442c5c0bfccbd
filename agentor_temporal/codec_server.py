"""The codec server: Temporal's `/encode` and `/decode` over HTTP, for the UI and the CLI.

The Temporal UI (and `temporal ... --codec-endpoint`) cannot read encrypted
payloads; pointed at this server, the browser sends it the payloads on the
page and shows what comes back, so people who can reach the server see runs
in the clear while Temporal itself never holds a key. The protocol is
Temporal's remote codec: `POST {endpoint}/decode` (or `/encode`) with
`{"payloads": [...]}` in protobuf JSON, answered in the same shape. The
browser calls it cross-origin, so answers carry CORS headers for the UI's
origins only; an optional bearer token guards it against other callers.

A payload whose key this server lacks is returned as it came (the UI keeps
showing it encrypted) and logged with its key id, so one unreadable payload
does not hide the rest of a page. A decoded payload's text has the keys this
process knows masked (`_shown`), as `show` masks them. Standard library HTTP: no web framework.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from agentor_temporal.activities._redact import mask_secrets
from agentor_temporal.codec import ENCODING, EncryptionCodec, EncryptionKeyError, EncryptionKeys
from agentor_temporal.connection import process_running

logger = logging.getLogger("agentor_temporal.codec_server")

#: Where the embedded dev server's UI is, and so the default allowed origins.
DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
#: The codec server's port beside the dev server's (7233) and UI's (8233).
DEFAULT_PORT = 8234
#: Env var holding the bearer token callers must send (optional).
TOKEN_ENV = "AGENTOR_CODEC_TOKEN"
#: Largest request body: a history page of payloads, each at most 2 MB.
MAX_BODY = 64 * 1024 * 1024


class CodecServer:
    """An HTTP codec server on its own thread (use as a context manager, or `serve_forever`).

    Args:
        keys: the keys to decrypt (and encrypt) with.
        host: interface to bind; 127.0.0.1 unless it must be reached from elsewhere.
        port: 0 picks a free port.
        origins: browser origins allowed to call it (the UI's address); "*"
            allows any origin.
        token: when set, requests must carry `Authorization: Bearer <token>`.
    """

    def __init__(
        self,
        keys: EncryptionKeys,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        origins: Sequence[str] = DEFAULT_ORIGINS,
        token: str | None = None,
    ) -> None:
        self.codec = EncryptionCodec(keys)
        self.origins = frozenset(o.rstrip("/") for o in origins)
        self.token = token or None
        self._unreadable: set[str] = set()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where it listens, e.g. http://127.0.0.1:8234."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> CodecServer:
        """Serve on a background thread."""
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="agentor-codec-server", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until `stop` (or SIGTERM/SIGINT in the CLI)."""
        self.httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> CodecServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the protocol --------------------------------------------------------------

    def allowed_origin(self, origin: str | None) -> str | None:
        """The Access-Control-Allow-Origin answer for a browser origin, or None."""
        if not origin:
            return None
        if "*" in self.origins or origin.rstrip("/") in self.origins:
            return origin
        return None

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header passes the token check."""
        if self.token is None:
            return True
        expected = f"Bearer {self.token}".encode()
        return hmac.compare_digest((header or "").strip().encode(), expected)

    def transform(self, operation: str, body: bytes) -> bytes:
        """Answer an /encode or /decode body.

        Raises:
            ValueError: for a body that is not `{"payloads": [...]}`.
        """
        payloads = Payloads()
        try:
            json_format.Parse(body or b"{}", payloads)
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            raise ValueError(f'expected {{"payloads": [...]}} in protobuf JSON: {exc}') from None
        if operation == "encode":
            out = self.codec.encrypt(payloads.payloads)
        else:
            out = [_shown(self._decrypt(p)) for p in payloads.payloads]
        answer = json_format.MessageToDict(Payloads(payloads=out))
        return json.dumps({"payloads": answer.get("payloads", [])}).encode()

    def _decrypt(self, payload: Payload) -> Payload:
        try:
            return self.codec.decrypt([payload])[0]
        except EncryptionKeyError as exc:
            if exc.key_id not in self._unreadable:
                self._unreadable.add(exc.key_id)
                logger.warning("Left a payload encrypted: %s", exc)
            return payload


def _shown(payload: Payload) -> Payload:
    """A decoded payload as the UI shows it: every key this process knows masked in its text.

    History holds a run's input as its client sent it (`temporal workflow start`, a
    user's workflow): a key pasted there, or recorded by a worker that did not know it,
    is masked here as `show` and `export` mask it. Text only (JSON, plain); a payload
    still encrypted, or not text, is returned as it is.
    """
    if payload.metadata.get("encoding") == ENCODING:
        return payload
    try:
        text = payload.data.decode("utf-8")
    except UnicodeDecodeError:
        return payload
    masked = mask_secrets(text)
    if masked == text:
        return payload
    shown = Payload()
    shown.CopyFrom(payload)
    shown.data = masked.encode("utf-8")
    return shown


def _handler(server: CodecServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "agentor-codec"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            origin = server.allowed_origin(self.headers.get("Origin"))
            if origin is not None:
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            self._send(status, json.dumps({"error": message}).encode())

        def do_OPTIONS(self) -> None:  # noqa: N802 - http.server's naming
            # preflight: browsers send no credentials with it, so no token check
            self.send_response(HTTPStatus.NO_CONTENT)
            origin = server.allowed_origin(self.headers.get("Origin"))
            if origin is not None:
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header(
                    "Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization"
                )
                self.send_header("Access-Control-Max-Age", "600")
            self.send_header("Vary", "Origin")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/").endswith("/health"):
                self._send(HTTPStatus.OK, b'{"status": "ok"}')
            else:
                self._error(HTTPStatus.NOT_FOUND, "POST /encode or /decode")

        def do_POST(self) -> None:  # noqa: N802
            operation = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            if operation not in ("encode", "decode"):
                self._error(HTTPStatus.NOT_FOUND, "POST /encode or /decode")
                return
            if not server.authorized(self.headers.get("Authorization")):
                self._error(HTTPStatus.UNAUTHORIZED, "a valid bearer token is required")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY:
                self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
                self.close_connection = True
                return
            body = self.rfile.read(length)
            try:
                answer = server.transform(operation, body)
            except ValueError as exc:
                self._error(HTTPStatus.BAD_REQUEST, str(exc))
                return
            self._send(HTTPStatus.OK, answer)

    return Handler


def read_token(path: str | None) -> str | None:
    """The bearer token from a file, else `AGENTOR_CODEC_TOKEN`, else None."""
    if path:
        return Path(path).read_text().strip() or None
    return os.environ.get(TOKEN_ENV, "").strip() or None


# -- a detached codec server beside the embedded dev server -------------------------------


def _is_codec_server(pid: int) -> bool:
    return process_running(pid, b"codec-server")


def _port_open(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.3):
        return True
    return False


def running_codec_server(data_dir: str | os.PathLike[str]) -> int | None:
    """The port of the codec server started from `data_dir`, if it runs."""
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((Path(data_dir) / "codec.json").read_text())
        if _is_codec_server(int(info["pid"])):
            return int(info["port"])
    return None


def start_codec_server(
    data_dir: str | os.PathLike[str],
    port: int,
    origins: Sequence[str],
    keys_file: str | None = None,
    timeout: float = 30.0,
) -> int:
    """Start `agentor-temporal codec-server` detached (as the dev server is); return its pid.

    Its keys come from the environment it inherits, or `keys_file`: never
    from its command line, which other users can read.

    Raises:
        RuntimeError: when it does not come up, with its log's tail.
    """
    data = Path(data_dir)
    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = data / "codec.log"
    command = [sys.executable, "-m", "agentor_temporal", "codec-server", "--port", str(port)]
    for origin in origins:
        command += ["--cors-origin", origin]
    if keys_file:
        command += ["--encryption-keys-file", str(Path(keys_file).resolve())]
    with _private_log(log_path) as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    (data / "codec.json").write_text(json.dumps({"pid": process.pid, "port": port}))
    deadline = time.monotonic() + timeout
    while not _port_open(port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait(10)
            (data / "codec.json").unlink(missing_ok=True)
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the codec server did not start on port {port}:\n{tail}")
        time.sleep(0.05)
    return process.pid


def stop_codec_server(data_dir: str | os.PathLike[str], timeout: float = 10.0) -> bool:
    """Stop the codec server started from `data_dir`; True if one was stopped."""
    record = Path(data_dir) / "codec.json"
    pid = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = int(json.loads(record.read_text())["pid"])
    record.unlink(missing_ok=True)
    if pid is None or not _is_codec_server(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


@contextlib.contextmanager
def _private_log(path: Path) -> Iterator[Any]:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as handle:
        yield handle
