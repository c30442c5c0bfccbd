"""Serving agents over HTTP: Agentor's routes, durable run routes, A2A, and a page.

    agent.serve()                              # one agent, this process also runs it
    agentor-temporal serve --agents app:agent  # a web tier in front of a worker fleet

`serve` runs the FastAPI app (`create_app`) under uvicorn on the process's
runtime loop, the one the facade's Temporal clients and embedded workers
live on, so route handlers await the facade directly. The web tier keeps no
state of its own: every route starts, reads or steers a run by id through
Temporal, so a restarted server (or another replica) carries on where the
last one stopped, and an `EventSource` reconnecting with `Last-Event-ID`
misses nothing. Importing this package is cheap; FastAPI, uvicorn and
a2a-sdk (the `serve` extra) are imported when an app is built.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from agentor_temporal.agent import Agentor

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ServeUnavailable", "create_app", "serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: The environment variable holding the bearer token (unset or empty: no check).
TOKEN_ENV = "AGENTOR_SERVE_TOKEN"


class ServeUnavailable(ImportError):
    """The `serve` extra (fastapi, uvicorn, a2a-sdk) is not installed."""


def require_extra() -> None:
    """Raise `ServeUnavailable`, naming the install command, unless the extra is installed."""
    import importlib.util

    missing = [
        name for name in ("fastapi", "uvicorn", "a2a") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise ServeUnavailable(
            f"serving over HTTP needs {', '.join(missing)}: pip install 'agentor-temporal[serve]'"
        )


def create_app(agents: Sequence[Agentor], *, token: str | None = None) -> FastAPI:
    """The ASGI app serving `agents` (see `agentor_temporal.serve.app.create_app`).

    Mount it in your own ASGI server if you like; run it on the facade's
    runtime loop (as `serve` does) or any loop: the facade crosses loops.
    """
    require_extra()
    from agentor_temporal.serve.app import create_app as build

    return build(agents, token=token)


def serve(
    agents: Sequence[Agentor],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    token: str | None = None,
    log_level: str = "info",
    access_log: bool = True,
    **uvicorn_options: Any,
) -> None:
    """Serve `agents` over HTTP until SIGINT/SIGTERM (blocking).

    Args:
        agents: the agents; the first answers `/chat`, A2A and runs that
            name no agent. Each runs an embedded worker for the server's
            life if its `embedded_worker` is set (the facade's default).
        host: where to listen; 127.0.0.1 unless told otherwise.
        port: the TCP port.
        token: bearer token for every route but `/health` and the agent
            card; default `AGENTOR_SERVE_TOKEN` (unset or empty: none).
        log_level: uvicorn's log level.
        access_log: log each request.
        **uvicorn_options: more `uvicorn.Config` options.

    Raises:
        ServeUnavailable: without the `serve` extra.
        ValueError: for bad agents (none, duplicate names, different servers).
        OSError: when the address cannot be listened on.
        ConnectionFailed: when Temporal cannot be reached.
    """
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    app = create_app(agents, token=token)
    from agentor_temporal._runtime import Runtime
    from agentor_temporal.serve._server import run

    # Temporal first: unreachable is one clear error, not a failed startup
    runtime = Runtime.get()
    runtime.run_sync(agents[0]._client())

    run(app, host, port, log_level=log_level, access_log=access_log, **uvicorn_options)
