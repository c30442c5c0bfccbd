"""Secrets never leak: URL credentials, query values and known keys are masked."""

from __future__ import annotations

import logging

import pytest

from agentor_temporal.activities import AgentDefinition, _redact
from agentor_temporal.workflows.redaction import redact, redact_url


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
