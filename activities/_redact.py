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

import base64
import binascii
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from typing import Any, TypeVar, cast
from urllib.parse import unquote, unquote_plus, urlsplit

from agentor_temporal.workflows.redaction import (
    MIN_SECRET_CHARS,
    RedactingFilter,
    credential_name,
    header_secrets,
    looks_like_key,
    mask_secret,
    query_credential,
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
    "agentor_temporal.activities._joining",
    "agentor_temporal.activities._private",
    "agentor_temporal.activities._starts",
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


#: Environment variable names whose values are credentials: the last word of the name
#: says so (`GITHUB_TOKEN`, `ANTHROPIC_API_KEY`, `DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`,
#: `AGENTOR_ENCRYPTION_KEYS`).
#: Not a word inside the name (`SSH_AUTH_SOCK`, `PASSWORD_STORE_DIR` are paths). The
#: last word may be glued to the one before when it cannot end another word
#: (`SYSTEM_ACCESSTOKEN`, `NGROK_AUTHTOKEN`, `MINIO_SECRETKEY`; not `HOTKEY`, `BYPASS`);
#: a personal access token (`AZURE_DEVOPS_EXT_PAT`), an auth or authorization value
#: (`NPM_CONFIG__AUTH`, `TEMPORAL_GRPC_META_AUTHORIZATION`) and a cookie are too. The
#: word may be plural (`CLIENT_SECRETS`; `API_TOKENS`, not `MAX_TOKENS`) and followed by
#: a rotation's or a list's suffix (`API_KEY_2`, `JWT_SECRET_OLD`, `STRIPE_SECRET_KEY_V2`,
#: Rails' `SECRET_KEY_BASE`); Terraform's `TF_TOKEN_<host>` is one whatever its host.
_ENV_CREDENTIAL = re.compile(
    r"(?:(?:(?:^|_)(?:KEYS?|APIKEY|PASS|CREDENTIALS?|PAT|AUTH|AUTHORIZATION|COOKIE)"
    r"|(?:TOKEN|SECRETS?|PASSWORDS?|PASSWD|PASSPHRASE|SECRETKEY|PRIVATEKEY)"
    r"|(?:^|_)(?:API|ACCESS|AUTH|BEARER|BOT|CLIENT|SERVICE)_?TOKENS)"
    r"(?:_(?:\d+|V\d+|OLD|NEW|PREV|PREVIOUS|NEXT|BACKUP|PRIMARY|SECONDARY|CURRENT"
    r"|FALLBACK|ROTATED|BASE))?$)"
    r"|^TF_TOKEN_",
    re.I,
)


#: The keys this process uses itself: masked whatever they look like.
_OWN_KEYS = frozenset({"OPENAI_API_KEY", "TEMPORAL_API_KEY"})


def env_credential(name: str) -> bool:
    """Whether an environment variable named `name` holds a credential (`_ENV_CREDENTIAL`)."""
    return bool(_ENV_CREDENTIAL.search(name))


def env_secret(value: str) -> bool:
    """Whether a credential variable's value is masked wherever it shows.

    Not a path to one (`GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp.json`), and not
    a short plain word (`DB_PASSWORD=postgres`, `changeme`): masked in every
    tool result and model answer, those garbled ordinary text ("connected to
    ***") and hid nothing anyone could not guess.
    """
    value = value.strip()
    if len(value) < MIN_SECRET_CHARS or value[0] in "/~.":
        return False
    return not (len(value) < 16 and value.isalpha())


#: A URL inside an environment variable's value (`DATABASE_URL`, a list of broker URLs).
_ENV_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s,;'\"<>`]+")


#: A `Name=value` setting inside a connection string (`AccountKey=...;`, ADO.NET's
#: `Password=...;`, libpq's `password=... host=...`), a command line's option
#: (`JAVA_TOOL_OPTIONS=-Dspring.datasource.password=...`, `--db-password=...`), an
#: `.npmrc` line (`//registry.npmjs.org/:_authToken=...`) or a YAML one (`password: ...`);
#: its value quoted (`Password="a;b"`, `password='a b'`) or not, a `=` in it only as
#: base64 padding.
_ENV_SETTING = re.compile(
    r"""(?:^|[;&\s:/\-])([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?:=|:(?=[ \t]))[ \t]*"""
    r"""(?:"([^"\n]*)"|'([^'\n]*)'|((?:(?:[Bb]earer|BEARER|[Bb]asic|BASIC)[ \t]+)?"""
    r"""[^;&\s,='"]+=*))"""
)


#: A PEM private key (`TEMPORAL_TLS_CLIENT_KEY_DATA`), its lines apart or joined by `\\n`.
_PEM_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(.*?)-----END", re.S)
#: Shortest line of a PEM body masked (a short last line could be any text).
_PEM_LINE = 16


def env_value_secrets(value: str) -> list[str]:
    """The credentials inside an environment variable's value, whatever its name: its URLs'
    (`env_url_secrets`), a connection string's settings whose names say credential
    (`AZURE_STORAGE_CONNECTION_STRING=...;AccountKey=<key>;...`, `Password=`, `Pwd=`,
    `SharedAccessKey=`, `sig=`; by the name's last word, `credential_name`: not
    `credential.helper=manager-core`), unless a plain word or a path (`env_secret`), each
    line of a PEM private key (`TEMPORAL_TLS_CLIENT_KEY_DATA`), and a JSON document's
    credential fields (`json_secrets`)."""
    found = env_url_secrets(value)
    for body in _PEM_KEY.findall(value):
        found += [line for line in re.split(r"\s+|\\n", body) if len(line) >= _PEM_LINE]
    for name, *items in _ENV_SETTING.findall(_ENV_URL.sub(" ", value)):
        item = "".join(items)  # the one that matched: double-quoted, single-quoted or bare
        if credential_name(name) and env_secret(item):
            found.append(item)
            # as an HTTP header's (OTEL_EXPORTER_OTLP_HEADERS' `authorization=Bearer%20<token>`):
            # percent-decoded, the token after its scheme, a Basic one's user:password
            found += [s for s in header_secrets(name, unquote(item)) if env_secret(s)]
    if value.lstrip().startswith(("{", "[")):
        found += json_secrets(value)
    return list(dict.fromkeys(found))


#: How deep `json_secrets` walks a document (a credentials file nests two or three levels).
_JSON_DEPTH = 16


def json_secrets(text: str) -> list[str]:
    """The credentials a JSON document holds (a variable of any name): the text values of
    fields whose names say credential (`credential_name`), at any depth, unless plain words
    or paths (`env_secret`); with the `user:password` and the password a base64 `auth`
    carries, and the secrets of every other text value (`env_value_secrets`: a connection
    string, a URL, a PEM key).

    GitLab's `DOCKER_AUTH_CONFIG` (`{"auths": {host: {"auth": base64}}}`), a service
    account's JSON (`GOOGLE_CREDENTIALS`: `private_key`), AWS's (`SecretAccessKey`,
    `SessionToken`), Azure's (`clientSecret`): a tool reading one and returning the field
    recorded it as it was, since only the whole variable's text was known.
    """
    try:
        document = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []

    def walk(node: object, name: str, depth: int) -> None:
        if depth > _JSON_DEPTH:
            return
        if isinstance(node, dict):
            for key, item in node.items():
                walk(item, str(key), depth + 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, name, depth + 1)
        elif isinstance(node, str):
            if credential_name(name) and env_secret(node):
                found.append(node)
                found.extend(_basic_pair(node))
            if "=" in node or "://" in node or "PRIVATE KEY" in node:
                found.extend(env_value_secrets(node))

    walk(document, "", 0)
    return found


def _basic_pair(value: str) -> list[str]:
    """The `user:password` and the password a base64 `auth` value encodes (Docker's)."""
    try:
        pair = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return []
    user, colon, password = pair.partition(":")
    if not colon or not pair.isprintable():
        return []
    return [s for s in (pair, password) if env_secret(s)]


def env_url_secrets(value: str) -> list[str]:
    """The credentials the URLs in an environment variable's value carry, whatever its name.

    `DATABASE_URL=postgresql://app:<password>@db/prod`, `HTTPS_PROXY=http://u:<password>@proxy`,
    `CELERY_BROKER_URL`, a webhook's key in its path, `?api-key=` in its query: the
    password (unless a plain word, as `env_secret`), a username shaped like a token or a
    long one alone (`https://<token>@github.com/...`; not `app` or `postgres`), credential
    query values and path segments shaped like a key. A tool reading its connection
    string and returning it recorded the password as it was: only error text masked a
    URL's userinfo by its shape.
    """
    found: list[str] = []
    for url in _ENV_URL.findall(value):
        try:
            parts = urlsplit(url)
            password, username = parts.password, parts.username
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
        # a token given as the username alone (`https://<token>@github.com/...`)
        long_alone = not password and len(username or "") >= 20
        if username and (looks_like_key(unquote(username)) or long_alone):
            found += [username, unquote(username)]
        for pair in parts.query.split("&"):
            name, equals, item = pair.partition("=")
            if equals and query_credential(unquote_plus(name), unquote_plus(item)):
                found += [item, unquote_plus(item)]
        found += [seg for seg in parts.path.split("/") if looks_like_key(unquote(seg))]
    return [s for s in dict.fromkeys(found) if env_secret(s)]


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


def _masked(value: object, known: list[str]) -> object:
    if isinstance(value, str):
        for secret in known:
            value = mask_secret(value, secret)
        return value
    if isinstance(value, dict):
        return {k: _masked(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v, known) for v in value]
    return value


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


def env_variable_secrets(name: str, value: str) -> list[str]:
    """The credentials an environment variable holds.

    Its whole value when it is one of the process's own keys or its name says credential
    (`env_credential`), and then each entry of a list (`API_TOKENS=<a>,<b>`,
    `AGENTOR_ENCRYPTION_KEYS`' `id:key` entries) too; and those inside a value of any name
    (`env_value_secrets`: a URL's, a connection string's, a JSON document's).
    """
    found: list[str] = []
    if name in _OWN_KEYS or (env_credential(name) and env_secret(value)):
        found.append(value)
        for entry in re.split(r"[,;\n]", value):
            for part in (entry.strip(), entry.partition(":")[2].strip()):
                if part != value and env_secret(part):
                    found.append(part)
    if (
        "=" in value
        or ": " in value  # a YAML document's `password: ...`
        or "://" in value  # DATABASE_URL's password
        or "PRIVATE KEY" in value
        or value.lstrip().startswith(("{", "["))  # DOCKER_AUTH_CONFIG, a service account
    ):
        found += env_value_secrets(value)
    return list(dict.fromkeys(found))


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
    failed, and an exception ignored in a finalizer.
    """
    install()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _HandlerRedactingFilter) for f in handler.filters):
            handler.addFilter(_HandlerRedactingFilter(_Known()))
    _guard_stderr_hooks()


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
            print(clean(f"Exception in thread {name}:\n{''.join(lines)}"), end="", file=sys.stderr)

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
            print(clean(text), end="", file=sys.stderr)

        sys.unraisablehook = unraisable_hook
