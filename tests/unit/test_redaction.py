"""Secrets never leak: URL credentials, query values and known keys are masked."""

from __future__ import annotations

import base64
import html
import importlib
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from agentor_temporal.activities import AgentDefinition, _env_secrets, _redact
from agentor_temporal.telemetry import CORE_LOGGER
from agentor_temporal.workflows.redaction import (
    RedactingFilter,
    address_secrets,
    redact,
    redact_address,
    redact_url,
    url_secrets,
)


@pytest.mark.parametrize(
    "text, leaked",
    [
        ("unreachable at http://user:password@host:8000/v1/chat: boom", ["user", "password"]),
        ("at https://h/v1?api-key=S3CRETKEY&x=1.", ["S3CRETKEY"]),
        ("see http://tok@h/v1?a=b#frag)", ["tok@", "=b#"]),
        ("two: http://a:b1@h1/x and ftp://c:d2@h2/y?k=v", ["a:b1", "c:d2", "k=v"]),
        # a path's query outside a URL, its name percent-encoded (a server decodes it: a
        # wrong or stale token a client sent, in the access log's request line)
        ('"GET /?%74oken=stale-T0ken-4455 HTTP/1.1" 401', ["stale-T0ken-4455"]),
        ("no route POST /v1?%61pi-key=azkey-0a1b2c3d", ["azkey-0a1b2c3d"]),
    ],
)
def test_urls_lose_userinfo_and_query_values(text: str, leaked: list[str]) -> None:
    cleaned = redact(text)
    for secret in leaked:
        assert secret not in cleaned
    assert "***" in cleaned


def test_url_shape_and_sentence_survive() -> None:
    assert (
        redact("Model endpoint unreachable at http://u:p@127.0.0.1:9/v1/chat?api-key=k: Error.")
        == "Model endpoint unreachable at http://***@127.0.0.1:9/v1/chat?api-key=***: Error."
    )
    assert redact_url("http://h/v1") == "http://h/v1"


@pytest.mark.parametrize(
    "address, shown",
    [
        ("bob:pw%2F0058@temporal.example:7233", "***@temporal.example:7233"),
        ("https://bob:pw%2F0058@temporal.example:7233", "https://***@temporal.example:7233"),
        ("temporal.example:7233", "temporal.example:7233"),
    ],
)
def test_a_temporal_addresss_credentials_are_masked(address: str, shown: str) -> None:
    """A Temporal address has no scheme, so the URL pattern misses its `user:password@`."""
    assert redact_address(address) == shown
    if "@" in address:
        assert {"pw%2F0058", "pw/0058"} <= set(address_secrets(address))
    else:
        assert address_secrets(address) == []


def test_known_secrets_are_masked_anywhere() -> None:
    key = "sk-test-0123456789abcdef"
    assert redact(f"Incorrect API key provided: {key}.", [key]) == (
        "Incorrect API key provided: ***."
    )
    # too short to be a secret: left alone rather than garble every message
    assert redact("a b c", ["a"]) == "a b c"


def test_definitions_never_show_their_key_or_url() -> None:
    definition = AgentDefinition(
        name="A", model="m", base_url="http://u:pw@h/v1?key=q", api_key="sk-hidden-key-123"
    )
    shown = repr(definition)
    assert "sk-hidden-key-123" not in shown and "pw@" not in shown


def test_log_lines_and_tracebacks_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    """Records on the filtered loggers lose credentials, in the message and the traceback."""
    _redact.remember("sk-logged-key-98765")
    logger = logging.getLogger("httpx")
    with caplog.at_level(logging.INFO, logger="httpx"):
        logger.info("HTTP Request: POST %s", "http://u:pw@h/v1/chat?api-key=sk-logged-key-98765")
        try:
            raise RuntimeError("failed at http://u:pw@h/v1 with sk-logged-key-98765")
        except RuntimeError:
            logger.exception("oops")
    text = caplog.text
    assert "pw@" not in text and "sk-logged-key-98765" not in text
    assert "http://***@h/v1/chat?api-key=***" in text


def _package_loggers(package: str = "agentor_temporal") -> set[str]:
    """Every logger name a package's source asks for (`getLogger(...)`)."""
    root = Path(importlib.import_module(package).__file__ or "").resolve().parent
    names = set()
    for directory, _, files in os.walk(root, followlinks=True):
        if {"contrib", "testing"} & set(Path(directory).relative_to(root).parts):
            continue  # integrations and test helpers a worker does not run
        for file in files:
            if not file.endswith(".py"):
                continue
            path = Path(directory) / file
            module = ".".join(
                (package, *path.relative_to(root).with_suffix("").parts)
            ).removesuffix(".__init__")
            for literal in re.findall(r"getLogger\(([^)]*)\)", path.read_text()):
                if literal == "__name__":
                    names.add(module)
                elif literal.startswith('"'):
                    names.add(literal.strip('"'))
    return names


def test_every_logger_of_the_package_is_redacted() -> None:
    """Each logger the source creates carries the filter: a parent's does not cover it."""
    names = _package_loggers()
    assert "agentor_temporal.serve" in names and "agentor_temporal.activities.model" in names
    _redact.install()
    uncovered = sorted(
        name
        for name in names | {CORE_LOGGER}
        if not any(isinstance(f, RedactingFilter) for f in logging.getLogger(name).filters)
    )
    assert uncovered == []


#: The libraries a worker sends model requests and runs activities with, and the
#: HTTP server's (`serve`: uvicorn logs a failed request's traceback).
LIBRARIES = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "openai",
    "temporalio",
    "uvicorn",
    "fastapi",
)


def test_every_logger_of_the_libraries_is_redacted() -> None:
    """Each logger the HTTP client, openai, Temporal's SDK and uvicorn create carries the
    filter: `httpcore2.http11` logs the response's headers at DEBUG, and `httpcore2`'s filter does
    not see its records."""
    names = {
        name
        for library in LIBRARIES
        if importlib.util.find_spec(library) is not None
        for name in _package_loggers(library)
    }
    assert "httpcore.http11" in names and "temporalio.worker._worker" in names
    _redact.install()
    uncovered = sorted(
        name
        for name in names - set(_redact.ARGS_LOGGERS)  # their arguments are redacted instead
        if not any(isinstance(f, RedactingFilter) for f in logging.getLogger(name).filters)
    )
    assert uncovered == []


@pytest.mark.parametrize(
    "name",
    [
        "agentor_temporal.serve",
        "agentor_temporal.codec_server",
        CORE_LOGGER,
        "httpcore.http11",
        "temporalio.worker._worker",
    ],
)
def test_records_of_every_named_logger_lose_secrets(
    caplog: pytest.LogCaptureFixture, name: str
) -> None:
    _redact.remember("sk-child-logger-key-4242")
    with caplog.at_level(logging.WARNING):
        logging.getLogger(name).warning(
            "failed at http://u:pw12345@h/v1 with %s", "sk-child-logger-key-4242"
        )
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "sk-child-logger-key-4242" not in text and "pw12345" not in text


async def test_streamed_deltas_never_spell_a_key_even_split_across_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key arriving in pieces is masked before any piece of it is sent on."""
    from agentor_temporal.activities.streaming import MaskedDeltas

    key = "sk-streamed-key-0123456789"
    # this key alone (others this process knows would hold back their own beginnings)
    monkeypatch.setattr(_redact, "secrets", lambda: [key])
    sent: list[str] = []

    async def sink(text: str) -> None:
        sent.append(text)

    masked = MaskedDeltas(sink)
    pieces = ["The key is sk-str", "eamed-key-01", "23456789", " and more text", " to end."]
    for piece in pieces:
        await masked(piece)
    await masked.flush()
    assert "".join(sent) == "The key is *** and more text to end."
    # only what may begin a key waits: the rest is sent as it comes
    assert sent[0] == "The key is "
    assert sent[-2:] == [" and more text", " to end."]


async def test_a_key_beginning_padded_with_invisible_deltas_is_held_small(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reply streaming a key's beginning, then thousands of invisible characters one a
    delta: what is held back stays small (each delta read it all again: quadratic), and
    the key that follows is still masked."""
    from agentor_temporal.activities.streaming import MaskedDeltas

    key = "sk-streamed-key-0123456789"
    monkeypatch.setattr(_redact, "secrets", lambda: [key])
    sent: list[str] = []

    async def sink(text: str) -> None:
        sent.append(text)

    masked = MaskedDeltas(sink)
    await masked("The key is sk-str")
    for pad in ["\u200b", "%E2%80%8B", "&ZeroWidthSpace;", "\\u2060", "\ufe0f"] * 400:
        await masked(pad)
        assert len(masked.held) <= 600
    await masked("eamed-key-0123456789 and more")
    await masked.flush()
    assert "".join(sent) == "The key is *** and more"


@pytest.mark.parametrize(
    "written",
    [
        "sk-esc/aped-key-0123456789",  # as it is
        "sk\\u002Desc\\/aped-key-0123456789",  # JSON-escaped, upper-case hex
        "\\u0073k-esc\\/aped\\u002dkey-01234567\\u0038\\u0039",  # escapes at both ends
        "sk\\\\u002Desc\\\\\\\\/aped-key-0123456789",  # escaped twice, three times
        "sk-esc\x1b[01;31m\x1b[K/aped\x1b[m\x1b[K-key-0123456789",  # coloured in part (grep)
        "SK-ESC/APED-KEY-0123456789",  # upper-cased
        "sk%2Desc%2faped-key-012345678%39",  # percent-encoded, hex of either case
        "&#115;&#X6B;&#45;esc&sol;aped-key-0123456789",  # HTML character references
        "sk&amp;#x2d;esc&amp;amp;sol;aped&#38;#45;key-0123456789",  # references escaped again
        "sk\\u0026#x2d;esc\\u0026amp;sol;aped-key-0123456789",  # their `&` JSON-escaped (Go)
        "s\u200bk-esc/aped\u2060-key-0123\u00ad456789",  # invisible characters between
        "ｓｋ－ｅｓｃ／ａｐｅｄ－ｋｅｙ－０１２３４５６７８９",  # full-width letters
        "sk\u2011esc/aped\u2011key\u20110123456789",  # non-breaking hyphens (a GPT model's)
        "sk\u2010esc/aped\u2212key&hyphen;0123456789",  # a hyphen, a minus sign, a reference
        "sk\\u2011esc/aped%E2%80%91key-0123456789",  # JSON-escaped, percent-encoded
        "s\ufe0fk-esc\u034f/aped\u3164-key-0123\U000e0100456789",  # invisible, not `Cf`
        "İSTANBUL İZMİR sk-esc/aped-key-0123456789",  # after letters whose lower case is longer
    ],
)
async def test_streamed_deltas_never_show_a_key_in_any_masked_form_at_any_split(
    monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    """Followers never see any part of a key, as it is or JSON-escaped, wherever deltas split it."""
    from agentor_temporal.activities.streaming import MaskedDeltas
    from agentor_temporal.workflows.redaction import mask_secret

    key = "sk-esc/aped-key-0123456789"
    monkeypatch.setattr(_redact, "secrets", lambda: [key])
    reply = f'Here: {{"key": "{written}"}} done.'
    final = mask_secret(reply, key)
    assert key not in final and "***" in final
    for first in range(1, len(reply)):
        for second in range(first, len(reply)):
            sent: list[str] = []

            async def sink(text: str, sent: list[str] = sent) -> None:
                sent.append(text)

            masked = MaskedDeltas(sink)
            for piece in (reply[:first], reply[first:second], reply[second:]):
                await masked(piece)
                # what followers have seen is always the start of the masked reply
                assert final.startswith("".join(sent)), (first, second, sent)
            await masked.flush()
            assert "".join(sent) == final


#: Keys as endpoints take them in the query: a key, Azure's api-key, an Azure
#: Functions code, a SAS signature, and a key under a name that says nothing
_QUERY_KEYS = {
    "key": "AIzaSyQk-unit0123456789abc",
    "api-key": "azkey-unit-0a1b2c3d",
    "code": "fnCode-unit-0048",
    "sig": "q+v/sig-unit-0049",
    "x": "Zx81kQ2mN7pL4vR9sT3wY6aB",
}


def test_only_credential_query_values_of_a_base_url_are_secrets() -> None:
    """`api-version=2024-06-01` is data, masked nowhere; a credential's query value
    (by its name, or a key's shape under any name) is masked in content too."""
    query = "&".join(f"{name}={quote_plus(value)}" for name, value in _QUERY_KEYS.items())
    url = f"http://h/v1?api-version=2024-06-01&deployment=gpt-4o-mini&{query}"
    assert url_secrets(url) == [
        form for value in _QUERY_KEYS.values() for form in dict.fromkeys([quote_plus(value), value])
    ]
    AgentDefinition(name="A", model="m", base_url=url, api_key="sk-unit-query-0050")
    answer = "Azure's api-version 2024-06-01 serves gpt-4o-mini."
    assert _redact.mask_secrets(answer) == answer
    assert _redact.clean(answer) == answer
    for value in _QUERY_KEYS.values():
        assert _redact.mask_secrets(f"echoed {value} back") == "echoed *** back", value


_PASSWORD = "p@ss/w0rd!Zq7-unit"
_KEY = "sk-unit/Ab+Cd=Ef9876543210"


@pytest.mark.parametrize(
    "settings, echoed",
    [
        # a URL's credentials as sent: decoded, and base64 in a Basic header
        ({"base_url": f"http://bob:{quote(_PASSWORD, safe='')}@h/v1"}, [_PASSWORD]),
        (
            {"base_url": "http://bob:basic%2Fpw-0042@h/v1"},
            [base64.b64encode(b"bob:basic/pw-0042").decode()],
        ),
        ({"base_url": "http://h/v1?sig=q%2Bv%2Fsig-0043"}, ["q+v/sig-0043"]),
        # the key as a provider may quote it: percent-encoded, base64
        (
            {"api_key": _KEY},
            [
                quote(_KEY, safe=""),
                quote(_KEY),
                quote_plus(_KEY),
                # lower-case hex, as .NET's HttpUtility.UrlEncode writes it
                quote_plus(_KEY).replace("%2F", "%2f").replace("%2B", "%2b").replace("%3D", "%3d"),
                base64.b64encode(_KEY.encode()).decode(),
                base64.urlsafe_b64encode(_KEY.encode()).decode().rstrip("="),
            ],
        ),
        # header values: the token after the scheme, each cookie, any header name
        ({"extra_headers": {"Authorization": "Bearer hdr-TOKEN-0044"}}, ["hdr-TOKEN-0044"]),
        (
            {"extra_headers": {"Cookie": "session=ck-SESSION-0045; theme=dark-0046"}},
            ["ck-SESSION-0045", "dark-0046"],
        ),
        ({"extra_headers": {"X-Gateway": "gw-0047-abcdef"}}, ["gw-0047-abcdef"]),
        (
            {"extra_headers": {"Proxy-Authorization": "Basic dTpwdy0wMDQ4"}},
            ["pw-0048", "u:pw-0048"],
        ),
        ({"default_headers": {"Authorization": "Bearer dflt-TOKEN-0049"}}, ["dflt-TOKEN-0049"]),
        ({"extra_body": {"auth": {"api_key": "body-KEY-0050"}}}, ["body-KEY-0050"]),
        # the query values a base_url's query would have taken for credentials
        (
            {"extra_query": {"code": "fnQueryCode-0055", "v": ["Zx81kQ2mN7pL4vR9sT3w0056"]}},
            ["fnQueryCode-0055", "Zx81kQ2mN7pL4vR9sT3w0056"],
        ),
        # a gateway's key in the endpoint's path, as written and as sent
        (
            {"base_url": "https://gw.example/v1/gwPathKey%2B8a7B6c5D4e0057/openai"},
            ["gwPathKey%2B8a7B6c5D4e0057", "gwPathKey+8a7B6c5D4e0057"],
        ),
    ],
    ids=[
        "url-password-decoded",
        "url-basic-auth",
        "url-query-decoded",
        "key-encoded",
        "bearer-token",
        "cookie-values",
        "any-header",
        "basic-header",
        "default-headers",
        "extra-body",
        "extra-query",
        "url-path-key",
    ],
)
def test_credentials_are_masked_in_the_forms_a_provider_echoes(
    settings: dict[str, Any], echoed: list[str]
) -> None:
    """A definition's credentials are masked decoded, encoded and in part, not only as given."""
    known = {k: v for k, v in settings.items() if k in ("base_url", "api_key")}
    options = {k: v for k, v in settings.items() if k not in known}
    AgentDefinition(name="A", model="m", model_settings=options, **known)
    for text in echoed:
        assert _redact.clean(f"rejected {text}; try again") == "rejected ***; try again", text


def test_header_values_stay_out_of_history_and_plain_ones_unmasked() -> None:
    """default_headers and extra_body are client options: sent, never in the spec;
    headers that only describe the client are not taken for secrets."""
    definition = AgentDefinition(
        name="A",
        model="m",
        model_settings={
            "default_headers": {"X-Team": "team-0051-x", "Content-Type": "application/json"},
            "extra_headers": {"X-Team": "team-0052-y", "X-Title": "plain title 0053"},
            "extra_body": {"api_key": "body-KEY-0054", "top_k": 3},
            "temperature": 0.1,
        },
    )
    assert definition.spec().model_settings == {"temperature": 0.1}
    assert definition.client_options["extra_headers"] == {
        "X-Team": "team-0052-y",
        "Content-Type": "application/json",
        "X-Title": "plain title 0053",
    }
    assert definition.client_options["extra_body"] == {"api_key": "body-KEY-0054", "top_k": 3}
    assert _redact.clean("application/json plain title 0053") == (
        "application/json plain title 0053"
    )
    with pytest.raises(ValueError, match="default_headers must be a dict"):
        AgentDefinition(name="A", model="m", model_settings={"default_headers": "x"})


@pytest.mark.parametrize(
    "escaped",
    [
        '"sk-my\\/secret\\/key-42"',  # `/` escaped
        "sk\\u002dmy/secret/key\\u002D42",  # \u00xx, either case of hex
        "\\u0073\\u006b-my\\/secret/key-42",  # every kind mixed
        "SK-MY\\/SECRET\\/KEY-42",  # upper-cased: the key but for its case
        # escaped again: JSON text quoted in JSON (`\\\\/`) or in a repr, twice or more
        '"sk-my\\\\/secret\\\\/key-42"',
        "sk\\\\u002dmy\\\\\\\\/secret/key\\\\\\\\u002D42",
        repr(json.dumps({"k": "sk-my/secret/key-42"}).replace("/", "\\/")),
    ],
)
def test_a_secret_json_escaped_is_masked(escaped: str) -> None:
    assert "secret" not in redact(f"echo: {escaped}", ["sk-my/secret/key-42"])


@pytest.mark.parametrize(
    "escaped",
    [
        # HTML quoted in HTML or XML (an Atom feed's html content, a SOAP fault's XML as
        # text, a page showing a page's source): each reference's `&` escaped once more
        "sk&amp;#x2d;my&amp;#x2F;secret&amp;#47;key&amp;#x2d;42",
        "sk&amp;amp;#x2d;my&amp;amp;sol;secret&amp;amp;amp;#47;key-42",  # and again
        "sk&#38;#x2d;my&#x26;#x2f;secret&AMP;sol;key-42",  # the `&` as a reference of its own
        html.escape(html.escape("&#115;&#107;-my/secret/key-42")),
        # the `&` JSON-escaped: Go's `encoding/json` and .NET's System.Text.Json write every
        # `&` so, and a JSON answer holding HTML holds its references so
        "sk\\u0026#x2d;my\\u0026#x2F;secret\\u0026amp;sol;key\\u0026#45;42",
        repr("sk\\u0026#x2d;my\\u0026#47;secret/key-42"),  # and escaped again
    ],
)
def test_a_secret_in_html_references_escaped_again_is_masked(escaped: str) -> None:
    """Not a piece of it shows: a reply or a log line is masked of the key whole only."""
    shown = redact(f"<pre>echo: {escaped} &amp; more</pre>", ["sk-my/secret/key-42"])
    assert "secret" not in shown and "my" not in shown and "&amp; more" in shown, shown


def test_text_dense_in_plain_references_reads_as_before() -> None:
    """An `&` escaped again before no reference, or before one of no key's character, is
    left as it is written."""
    text = (
        "Tom &amp; Jerry &amp;amp; &#38; &amp;foo; &amp;lt;b&amp;gt; caf&amp;eacute; "
        '{"a": "Tom \\u0026 Jerry \\u0026amp; \\u0026lt;b\\u0026gt; \\\\u0026"}'
    )
    assert redact(text, ["sk-my/secret/key-42"]) == text


@pytest.mark.parametrize(
    "coloured",
    [
        "sk-my\x1b[01;31m\x1b[K/secret\x1b[m\x1b[K/key-42",  # grep --color=always's match
        "sk-my/\x1b[1m\x1b[31msecret\x1b(B\x1b[m/key-42",  # bold, red, then `tput sgr0`
        repr("sk-my/\x1b[32msecret\x1b[0m/key-42"),  # a repr's `\x1b`
        json.dumps("sk-my/\x1b[32msecret\x1b[0m/key-42"),  # JSON's `\u001b`
    ],
)
def test_a_secret_a_command_coloured_in_part_is_masked(coloured: str) -> None:
    """A terminal shows nothing of its control sequences: the key reads whole there."""
    masked = redact(f"found: {coloured} (1 match)", ["sk-my/secret/key-42"])
    assert "secret" not in masked and masked.startswith("found: ") and "(1 match)" in masked


def test_coloured_text_without_a_secret_is_left_as_it_is() -> None:
    text = "\x1b[01;31m\x1b[Ksk-my\x1b[m\x1b[K/secret/key-43 \x1b[32mPASSED\x1b[0m \\x1b[1m"
    assert redact(text, ["sk-my/secret/key-42"]) == text


@pytest.mark.parametrize(
    "text",
    [
        "sk-my\\/secret\\/key-43",  # another key, escaped
        "sk\\u002emy/secret/key-42",  # a character escaped that is not the key's
        "sk-my\\\\/secret\\\\/key-43",  # another key, escaped twice
    ],
)
def test_text_escaping_something_else_is_left_as_it_is(text: str) -> None:
    assert redact(text, ["sk-my/secret/key-42"]) == text


@pytest.mark.parametrize(
    "echoed",
    [
        "SK-MY/SECRET/KEY-42",  # upper-cased by a gateway's error
        "%73%6B%2d%6d%79%2F%73ecret%2fkey-42",  # every byte or some, hex of mixed case
        "Sk%2DmY%2fSeCrEt/KEY%2D42",  # both
    ],
)
def test_a_secret_in_another_case_or_percent_encoded_anyhow_is_masked(echoed: str) -> None:
    shown = redact(f"sent {echoed} here", ["sk-my/secret/key-42"])
    assert shown == "sent *** here", shown


def test_the_processs_own_keys_are_masked_in_an_input_from_its_start() -> None:
    """OPENAI_API_KEY and TEMPORAL_API_KEY of the environment are known before any agent or
    connection: a prompt (or a message's parts) pasting them is masked, keys kept."""
    script = (
        "from agentor_temporal.activities._redact import mask_input\n"
        "print(mask_input('o=sk-openai-0123456789 t=tmp-temporal-0123456789'))\n"
        "print(mask_input([{'role': 'user', 'content': [{'type': 'text',"
        " 'text': 'tmp-temporal-0123456789'}]}]))\n"
        "print(mask_input('k2=c2Vjb25kLWtleS0wMTIzNDU2Nzg5 at /tmp/agent.sock'))\n"
    )
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-openai-0123456789",
        "TEMPORAL_API_KEY": "tmp-temporal-0123456789",
        # each entry's key, and a variable whose name only holds a credential word: a path
        "AGENTOR_ENCRYPTION_KEYS": "k1:Zmlyc3Qta2V5LTAx,k2:c2Vjb25kLWtleS0wMTIzNDU2Nzg5",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
    }
    shown = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert shown == [
        "o=*** t=***",
        "[{'role': 'user', 'content': [{'type': 'text', 'text': '***'}]}]",
        "k2=*** at /tmp/agent.sock",
    ]


@pytest.mark.parametrize(
    "name, secret",
    [
        ("GITHUB_TOKEN", True),
        ("ANTHROPIC_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("AGENTOR_ENCRYPTION_KEYS", True),
        ("SYSTEM_ACCESSTOKEN", True),  # Azure Pipelines' job token
        ("NGROK_AUTHTOKEN", True),
        ("MINIO_SECRETKEY", True),
        ("AZURE_DEVOPS_EXT_PAT", True),
        ("NPM_CONFIG__AUTH", True),
        ("TEMPORAL_GRPC_META_AUTHORIZATION", True),
        ("SESSION_COOKIE", True),
        ("API_TOKENS", True),
        ("CLIENT_SECRETS", True),
        ("API_KEY_2", True),
        ("JWT_SECRET_OLD", True),
        ("STRIPE_SECRET_KEY_V2", True),
        ("SECRET_KEY_BASE", True),  # Rails'
        ("TF_TOKEN_app_terraform_io", True),  # Terraform's, per host
        ("MYSQL_PWD", True),  # MySQL's clients read the password there
        ("LDAP_BIND_PW", True),
        ("SSHPASS", True),  # sshpass -e
        ("CI_JOB_JWT_V2", True),  # GitLab's
        ("ORG_GRADLE_PROJECT_signingKey", True),  # Gradle's in-memory PGP key
        ("MASTERKEY", True),
        ("OLDPWD", False),
        ("MONKEY", False),
        ("MAX_TOKENS", False),
        ("AWS_ACCESS_KEY_ID", False),
        ("SSH_AUTH_SOCK", False),
        ("LD_LIBRARY_PATH", False),
        ("HOTKEY", False),
        ("PROXY_BYPASS", False),
        ("SUDO_ASKPASS", False),
        ("PASSWORD_STORE_DIR", False),
        ("KEYTIMEOUT", False),
        ("PWD", False),
    ],
)
def test_environment_variables_named_as_credentials(name: str, secret: bool) -> None:
    """The last word of a variable's name says whether its value is a credential."""
    assert _env_secrets.env_credential(name) is secret


def test_each_entry_of_a_credential_variables_list_is_one() -> None:
    """`API_TOKENS=<a>,<b>`: each token is masked alone too (a tool returns the one it uses),
    as each `id:key` entry of AGENTOR_ENCRYPTION_KEYS is."""
    assert _env_secrets.env_variable_secrets("API_TOKENS", "tok-One-0081, tok-Two-0082") == [
        "tok-One-0081, tok-Two-0082",
        "tok-One-0081",
        "tok-Two-0082",
    ]
    keys = "k1:S2V5LU9uZS0wMDgz,k0:S2V5LVR3by0wMDg0"
    assert _env_secrets.env_variable_secrets("AGENTOR_ENCRYPTION_KEYS", keys) == [
        keys,
        "k1:S2V5LU9uZS0wMDgz",
        "S2V5LU9uZS0wMDgz",
        "k0:S2V5LVR3by0wMDg0",
        "S2V5LVR3by0wMDg0",
    ]
    assert _env_secrets.env_variable_secrets("MAX_TOKENS", "100000") == []


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("s3cr3t-Pa55", True),
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", True),
        ("correcthorsebatterystaple", True),  # a long pass phrase
        ("postgres", False),  # masked everywhere, "connected to ***"
        ("changeme", False),
        ("/etc/gcp/service-account.json", False),  # where a credential is, not one
        ("~/.aws/credentials", False),
        ("abc", False),
    ],
)
def test_credential_variables_are_masked_unless_plain_words_or_paths(
    value: str, masked: bool
) -> None:
    """A short plain word or a path in a credential variable would garble every text it is in."""
    assert _env_secrets.env_secret(value) is masked


GIT_TOKEN = "ghp_R4nd0mT0kenVa1ue0123456789"
HOOK_KEY = "aB3dE5fG7hJ9kL1mN3pQ5rS7"


@pytest.mark.parametrize(
    ("value", "secrets"),
    [
        ("postgresql://app:Pa55w0rd-db-7781@db:5432/prod", ["Pa55w0rd-db-7781"]),
        ("postgresql://app:p%40ss-W0rd-9@db/prod", ["p%40ss-W0rd-9", "p@ss-W0rd-9"]),
        ("http://bob:changeme@proxy:3128", []),  # a plain word: every text would garble
        ("amqp://u:q1w2e3r4t5@mq-1,amqp://u:z9x8c7v6b5@mq-2", ["q1w2e3r4t5", "z9x8c7v6b5"]),
        (f"https://{GIT_TOKEN}@github.com/o/r.git", [GIT_TOKEN]),
        (f"https://hooks.example.com/services/T0A1/B0D4/{HOOK_KEY}", [HOOK_KEY]),
        ("https://search.example/v1?api-key=srch-K3y-0a1b2c&v=2024-06-01", ["srch-K3y-0a1b2c"]),
        ("https://otel.example:4318", []),
        ("/var/lib/postgresql", []),
    ],
)
def test_credentials_inside_a_variables_urls(value: str, secrets: list[str]) -> None:
    """A variable of any name holding a URL (DATABASE_URL, HTTPS_PROXY, a webhook): its
    password, a token as its username, its credential query values and key-shaped path
    segments are credentials; its user name, host and plain query values are not."""
    assert _env_secrets.env_url_secrets(value) == secrets


AZURE_KEY = "bGVha0FjY291bnRLZXktMDEyMzQ1Njc4OQ=="
PEM = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7leak", "AoIBAQC7VJTUt9Us8cKj"]
PEM_KEY = f"-----BEGIN PRIVATE KEY-----\n{PEM[0]}\n-----END PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("value", "secrets"),
    [
        (
            "DefaultEndpointsProtocol=https;AccountName=leakacct;"
            f"AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
            [AZURE_KEY],
        ),
        ("Server=db;Database=prod;User Id=sa;Password=Sql-Pa55-0042;", ["Sql-Pa55-0042"]),
        ("Driver={ODBC};Uid=sa;Pwd=Odbc-Pa55-0043", ["Odbc-Pa55-0043"]),
        ("host=db user=app password=Pg-Pa55-0044 dbname=prod", ["Pg-Pa55-0044"]),
        (
            "Endpoint=sb://bus/;SharedAccessKeyName=root;SharedAccessKey=Sb-K3y-0045=",
            ["Sb-K3y-0045="],
        ),
        (
            "BlobEndpoint=https://a.blob/;SharedAccessSignature=sv=2021-06-08&sig=S1g-0046%3D",
            ["S1g-0046%3D", "S1g-0046="],
        ),
        ("rs=0:di=01;34:ln=01;36", []),  # LS_COLORS
        ("service.name=api,deployment.environment=prod", []),
        ("-Djavax.net.ssl.trustStorePassword=changeit", []),  # a plain word
        # TEMPORAL_TLS_CLIENT_KEY_DATA: each line of the key, as written or joined by \\n
        (f"-----BEGIN PRIVATE KEY-----\n{PEM[0]}\n{PEM[1]}\n-----END PRIVATE KEY-----", PEM),
        (f"-----BEGIN EC PRIVATE KEY-----\\n{PEM[0]}\\n-----END EC PRIVATE KEY-----", PEM[:1]),
        ("-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUO0\n-----END CERTIFICATE-----", []),
        # an OpenPGP key as gpg --armor writes it: its body's lines, not its armor headers
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nComment: https://gnupg.org\n\n"
            f"{PEM[0]}\n=Hq2w\n-----END PGP PRIVATE KEY BLOCK-----",
            PEM[:1],
        ),
        # a command line's options, an .npmrc line, a YAML one, a quoted value
        ("-Xmx1g -Dspring.datasource.password=Java-Pa55-0061 -Dx=y", ["Java-Pa55-0061"]),
        ("--db-password=Cli-Pa55-0062 --verbose", ["Cli-Pa55-0062"]),
        ("//registry.npmjs.org/:_authToken=npm-T0ken-0063", ["npm-T0ken-0063"]),
        # npm's basic login: base64 of `user:password`, read as DOCKER_AUTH_CONFIG's `auth`
        (
            "//npm.corp.example/:_auth=Y2k6TnBtLUJhc2ljLVBhNTUtMDA4OA==",
            ["Y2k6TnBtLUJhc2ljLVBhNTUtMDA4OA==", "ci:Npm-Basic-Pa55-0088", "Npm-Basic-Pa55-0088"],
        ),
        ("host: db\npassword: Yaml-Pa55-0064\n", ["Yaml-Pa55-0064"]),
        ('Server=db;Password="Quoted;Pa55-0065";', ["Quoted;Pa55-0065"]),
        ("host=db password='Pg Pa55 0066' dbname=prod", ["Pg Pa55 0066"]),
        ("time: 12:30 key:value", []),
        # as a header's (OTEL_EXPORTER_OTLP_HEADERS'): the token after its scheme, decoded
        (
            "authorization=Bearer%20tok-Otlp-0067,x-team=t",
            ["Bearer%20tok-Otlp-0067", "Bearer tok-Otlp-0067", "tok-Otlp-0067"],
        ),
        (
            "Authorization=Basic dTpCYXNpYy1QYTU1LTAwNjg=",
            [
                "Basic dTpCYXNpYy1QYTU1LTAwNjg=",
                "dTpCYXNpYy1QYTU1LTAwNjg=",
                "u:Basic-Pa55-0068",
                "Basic-Pa55-0068",
            ],
        ),
        # settings whose names hold a credential word that is not their last: data
        ("credential.helper=manager-core", []),
        ("Server=db;Authentication=ActiveDirectoryPassword;TokenCacheStorePath=c:-cache", []),
        (
            "mongodb://u:Mongo-Pa55-01@h/db?authSource=admin&authMechanism=SCRAM-SHA-256",
            ["Mongo-Pa55-01"],
        ),
        # JSON credentials: DOCKER_AUTH_CONFIG's base64 login, a service account, AWS's
        (
            '{"auths": {"registry.example.com": {"auth": "dTpEb2NrZXItUGE1NS0wMDQ3"}}}',
            ["dTpEb2NrZXItUGE1NS0wMDQ3", "u:Docker-Pa55-0047", "Docker-Pa55-0047"],
        ),
        (
            json.dumps(
                {
                    "type": "service_account",
                    "private_key_id": "0123abcd",
                    "private_key": PEM_KEY,
                    "client_email": "bot@proj.iam.gserviceaccount.com",
                }
            ),
            [PEM[0], PEM_KEY],
        ),
        (
            '{"AccessKeyId": "ASIAIOSFODNN7EXAMPLE", "SecretAccessKey": "aws/Secret+0048",'
            ' "SessionToken": "IQoJb3JpZ2luX2VjE0049", "Expiration": "2026-12-03T20:00:00Z"}',
            ["aws/Secret+0048", "IQoJb3JpZ2luX2VjE0049"],
        ),
        (
            '{"clientId": "app", "clientSecret": "changeme", "note": "Password=Pa55-0050;"}',
            ["Pa55-0050"],
        ),
        # Docker's own token fields (`az acr login`), glued to the word before `token`
        (
            '{"auths": {"r.azurecr.io": {"identitytoken": "acr-Refresh-0081"}},'
            ' "x": {"registrytoken": "Reg-T0ken-0082", "maxtokens": "Not-A-Secret-0"}}',
            ["acr-Refresh-0081", "Reg-T0ken-0082"],
        ),
        # a kubeconfig's client key (base64 of its PEM), not its certificate
        (
            "users:\n- user:\n    client-certificate-data: LS0tQ2VydC0wMDgz\n"
            "    client-key-data: LS0tS2V5LURhdGEtMDA4NA==\n",
            ["LS0tS2V5LURhdGEtMDA4NA=="],
        ),
        # a .netrc (a CI's, kept in a variable): its password and account values
        (
            "# ci\nmachine api.heroku.com\n  login ci@example.com\n  password Netrc-Pa55-0085\n"
            "default login anon account Netrc-Acct-0086",
            ["Netrc-Pa55-0085", "Netrc-Acct-0086"],
        ),
        ("machine learning needs a password rotation-policy-0087", []),
    ],
)
def test_credentials_inside_a_variables_connection_string(value: str, secrets: list[str]) -> None:
    """A connection string in a variable of any name (AZURE_STORAGE_CONNECTION_STRING, an
    ADO.NET or libpq one), a command line's options (JAVA_TOOL_OPTIONS), an .npmrc, a YAML
    or a JSON document: the values of settings whose names end in a credential word."""
    assert _env_secrets.env_value_secrets(value) == secrets


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # httpcore's DEBUG line of a response's headers
        (
            "receive_response_headers.complete return_value=(b'HTTP/1.1', 200, b'OK',"
            " [(b'Set-Cookie', b'sid=hdr-Session-0051; Path=/'), (b'x-ratelimit-tokens', b'99')])",
            "receive_response_headers.complete return_value=(b'HTTP/1.1', 200, b'OK',"
            " [(b'Set-Cookie', b'***'), (b'x-ratelimit-tokens', b'99')])",
        ),
        (
            "Headers({'authorization': 'Token hdr-0052', 'x-api-key': 'hdr-0053', 'accept': 'a'})",
            "Headers({'authorization': 'Token ***', 'x-api-key': '***', 'accept': 'a'})",
        ),
        (
            "HTTP/1.1 403\nCookie: sid=hdr-0054\napi-key: hdr-0055\nx-request-id: req-0056",
            "HTTP/1.1 403\nCookie: ***\napi-key: ***\nx-request-id: req-0056",
        ),
        ("max_tokens: 100 (the token limit)", "max_tokens: 100 (the token limit)"),
    ],
)
def test_credential_header_values_are_masked_in_errors_and_logs(text: str, shown: str) -> None:
    """A credential header's value (Set-Cookie, Cookie, Authorization, x-api-key), quoted as a
    log line or an error does, is masked whatever it is; plain headers are kept."""
    assert redact(text) == shown


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THs"


@pytest.mark.parametrize(
    "secret",
    [
        JWT,
        "sk-proj-Abc0123456789defGHIjkl",
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
        "ghp_0123456789abcdefghijABCDEFGHIJ0123",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "xoxb-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA-0123456789abcdefghijklmnopqrstu",
        "sk_live_0123456789abcdefGHIJklmn",  # Stripe
        "rk_test_0123456789abcdefGHIJklmn",
        "hf_0123456789abcdefghijABCDEFGHIJklmn",  # Hugging Face
        "glpat-0123456789abcdefGHIJ",  # GitLab
        "npm_0123456789abcdefghijABCDEFGHIJ012345",
        "pypi-AgEIcHlwaS5vcmcCJDAxMjM0NTY3LTg5YWItY2RlZi0wMTIzLTQ1Njc4OWFiY2RlZgACKlsz",
        "SG.0123456789abcdefGHIJkl.0123456789abcdefGHIJklmnopqrstuvwxyzABCDEFG",  # SendGrid
        "gsk_0123456789abcdefghijABCDEFGHIJ0123456789abcd",  # Groq
        "r8_0123456789abcdefghijABCDEFGHIJ0123456",  # Replicate
        "tvly-dev-0123456789abcdefGHIJklmn",  # Tavily
        "ya29.a0AfH6SMB0123456789abcdefGHIJ",  # Google OAuth
        "xapp-1-A0123456789-0123456789-abcdef",  # Slack app
    ],
)
def test_keys_no_one_told_of_are_masked_in_errors_by_their_shape(secret: str) -> None:
    """A tool's or a provider's error quoting a credential the process was never given (the
    tool's own GitHub token, a JWT it was sent): masked by its shape, in errors and logs."""
    for text in (f"401 for {secret}: refused", f"Authorization: Bearer {secret}"):
        shown = redact(text)
        assert secret not in shown and "***" in shown, shown
    assert redact("Authorization: Bearer 0a1b2c3d4e5f6a7b") == "Authorization: Bearer ***"


@pytest.mark.parametrize("dash", ["\u2011", "\u2010", "\u2212"])
def test_keys_no_one_told_of_are_masked_by_their_shape_with_dashes_for_hyphens(dash: str) -> None:
    """A credential the process was never given, its hyphens written as dashes (the
    non-breaking hyphen GPT models write for `-`, a page's hyphen, a minus sign), is masked
    by its shape as a known key so written is; dashes elsewhere in the text stay."""
    for secret in ("sk-proj-Abc0123456789defGHIjkl", "xoxb-1234567890-abcdefghij"):
        written = secret.replace("-", dash)
        assert redact(f"401 for {written}: refused {dash} a{dash}b") == (
            f"401 for ***: refused {dash} a{dash}b"
        )
    assert redact(f"task{dash}sk{dash}ab and desk{dash}sketch") == (
        f"task{dash}sk{dash}ab and desk{dash}sketch"
    )


@pytest.mark.parametrize(
    "text",
    [
        "Basic authentication failed for user bob",
        "a Bearer token is required",
        "task-sk-ab and desk-sketch-0123 are names",
        "eyJ alone is not a JWT",
    ],
)
def test_words_near_key_shapes_stay(text: str) -> None:
    assert redact(text) == text


def test_a_non_ascii_secret_is_masked_with_any_of_its_characters_percent_encoded() -> None:
    """A secret's non-ASCII letters percent-encoded as UTF-8 one by one, the others as they
    are, upper-cased, or written as HTML references: each reads as the secret and is masked."""
    from agentor_temporal.workflows.redaction import mask_secret

    secret = "pässwörd-Ü123"
    for written in ["p%C3%A4sswörd-Ü123", "PÄSSW%c3%b6RD-ü123", "p&auml;ssw&#246;rd-&Uuml;123"]:
        assert mask_secret(f"[{written}]", secret) == "[***]", written


@pytest.mark.parametrize(
    ("text", "shown", "secrets"),
    [
        # a password holding what a URL parser stops at, written as it is (SQLAlchemy's
        # and libpq's URLs take it so): masked in error text, and known as a secret
        (
            "could not connect to postgresql://app:Zx8#1kQp0aLm3@db:5432/prod",
            "could not connect to postgresql://***@db:5432/prod",
            ["Zx8#1kQp0aLm3"],
        ),
        ("redis://:Zx8?1kQp0aLm3@cache:6379/0", "redis://***@cache:6379/0", ["Zx8?1kQp0aLm3"]),
        ("mysql://u:Zx8/1kQp0aLm3@[::1]/db", "mysql://***@[::1]/db", ["Zx8/1kQp0aLm3"]),
        ("mysql://u:Zx8]1kQp0aLm3@db/x.", "mysql://***@db/x.", ["Zx8]1kQp0aLm3"]),
        ("pg://u:p@ss#w0rd12@db/x", "pg://***@db/x", ["p@ss#w0rd12"]),
        # each URL of a list
        (
            "amqp://u:Ab#1cdefgh@h1,amqp://u:Ab#2cdefgh@h2",
            "amqp://***@h1,amqp://u:***@h2",
            ["Ab#1cdefgh", "Ab#2cdefgh"],
        ),
        # no userinfo: an `@` in a path or query after a port, or in a fragment
        ("https://h:8080/x?email=a@b.example", "https://h:8080/x?email=***", []),
        ("ssh://git@github.com/org/repo#readme", "ssh://***@github.com/org/repo#readme", []),
        ("see https://h/a#b and me@x.org", "see https://h/a#b and me@x.org", []),
    ],
)
def test_a_urls_raw_password(text: str, shown: str, secrets: list[str]) -> None:
    """A URL's password holding `#`, `?`, `/`, a bracket (or an `@` too), which `urlsplit`
    reads no userinfo in (or refuses): masked by its shape in error text, and a secret of
    the variable or endpoint whose URL it is."""
    assert redact(text) == shown
    assert _env_secrets.env_url_secrets(text) == secrets
    assert set(secrets) <= set(url_secrets(text.split()[-1]))


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "redirected to https://app.example/cb#access_token=Zx81kQp0aLm3&token_type=bearer",
            "redirected to https://app.example/cb#access_token=***&token_type=***",
        ),
        ("GET /cb#access_token=Zx81kQp0aLm3 302", "GET /cb#access_token=*** 302"),
        # a fragment that is no list of pairs, and a number, stay
        ("see https://docs.example/page#section-2, issue #42", None),
    ],
)
def test_a_token_in_a_urls_fragment(text: str, shown: str | None) -> None:
    """A fragment of `name=value` pairs (an OAuth implicit grant's redirect) is masked as a
    query is in error text, and its credential values are a variable's or endpoint's
    secrets."""
    assert redact(text) == (text if shown is None else shown)
    url = "https://app.example/cb#access_token=Zx81kQp0aLm3&state=xyz"
    assert url_secrets(url) == ["Zx81kQp0aLm3"]
    assert _env_secrets.env_url_secrets(url) == ["Zx81kQp0aLm3"]


@pytest.mark.parametrize("before", ["", "a", "ab"])
def test_a_secrets_utf16_base64_inside_a_longer_one_is_masked(
    monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    """PowerShell's `-EncodedCommand` (base64 of UTF-16LE) setting the key, at each of
    base64's alignments, and a UTF-16 file's base64 wrapped as a mail attaches it."""
    key = "sk-b64utf16-Q7wE2rT9yU4iO1pA"
    monkeypatch.setattr(_redact, "_known", set())
    _redact.remember(key)
    command = f"{before}$env:OPENAI_API_KEY='{key}'; python job.py".encode("utf-16-le")
    encoded = base64.b64encode(command).decode()
    masked = _redact.mask_secrets(f"pwsh -EncodedCommand {encoded}")
    assert "***" in masked and masked.startswith(f"pwsh -EncodedCommand {encoded[:20]}")
    attachment = base64.encodebytes(f"{before}\r\nApiKey={key}\r\n".encode("utf-16")).decode()
    assert "***" in _redact.mask_secrets(attachment)


@pytest.mark.parametrize("user", ["a", "ab", "abc"])
def test_a_secrets_base64_or_percent_encoding_base64d_again_is_masked(
    monkeypatch: pytest.MonkeyPatch, user: str
) -> None:
    """A Kubernetes secret holding a Docker config (its `auth` is base64 of `user:key`; the
    key at each of base64's alignments, the config at each of the outer's) or a URL holding
    the key percent-encoded: base64 again, a known form of neither."""
    key = "sk-b64again_Q7wE2rT9+yU4iO1/pA8s"
    monkeypatch.setattr(_redact, "_known", set())
    _redact.remember(key)
    auth = base64.b64encode(f"{user}:{key}".encode()).decode()
    for before in ("", "{", "{ "):
        config = f'{before}{{"auths": {{"registry.example": {{"auth": "{auth}"}}}}}}'
        data = base64.b64encode(config.encode()).decode()
        masked = _redact.mask_secrets(f".dockerconfigjson: {data}")
        assert "***" in masked and masked.startswith(f".dockerconfigjson: {data[:20]}")
    url = base64.b64encode(f"{user}https://h.example/?key={quote(key, safe='')}".encode())
    assert "***" in _redact.mask_secrets(f"url: {url.decode()}")
