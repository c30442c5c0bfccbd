"""Wrapped base64's line breaks are looked for once a text, not once a known key's form."""

from __future__ import annotations

import secrets

import pytest

from agentor_temporal.activities import _redact
from agentor_temporal.workflows import wrapped


def test_a_long_texts_line_breaks_are_looked_at_once_for_every_known_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each known key has several forms; each form looked for line breaks in the whole text,
    so a huge tool failure (5 MB, a suite worker knowing 60 keys) took seconds a mask, done
    several times a call: the test of such a failure passed its minute."""
    for _ in range(20):
        _redact.remember("sk-" + secrets.token_urlsafe(24))
    looked = 0
    real = wrapped._spans

    def counted(text: str) -> list[str]:
        nonlocal looked
        looked += 1
        return real(text)

    monkeypatch.setattr(wrapped, "_spans", counted)
    wrapped._unwrapped.cache_clear()
    text = "Traceback\n" + "x" * 100_000 + " the end\nmore"
    assert _redact.mask_secrets(text) == text
    assert looked == 1


def test_wrapped_base64_is_told_from_a_log() -> None:
    wrapped._unwrapped.cache_clear()
    assert wrapped._unwrapped("QUJDREVGR0hJSktMTU5PUFFS\nU1RVVldYWVo=") == (
        "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
    )
    assert wrapped._unwrapped('{"f": "QUJDREVGR0hJSktMTU5PUFFS\\r\\nU1RV"}') is not None
    assert wrapped._unwrapped("Traceback (most recent call last):\n  File x") is None


def test_a_soft_line_breaks_key_is_masked_whole_and_an_equals_at_a_lines_end_kept() -> None:
    """A key a quoted-printable soft line break (`=` ending a line) cuts is masked whole, as
    it is or JSON-escaped, however few of its characters are on one side; a value ending in
    `=` at a line's end, and `=` ending lines of other text, are left as they are."""
    key = "sk-soft-" + secrets.token_hex(16)
    _redact.remember(key)
    for cut in (1, 6, 20, len(key) - 1):
        for brk in ("=\n", "=\r\n", "=\\n", "=\\r\\n"):
            text = f"your key: {key[:cut]}{brk}{key[cut:]} (keep it safe)"
            assert _redact.mask_secrets(text) == "your key: *** (keep it safe)", (cut, brk)
    padded = "c2VjcmV0LXBhZGRlZC12YWx1ZQ=="
    _redact.remember(padded)
    assert _redact.mask_secrets(f"TOKEN={padded}\nNEXT=1\n") == "TOKEN=***\nNEXT=1\n"
    plain = "x =\n  5\nwidth=\nheight=3\n"
    assert _redact.mask_secrets(plain) == plain


def test_a_jwt_written_over_lines_is_masked_whole() -> None:
    """A known JWT cut by line breaks anywhere, beside its dots too, as it is or
    JSON-escaped, is masked whole; dotted text over lines that holds no key stays."""
    parts = (secrets.token_urlsafe(18) for _ in range(3))
    jwt = "eyJ" + ".eyJ".join(parts)
    _redact.remember(jwt)
    for cut in (5, jwt.index(".") - 1, jwt.index("."), jwt.index(".") + 1, len(jwt) - 4):
        for brk in ("\n", "\r\n", "\\n"):
            text = f"token:\n{jwt[:cut]}{brk}{jwt[cut:]}\nend"
            assert _redact.mask_secrets(text) == "token:\n***\nend", (cut, brk)
    plain = "see docs.example.com/v1.2.3.4\nand.www.example.org/page\n"
    assert _redact.mask_secrets(plain) == plain


def test_a_keys_equals_written_as_quoted_printable_writes_it_is_masked() -> None:
    """Quoted-printable writes each `=` of a mail's text `=3D`: a base64 key's padding so
    written is the key's, whether a soft line break cuts it (anywhere) or not."""
    key = "c2VjcmV0LXN0b3JhZ2Uta2V5LWZvci1tYWls" + secrets.token_hex(8) + "=="
    _redact.remember(key)
    written = key.replace("=", "=3D")
    assert _redact.mask_secrets(f"AccountKey=3D{written};Suffix=3Dx") == (
        "AccountKey=3D***;Suffix=3Dx"
    )
    # quoted-printable never cuts inside an escape (RFC 2045: `=3` and `D` stay together)
    escapes = [i for i in range(len(written)) if written.startswith("=3D", i)]
    cuts = [c for c in range(1, len(written)) if not any(e < c < e + 3 for e in escapes)]
    for cut in cuts:
        for brk in ("=\n", "=\r\n", "=\\n"):
            text = f"AccountKey=3D{written[:cut]}{brk}{written[cut:]};Suffix=3Dx"
            assert _redact.mask_secrets(text) == "AccountKey=3D***;Suffix=3Dx", (cut, brk)
    plain = "width=3D5 and x=3D=\n=3Dy"
    assert _redact.mask_secrets(plain) == plain


def test_a_key_cut_where_its_line_was_wrapped_is_masked_whole() -> None:
    """A key cut by a line break (at its hyphen or anywhere), the indentation after it, a
    shell's `\\` line continuation, as they are or JSON-escaped, or split between string
    literals is masked whole (a log line and a model's reply are masked so, not by pieces);
    ordinary text wrapped, indented or concatenated so stays as it is."""
    key = "sk-wrap-" + secrets.token_urlsafe(30)
    _redact.remember(key)
    breaks = ("\n", "\r\n", "\n    ", "\\n", "\\n  ", "\\\n  ", "\\\\\\n")
    literals = ('" + "', "' + '", '"\n       "', '" +\n    "', "' . '", "' || '", "''", '""')
    for cut in (3, 8, 20, len(key) - 1):
        for brk in breaks:
            text = f"key: {key[:cut]}{brk}{key[cut:]} (keep it safe)"
            assert _redact.mask_secrets(text) == "key: *** (keep it safe)", (cut, brk)
        for lit in literals:
            text = f'k = "{key[:cut]}{lit}{key[cut:]}" # keep'
            assert _redact.mask_secrets(text) == 'k = "***" # keep', (cut, lit)
    plain = (
        "Error code: 401 - Incorrect API key provided: sk-proj-\n    abc. See\n"
        '  https://platform.openai.com/account/api-\nkeys.\nx = "sk-" + "live"\n'
        "export A=b\\\n  c\nTraceback (most recent call last):\n  File x\n"
    )
    assert _redact.mask_secrets(plain) == plain
