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

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from agentor_temporal.activities._env_secrets import env_variable_secrets
from agentor_temporal.codec import held_keys
from agentor_temporal.store.encoding import encodable_text
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.redaction import (
    MIN_SECRET_CHARS,
    RedactingFilter,
    forget_texts,
    mask_all,
    redact,
    secret_forms,
)

T = TypeVar("T")

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
    "agentor_temporal.activities._errors",
    "agentor_temporal.activities._joining",
    "agentor_temporal.activities._paused_handover",
    "agentor_temporal.activities._private",
    "agentor_temporal.activities._reset_answers",
    "agentor_temporal.activities._ended",
    "agentor_temporal.activities._starts",
    "agentor_temporal.activities._store_patience",
    "agentor_temporal.activities.conversations",
    "agentor_temporal.activities.model",
    "agentor_temporal.activities.registry",
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
    # the event loop's and the thread pool's, which tools run on: in a script's own process
    # (the embedded worker, whose handlers are the script's) asyncio's "Task exception was
    # never retrieved" quoted a task a tool dropped, with the error it failed with
    "asyncio",
    "concurrent.futures",
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
    base64); a secret too short to mask is not masked in any form. Without the
    whitespace around it too: a variable from a Kubernetes secret made from a file
    keeps the file's last line break, and whoever reads it strips it.
    """
    if secret and len(secret) >= MIN_SECRET_CHARS:
        forms = secret_forms(secret)
        stripped = secret.strip()
        if stripped != secret and len(stripped) >= MIN_SECRET_CHARS:
            forms += secret_forms(stripped)
        with _guard:
            _known.update(forms)
    install()


def secrets() -> list[str]:
    """The secrets known so far (longest first, so a key containing another masks whole).

    The process's own keys (`OPENAI_API_KEY`, `TEMPORAL_API_KEY`) among them from the
    first call: a process that only reads runs (`show`, `list`) masks them too.
    """
    if not _installed:
        install()
    _remember_environment()
    _remember_held_keys()
    for read in _sources:
        for secret in read():
            remember(secret)
    with _guard:
        return sorted(_known, key=len, reverse=True)


#: Settings read again on each `secrets()`, each returning the secrets it holds that are new
#: since it last did (`watch`).
_sources: list[Callable[[], list[str]]] = []


def watch(read: Callable[[], list[str]]) -> None:
    """Read `read` again on each `secrets()` and remember what it returns: for a setting that
    may change while the process runs (a Temporal client's API key, rotated in place). It
    must be cheap and return only what changed."""
    with _guard:
        if read not in _sources:
            _sources.append(read)


def clean(text: str, pieces: bool = False) -> str:
    """`text` with URL credentials, query values and every known secret masked (`pieces`:
    as `mask_secrets`').

    Error text, so made encodable too (U+FFFD for a lone surrogate): a log line
    or failure message holding one is refused by every UTF-8 encoder.
    """
    return encodable_text(redact(text, secrets(), pieces))


def mask_secrets(text: str, pieces: bool = False) -> str:
    """`text` with every known secret masked (URLs left as they are: this is content).

    With `pieces`, each piece of one at a word's edge too (`workflows.key_pieces`): for a
    tool's result or error, which may be one chunk of a file the key is cut across.
    """
    text = mask_all(text, secrets(), pieces)
    forget_texts()
    return text


def mask_input(value: T) -> T:
    """`value` (a prompt, or chat messages) with every known secret masked in each text.

    What a caller sends to a run is recorded as it is: in the workflow's input
    (history, the Temporal UI), the JSONL mirror, `show` and `export`. A key
    this process knows (its `OPENAI_API_KEY`, `TEMPORAL_API_KEY`, an agent's
    `api_key` or header) pasted into a prompt is masked before it gets there,
    as a key the model repeats or a tool returns is. Dict keys and the
    structure are kept; only text values change.
    """
    known = secrets()
    if not known:
        return value
    return cast(T, _masked(value, known))


#: The fields of an `Event` that hold content (the model's text, a tool's arguments and
#: result, the request messages).
CONTENT_FIELDS = ("text", "reasoning", "args", "result", "messages", "calls")


def masked_event(event: Event, error: Callable[[str], str] = mask_secrets) -> Event:
    """`event` with every key this process knows masked in its content and its error
    (`error` redacts the error text: `clean` also masks URL credentials).

    For a run's content recorded as a client sent it: a run started by any Temporal
    client (`temporal workflow start`, a user's workflow's `run_agent`) with a key in its
    input, which no process masked before history got it. The JSONL mirror and every
    reader show it masked. The same event when nothing is masked.
    """
    known = secrets()
    changes: dict[str, Any] = {}
    if event.error:
        shown = error(event.error)
        if shown != event.error:
            changes["error"] = shown
    if known:
        for name in CONTENT_FIELDS:
            value = getattr(event, name)
            masked = _masked(value, known) if value is not None else None
            if masked != value:
                changes[name] = masked
    return dataclasses.replace(event, **changes) if changes else event


def _masked(value: object, known: list[str]) -> object:
    if isinstance(value, str):
        return mask_all(value, known)
    if isinstance(value, dict):
        return {k: _masked(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v, known) for v in value]
    return value


#: How many of `codec.held_keys` are remembered.
_keys_seen: list[int] = [0]
_keys_lock = threading.Lock()


def _remember_held_keys() -> None:
    """Remember the encryption keys this process holds, however it was given them (a key
    file, `encryption_keys="id:base64"`, `EncryptionKeys` built in code; not only
    `AGENTOR_ENCRYPTION_KEYS`, a credential variable): a tool reading the key file, or an
    error quoting an entry, recorded the key as it was in the JSONL mirror beside the
    encrypted history, and in every decrypted view."""
    with _keys_lock:
        new = held_keys(_keys_seen[0])
        for written, *others in new:
            # its base64 as written in every form a server may echo it in; the others as they
            # are (any letter case: `folded`), a few more forms to test each text against
            remember(written)
            with _guard:
                _known.update(form for form in others if len(form) >= MIN_SECRET_CHARS)
        _keys_seen[0] += len(new)


#: Each variable's value as `_remember_environment` last read it, and the environment's
#: fingerprint then.
_scanned: dict[str, str] = {}
_environment_seen: list[int] = []


def _remember_environment() -> None:
    """Remember the credentials of the process's environment, as it is now.

    Read again whenever it changed (a cheap fingerprint, on each `secrets()`): an agent's
    module calling `load_dotenv()` or setting `GITHUB_TOKEN` from a vault when it is
    imported does so after the command has set up its masking, and a tool returning such
    a variable recorded it as it was. A variable gone or changed stays masked as it was.
    """
    data = getattr(os.environ, "_data", None)  # CPython's: a fingerprint in microseconds
    seen = hash(frozenset((data if isinstance(data, dict) else os.environ).items()))
    if _environment_seen and _environment_seen[0] == seen:
        return
    for name, value in list(os.environ.items()):
        if _scanned.get(name) != value:
            _remember_variable(name, value)
            _scanned[name] = value
    # once every credential is remembered: a caller in another thread reads them all
    _environment_seen[:] = [seen]


def _remember_variable(name: str, value: str) -> None:
    """Remember the credentials one environment variable holds.

    The process's own keys (OPENAI_API_KEY, TEMPORAL_API_KEY: known before, and without, a
    connection), a variable named as one (GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD),
    and those inside a value of any name (`env_value_secrets`): a tool reading one and
    returning it, or an error quoting it, shows `***`.
    """
    for secret in env_variable_secrets(name, value):
        remember(secret)


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
    _remember_environment()
    log_filter = _ExceptionRedactingFilter(_Known())
    for name in LOGGERS:
        logging.getLogger(name).addFilter(log_filter)
    for name in ARGS_LOGGERS:
        logging.getLogger(name).addFilter(_ArgsRedactingFilter())


class _HandlerRedactingFilter(_ExceptionRedactingFilter):
    """On a handler: redacts every record it prints, of any logger, its cached
    traceback (another handler formatted it first) and stack too."""

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        for field in ("exc_text", "stack_info"):
            text = getattr(record, field, None)
            if text:
                setattr(record, field, redact(text, secrets()))
        return True


def guard_handlers() -> None:
    """Redact every record the root logger's handlers print (a command's own stderr).

    The filters on `LOGGERS` see only those loggers' records; a process's
    handler also prints the records of every other logger that propagates to it:
    a tool's own logger's (a warning quoting its token),
    asyncio's "Task exception was never retrieved" with the exception a tool's
    background task failed with, a library's. The CLI and the worker call this
    once they have set up logging, so each line they print is masked.

    So is what Python prints on stderr past logging: a warning (`warnings.warn`, a
    tool's "token ... expires soon"), the traceback of a thread a tool started that
    failed, and an exception ignored in a finalizer; and each line written on stdout
    and stderr (a tool's `print`, `_masked_output`).
    """
    install()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _HandlerRedactingFilter) for f in handler.filters):
            handler.addFilter(_HandlerRedactingFilter(_Known()))
    _guard_stderr_hooks()
    from agentor_temporal.activities._masked_output import guard_streams

    guard_streams()


def _guard_stderr_hooks() -> None:
    """Mask warnings, a thread's uncaught exception and an unraisable one (Python's own
    hooks; one another library set up is left to it)."""
    import sys
    import traceback
    import warnings

    if not getattr(warnings.formatwarning, "_masked", False):
        formatwarning = warnings.formatwarning

        def masked_warning(*args: Any, **kwargs: Any) -> str:
            return clean(formatwarning(*args, **kwargs))

        masked_warning._masked = True  # type: ignore[attr-defined]
        warnings.formatwarning = masked_warning

    if threading.excepthook is threading.__excepthook__:

        def thread_hook(args: threading.ExceptHookArgs) -> None:
            if args.exc_type is SystemExit:
                return
            name = args.thread.name if args.thread is not None else threading.get_ident()
            lines = traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
            _to_stderr(clean(f"Exception in thread {name}:\n{''.join(lines)}"))

        threading.excepthook = thread_hook

    if sys.unraisablehook is sys.__unraisablehook__:

        def unraisable_hook(unraisable: Any) -> None:
            said = unraisable.err_msg or "Exception ignored in"
            text = f"{said}: {unraisable.object!r}\n" if unraisable.object is not None else ""
            text += "".join(
                traceback.format_exception(
                    unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback
                )
            )
            _to_stderr(clean(text))

        sys.unraisablehook = unraisable_hook


def _to_stderr(text: str) -> None:
    """Write `text` to stderr, as Python's own hooks do: nothing where there is none (a script
    started with `2>&-`; `print(file=None)` wrote the traceback to stdout, into its output)."""
    import sys

    stream = sys.stderr
    if stream is not None:
        stream.write(text)
