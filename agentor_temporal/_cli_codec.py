"""`agentor-temporal codec-server` and `keygen`, and the codec server `dev` starts.

Keys are read from `--encryption-keys-file` or the environment, never from
the command line (other users can read a process's arguments).
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path

from agentor_temporal._cli_common import EXIT_OK, EXIT_USAGE, CliError
from agentor_temporal.codec import (
    EncryptionKeys,
    check_key_id,
    keys_from_env,
    keys_from_file,
    new_key,
)
from agentor_temporal.codec_server import (
    DEFAULT_ORIGINS,
    TOKEN_ENV,
    CodecServer,
    read_token,
    running_codec_server,
    start_codec_server,
)
from agentor_temporal.connection import DevServer, dev_server_status
from agentor_temporal.workflows.redaction import looks_like_key


def cli_keys(args: argparse.Namespace) -> EncryptionKeys | None:
    """--encryption-keys-file's keys, else the environment's, else None."""
    path = getattr(args, "encryption_keys_file", None)
    return keys_from_file(path) if path else keys_from_env()


def cmd_codec_server(args: argparse.Namespace) -> int:
    """Serve /encode and /decode until SIGTERM/SIGINT."""
    keys = cli_keys(args)
    if keys is None:
        raise CliError(
            "the codec server needs the encryption keys: set AGENTOR_ENCRYPTION_KEYS "
            "(or AGENTOR_ENCRYPTION_KEYS_FILE), or pass --encryption-keys-file",
            EXIT_USAGE,
        )
    try:
        token = read_token(args.token_file)
    except OSError as exc:
        raise CliError(_token_file_error(args.token_file, exc)) from None
    origins = args.cors_origin or list(DEFAULT_ORIGINS)
    try:
        server = CodecServer(keys, host=args.host, port=args.port, origins=origins, token=token)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        print(
            f"codec server on {server.url}: keys {', '.join(keys.ids)} (current "
            f"{keys.current_id}); CORS origins {', '.join(origins)}; "
            f"bearer token {'required' if token else 'not required'}",
            flush=True,
        )
        stop.wait()
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    """Print a new `key_id:base64` entry."""
    key_id = args.key_id or time.strftime("k%Y%m%d")
    # the id checked alone: a key parsed here would be one this process holds, and its
    # printed lines mask those (`k1:***`)
    check_key_id(key_id, "keygen")
    print(f"{key_id}:{new_key()}")
    return EXIT_OK


def dev_codec(args: argparse.Namespace, data: Path) -> str | None:
    """With encryption on, the codec endpoint for a dev server about to start (its server runs).

    Returns None when encryption is off or a dev server already runs (its
    endpoint was fixed when it started; `report_codec` says what it has).
    """
    keys = cli_keys(args)
    if keys is None or dev_server_status(data, args.port, args.ui_port) is not None:
        return None
    port = running_codec_server(data)
    if port is None:
        origins = [f"http://localhost:{args.ui_port}", f"http://127.0.0.1:{args.ui_port}"]
        try:
            start_codec_server(data, args.codec_port, origins, args.encryption_keys_file)
        except RuntimeError as exc:
            raise CliError(str(exc)) from None
        port = args.codec_port
    return f"http://localhost:{port}"


def report_codec(args: argparse.Namespace, server: DevServer) -> None:
    """Say where the UI decrypts runs, or why it cannot."""
    if server.codec_endpoint:
        print(f"  codec    {server.codec_endpoint} (the UI decrypts payloads through it)")
    elif cli_keys(args) is not None and not server.started:
        print(
            "  codec    none: this dev server was started without encryption keys, so its UI "
            "shows payloads encrypted; `agentor-temporal dev stop`, then `dev` again"
        )


def _token_file_error(path: str, exc: OSError) -> str:
    """Why the token file cannot be read; its path is not quoted when it is the token
    itself (the two settings mixed up: `--token-file <token>`), as the keys file's is not."""
    reason = exc.strerror or type(exc).__name__
    if "/" not in path and looks_like_key(path):
        return (
            f"cannot read the token file ({reason}): --token-file holds what looks like a "
            f"token, not a file's path; put the token in a file and pass its path, or set "
            f"{TOKEN_ENV} (the value is not shown: it may be the token)"
        )
    return f"cannot read the token file {path!r}: {reason}"
