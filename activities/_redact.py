"""The secrets this process knows, and the loggers that must never print them.

Every API key a worker is configured with (an agent's `api_key`, or
`OPENAI_API_KEY`), and every credential of its endpoint (URL userinfo, request
headers), is remembered here, so that error text and log lines mask it
wherever it appears, as it is or encoded (a provider that echoes the key in
its error body);
URL credentials and query values are masked by their shape
(`workflows.redaction`). The filters go on the loggers that can print an
endpoint's URL or a provider's error: ours, `httpx`'s request lines, the
openai client's, and the Temporal SDK's activity and worker loggers.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator

from agentor_temporal.workflows.redaction import (
    MIN_SECRET_CHARS,
    RedactingFilter,
    mask_secret,
    redact,
    secret_forms,
)

_known: set[str] = set()
_guard = threading.Lock()
_installed = False

#: Loggers whose records may carry an endpoint URL or a provider's message:
#: every logger of this package, each by name (a logger's filter does not see
#: the records of its children; `tests/unit/test_redaction.py` checks this
#: list against every `getLogger` in the source), and the libraries' own.
LOGGERS = (
    "agentor_temporal",
    "agentor_temporal._continuing",
    "agentor_temporal._fork",
    "agentor_temporal._memory",
    "agentor_temporal.activities._definition",
    "agentor_temporal.activities._joining",
    "agentor_temporal.activities._private",
    "agentor_temporal.activities._starts",
    "agentor_temporal.activities.conversations",
    "agentor_temporal.activities.model",
    "agentor_temporal.activities.streaming",
    "agentor_temporal.activities.tooldef",
    "agentor_temporal.activities.tools",
    "agentor_temporal.activities.journal",
    "agentor_temporal.activities.mirror",
    "agentor_temporal.codec",
    "agentor_temporal.codec_server",
    "agentor_temporal.serve",
    "agentor_temporal.store.file",
    "agentor_temporal.worker",
    "temporalio",
    "temporalio.core",
    "temporalio.worker._workflow",
    "httpx",
    "httpcore",
    # openai 3 sends through the `httpx2` fork, which logs under its own name
    # (its INFO request line carries the URL: userinfo and query)
    "httpx2",
    "httpcore2",
    "openai",
    "openai._base_client",
    "temporalio.activity",
    "temporalio.workflow",
    "temporalio.worker._activity",
    "temporalio.worker._workflow_instance",
    # each module logger of the libraries, by name too (a parent's filter does
    # not see a child's records: `httpcore2.http11` logs the response's headers
    # at DEBUG); `tests/unit/test_redaction.py` checks this list against their
    # source
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "httpcore2.connection",
    "httpcore2.http11",
    "httpcore2.http2",
    "httpcore2.proxy",
    "httpcore2.socks",
    "openai._legacy_response",
    "openai._response",
    "openai.audio.transcriptions",
    "openai.lib.parsing",
    "openai.resources.beta.realtime.realtime",
    "openai.resources.beta.responses.responses",
    "openai.resources.live.forks",
    "openai.resources.live.live",
    "openai.resources.live.sideband",
    "openai.resources.realtime.realtime",
    "openai.resources.realtime.translations.translations",
    "openai.resources.responses.responses",
    "openai.resources.uploads.uploads",
    "temporalio.converter",
    "temporalio.nexus",
    "temporalio.nexus._link_conversion",
    "temporalio.service",
    "temporalio.worker._replayer",
    "temporalio.worker._tuning",
    "temporalio.worker._worker",
    "temporalio.worker.workflow_sandbox._importer",
    "temporalio.worker.workflow_sandbox._in_sandbox",
    "temporalio.worker.workflow_sandbox._restrictions",
    # the OTLP exporters' (`telemetry`): a failed export is logged with the
    # request's URL, its query too, or the endpoint
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
    # the HTTP server's (`serve`): uvicorn logs the traceback of every request
    # that failed (after our handler answered 500 and logged it redacted), and
    # of a stream that failed mid-way, with the exception's message as it is
    "uvicorn",
    "uvicorn.error",
    "uvicorn.asgi",
    "fastapi",
)


#: Loggers whose formatter unpacks the record's args (uvicorn's access log:
#: client, method, path with its query, version, status), so their args are
#: redacted one by one instead: the HTTP server's page is entered as
#: `/?token=<token>`, and that path is logged.
ARGS_LOGGERS = ("uvicorn.access",)


class _ArgsRedactingFilter(logging.Filter):
    """Redacts each text argument of a record, keeping the record's shape."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact(arg, secrets()) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


class _ExceptionRedactingFilter(RedactingFilter):
    """Also redacts the formatted traceback a record carries."""

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            cleaned = redact(text, secrets())
            if cleaned != text:
                record.exc_text = cleaned
        return True


def remember(secret: str | None) -> None:
    """Mask `secret` in every error and log line of this process from now on.

    In the forms a server may echo it in too (`secret_forms`: percent-encoded,
    base64); a secret too short to mask is not masked in any form.
    """
    if secret and len(secret) >= MIN_SECRET_CHARS:
        forms = secret_forms(secret)
        with _guard:
            _known.update(forms)
    install()


def secrets() -> list[str]:
    """The secrets known so far (longest first, so a key containing another masks whole)."""
    with _guard:
        return sorted(_known, key=len, reverse=True)


def clean(text: str) -> str:
    """`text` with URL credentials, query values and every known secret masked."""
    return redact(text, secrets())


def mask_secrets(text: str) -> str:
    """`text` with every known secret masked (URLs left as they are: this is content)."""
    for secret in secrets():
        text = mask_secret(text, secret)
    return text


class _Known:
    """A live view of the known secrets, for the log filter."""

    def __iter__(self) -> Iterator[str]:
        return iter(secrets())


def install() -> None:
    """Put the redacting filter on `LOGGERS` (once per process)."""
    global _installed
    with _guard:
        if _installed:
            return
        _installed = True
    remember(os.environ.get("OPENAI_API_KEY"))
    log_filter = _ExceptionRedactingFilter(_Known())
    for name in LOGGERS:
        logging.getLogger(name).addFilter(log_filter)
    for name in ARGS_LOGGERS:
        logging.getLogger(name).addFilter(_ArgsRedactingFilter())
