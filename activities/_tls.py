"""One TLS context for every model client of this process.

Each openai client builds its HTTP pool, and each pool its own TLS context,
loading the system's trust store: 45-60 ms of CPU and a megabyte or so of
certificates per client, made for every agent, endpoint and event loop a
worker serves (a worker of 20 agents on two loops: 40 of them, though one
trust store serves them all). The context made the way the HTTP library
makes its default (its trust store, `SSL_CERT_FILE`/`SSL_CERT_DIR` honoured)
is made once here, when the first client is, and shared: an `SSLContext`
may serve any number of connections, threads and loops at once.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

_lock = threading.Lock()
_context: ssl.SSLContext | None = None


def shared_context(client_class: type) -> ssl.SSLContext | None:
    """The process's TLS context for clients of `client_class` (openai's HTTP client), or
    None where that is not a client whose library's default this module knows how to
    make (each client then makes its own, as before)."""
    global _context
    if not any(base.__module__.startswith("httpx2") for base in client_class.__mro__):
        return None
    with _lock:
        if _context is None:
            _context = _library_default()
        return _context


def _library_default() -> ssl.SSLContext | None:
    """The context httpx2 makes for a client given no `verify` (httpcore2's default)."""
    try:
        from httpcore2 import default_ssl_context
    except ImportError:
        return None
    context: Any = default_ssl_context()
    return context if isinstance(context, ssl.SSLContext) else None
