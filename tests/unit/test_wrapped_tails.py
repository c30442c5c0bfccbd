"""A streamed reply's deltas hold back a known key's beginning cut by a line break.

`sk-proj-` ending a line, a wrapped line going on indented, a shell's `\\` continuation, a key
split between string literals: the reply recorded is masked whole (`wrapped`), but each delta
went out as it came, the end `sk-proj-\\n` holding no spelling of a key, and the rest of the
key after it.
"""

from __future__ import annotations

import textwrap

import pytest

from agentor_temporal.activities import _redact
from agentor_temporal.workflows.redaction import secret_forms
from agentor_temporal.workflows.wrapped import wrapped_begun

from helpers import masked_stream

KEY = "sk-proj-T4wE2rT9yU4iO1pA8Zk4Mx8NcLm3Vb6Xs0Dh5Fj2Gk7Pq1"

WRITTEN = {
    "hyphen": f"Your key is sk-proj-\n{KEY[8:]}.",
    "hyphen-json": f'{{"text": "Your key is sk-proj-\\n{KEY[8:]}."}}',
    "indented": textwrap.fill(
        f"Incorrect API key provided: {KEY}. Check it.", 30, subsequent_indent="    "
    ),
    "shell": f"export OPENAI_API_KEY={KEY[:30]}\\\n    {KEY[30:]}",
    "literals": f'key = ("{KEY[:8]}" +\n       "{KEY[8:40]}"\n       "{KEY[40:]}")',
    "crlf": f"key:\r\n{KEY[:20]}\r\n{KEY[20:]}\r\n",
}


@pytest.mark.parametrize("size", [1, 2, 5, 9])
@pytest.mark.parametrize("spelling", sorted(WRITTEN))
def test_a_key_cut_by_a_line_break_streams_masked(
    monkeypatch: pytest.MonkeyPatch, spelling: str, size: int
) -> None:
    monkeypatch.setattr(_redact, "secrets", lambda: secret_forms(KEY))
    text = WRITTEN[spelling]
    whole = _redact.mask_secrets(text)
    assert "***" in whole and KEY[10:26] not in whole, whole
    sent, _ = masked_stream([text[i : i + size] for i in range(0, len(text), size)])
    assert "".join(sent) == whole


def test_prose_with_line_breaks_is_held_a_bounded_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines of base64 and words, a character a delta: what is held never grows past a key
    and a break's room, and every line goes out."""
    monkeypatch.setattr(_redact, "secrets", lambda: secret_forms(KEY))
    text = ("sk-proj-abc\nQWxhZGRpbjpvcGVuIHNlc2FtZQ==\n" * 200) + "end"
    sent, most = masked_stream(list(text))
    assert "".join(sent) == text
    assert most < 64


def test_the_end_read_is_bounded() -> None:
    """A key's beginning followed by a break is found at a text's end, not before a window."""
    forms = (KEY,)
    assert wrapped_begun("x " * 10_000 + "sk-proj-\n", forms) == len("sk-proj-\n")
    assert wrapped_begun("sk-proj-\n" + "x" * 10_000, forms) == 0
    assert wrapped_begun("plain text\n", forms) == 0
