"""Secrets never leak: URL credentials, query values and known keys are masked."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

import agentor_temporal
from agentor_temporal.activities import AgentDefinition, _redact
from agentor_temporal.telemetry import CORE_LOGGER
from agentor_temporal.workflows.redaction import RedactingFilter, redact, redact_url


@pytest.mark.parametrize(
    "text, leaked",
    [
        ("unreachable at http://user:password@host:8000/v1/chat: boom", ["user", "password"]),
        ("at https://h/v1?api-key=S3CRETKEY&x=1.", ["S3CRETKEY"]),
        ("see http://tok@h/v1?a=b#frag)", ["tok@", "=b#"]),
        ("two: http://a:b1@h1/x and ftp://c:d2@h2/y?k=v", ["a:b1", "c:d2", "k=v"]),
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


def _package_loggers() -> set[str]:
    """Every logger name this package's source asks for (`getLogger(...)`)."""
    root = Path(agentor_temporal.__file__).resolve().parent
    names = set()
    for directory, _, files in os.walk(root, followlinks=True):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = Path(directory) / file
            module = ".".join(
                ("agentor_temporal", *path.relative_to(root).with_suffix("").parts)
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


@pytest.mark.parametrize(
    "name", ["agentor_temporal.serve", "agentor_temporal.codec_server", CORE_LOGGER]
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
