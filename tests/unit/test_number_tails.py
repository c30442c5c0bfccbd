"""A streamed reply's end that may be a known key's bytes written as numbers is held back
(`activities._number_tails`): each layout `byte_lists` and `hex_dumps` mask, streamed in
pieces of any size, comes out as the reply masked whole does."""

from __future__ import annotations

import time

import pytest

from agentor_temporal.activities import _redact
from agentor_temporal.workflows.redaction import secret_forms

from helpers import masked_stream

KEY = "sk-streamed-key-0123456789abcdef"
SETTINGS = f"DEBUG=1\nOPENAI_API_KEY={KEY}\nREGION=eu\n".encode()


def _xxd(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        groups = " ".join(row[i : i + 2].hex() for i in range(0, len(row), 2))
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}: {groups:<39}  {shown}")
    return "\n".join(lines) + "\n"


LAYOUTS = {
    "java": f"bytes: {list(SETTINGS)} sent",
    "go": "bytes: " + str(list(SETTINGS)).replace(",", "") + " sent",
    "node": '{"type":"Buffer","data":' + str(list(SETTINGS)).replace(" ", "") + "}",
    "bitconverter": "Frame: " + "-".join(f"{b:02X}" for b in SETTINGS) + ".",
    "xxd-i": "{" + ", ".join(f"0x{b:02x}" for b in SETTINGS) + "};",
    "hex-spaced": "hex: " + SETTINGS.hex(" ") + " end",
    "xxd": "The file:\n" + _xxd(SETTINGS) + "That is all.",
    "xxd-json": ("The file:\\n" + _xxd(SETTINGS).replace("\n", "\\n") + "That is all."),
}


@pytest.mark.parametrize("size", [1, 3, 7, 16])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_key_streamed_as_numbers_comes_out_masked(
    monkeypatch: pytest.MonkeyPatch, layout: str, size: int
) -> None:
    monkeypatch.setattr(_redact, "secrets", lambda: secret_forms(KEY))
    text = LAYOUTS[layout]
    whole = _redact.mask_secrets(text)
    assert "***" in whole or "**" in whole, whole
    sent, _ = masked_stream([text[i : i + size] for i in range(0, len(text), size)])
    assert "".join(sent) == whole


def test_prose_with_numbers_is_not_held_past_its_next_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_redact, "secrets", lambda: secret_forms(KEY))
    sent, _ = masked_stream(["It costs ", "12 ", "dollars ", "and ", "3 cents."])
    assert sent == ["It costs ", "12 dollars ", "and ", "3 cents."]


def test_a_long_run_of_numbers_is_held_a_bounded_stretch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reply streaming 200 kB of numbers a number a delta holds back a bounded end, and
    the key inside them is masked."""
    monkeypatch.setattr(_redact, "secrets", lambda: secret_forms(KEY))
    data = bytes(range(256)) * 60 + SETTINGS + bytes(range(256)) * 60
    text = str(list(data))
    pieces = [p + "," for p in text.split(",")]
    began = time.process_time()
    sent, most = masked_stream(pieces)
    assert time.process_time() - began < 20  # ~0.5 s; read once a number: minutes
    assert most < 20_000
    assert "".join(sent).rstrip(",") == _redact.mask_secrets(text)
    assert "***" in "".join(sent)
