"""A known key written as its bytes' numbers is masked: Go's `[]byte`, Java's
`Arrays.toString`, Node's Buffer JSON, `xxd -i`, .NET's `BitConverter.ToString`."""

from __future__ import annotations

import json
import random

import pytest

from agentor_temporal.workflows.byte_lists import mask_listed
from agentor_temporal.workflows.redaction import mask_all, secret_forms

KEY = "sk-bytes_Q7wE2rT9yU4iO1pA8sDf3Gh6"
DATA = f"OPENAI_API_KEY={KEY}\n".encode()


def _xxd_i(data: bytes) -> str:
    items = ",".join(("\n  " if i % 12 == 0 else " ") + f"0x{b:02x}" for i, b in enumerate(data))
    return f"unsigned char env[] = {{{items}\n}};\nunsigned int env_len = {len(data)};\n"


LAYOUTS = {
    "go": str(list(DATA)).replace(",", ""),
    "java": str(list(DATA)),
    "node": json.dumps({"type": "Buffer", "data": list(DATA)}, separators=(",", ":")),
    "node-indented-in-json": json.dumps({"body": json.dumps({"data": list(DATA)}, indent=2)}),
    "xxd-i": _xxd_i(DATA),
    "bitconverter": "-".join(f"{b:02X}" for b in DATA),
    "utf16": str(list(f"key={KEY}".encode("utf-16-le"))),
    "upper-cased": str(list(KEY.upper().encode())),
}


def _spelled(text: str) -> bytes:
    """The bytes a text's numbers spell, NULs dropped and letters folded."""
    import re

    dashed = re.findall(r"[0-9A-F]{2}(?=-|$)", text) if "-" in text else []
    if len(dashed) > 6:
        return bytes(int(d, 16) for d in dashed).lower()
    numbers = re.findall(r"0x[0-9a-f]{2}|\b\d{1,3}\b", text)
    values = [int(n, 16) if n.startswith("0x") else int(n) for n in numbers]
    return bytes(v for v in values if 0 < v < 256).lower()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_key_in_its_bytes_numbers_is_masked(layout: str) -> None:
    text = LAYOUTS[layout]
    assert KEY.lower().encode() in _spelled(text)
    shown = mask_all(text, secret_forms(KEY))
    assert "***" in shown and KEY.lower().encode() not in _spelled(shown)
    # the numbers around it kept: only the key's are masked
    assert shown.count("***") == 1
    if layout != "upper-cased":  # all key
        assert shown[:12] == text[:12] and b"=" in _spelled(shown)


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2, 3, 4, 5, 6, 7, 8]",
        "2024-06-01-12-30-45",
        "550e8400-e29b-41d4-a716-446655440000",
        "version 1.2.3.4.5.6.7 on 10.0.0.1",
        "took 12 34 56 78 90 12 ms",
        str(list(b"no key in these bytes at all")),
        "[256, 300, 999, 1000, 4096, 65535]",
    ],
)
def test_numbers_spelling_no_key_are_kept(text: str) -> None:
    assert mask_all(text, secret_forms(KEY)) == text


def test_a_key_cut_by_the_search_window_of_a_long_array_is_masked() -> None:
    """A JSON array of many numbers is read a window at a time; the key masked wherever
    a window's end falls in it."""
    rng = random.Random(3)
    filler = [rng.randrange(32, 127) for _ in range(40_000)]
    for insert in range(15_900, 16_400, 13):  # around the first window's end (65,536)
        data = filler[:insert] + list(KEY.encode()) + filler[insert:]
        shown = mask_listed(json.dumps(data), [KEY], "***")
        numbers = json.loads(shown.replace("***", "-1"))
        assert KEY.encode() not in bytes(n for n in numbers if n >= 0), insert
