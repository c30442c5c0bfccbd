"""`key_pieces`: a known key's piece at a word's edge in a tool's result is masked."""

from __future__ import annotations

import json

from agentor_temporal.workflows.redaction import mask_all

KEY = "sk-proj-Zq81fJ2xVb7Kc0LmN4pRt6Yw9AeHs3Ud5GiOxW7k"


def test_a_keys_pieces_at_a_words_edge_are_masked_in_any_wrapping() -> None:
    env = f"HOME=/root\nOPENAI_API_KEY={KEY}\nDEBUG=1\n"
    chunks = [env[at : at + 20] for at in range(0, len(env), 20)]
    assert [mask_all(c, [KEY], pieces=True) for c in chunks] == [
        "HOME=/root\nOPENAI_AP",
        "I_KEY=***",
        "***",
        "***\nDEBUG",
        "=1\n",
    ]
    wrapped = json.dumps({"content": chunks[1], "next": 40})
    assert mask_all(wrapped, [KEY], pieces=True) == '{"content": "I_KEY=***", "next": 40}'
    # in any spelling the whole key is masked in: percent-encoded, upper case
    assert mask_all("KEY=" + KEY[:20].upper(), [KEY], pieces=True) == "KEY=***"
    assert mask_all("%73%6B-proj-Zq81fJ2x", [KEY], pieces=True) == "***"


def test_short_pieces_short_secrets_and_ordinary_text_are_left_as_they_are() -> None:
    # shorter than a piece (12): what is left at a cut
    assert mask_all(f"a {KEY[:11]} and {KEY[-11:]}", [KEY], pieces=True) == (
        f"a {KEY[:11]} and {KEY[-11:]}"
    )
    # inside a longer word, not at its edge
    inside = f"x{KEY[5:25]}y"
    assert mask_all(inside, [KEY], pieces=True) == inside
    # a secret shorter than MIN_PIECE_FORM is masked whole only
    assert mask_all("postgres: postgresql://h/db", ["postgres12345"], pieces=True) == (
        "postgres: postgresql://h/db"
    )
    text = "a sentence with longwordsinside, identifiers_like_this and sk-proj-docs"
    assert mask_all(text, [KEY], pieces=True) == text
    # not asked for pieces (a streamed reply): only the whole key
    assert mask_all(KEY[:20], [KEY]) == KEY[:20]
