"""`_json_pieces.dumps` writes what `json.dumps` writes, a piece at a time."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agentor_temporal.activities._json_pieces import dumps
from agentor_temporal.activities._tool_schema import stringify


class Opaque:
    def __str__(self) -> str:
        return "opaque"


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        [{"id": 1, "name": "é", "score": 1.5, "ok": True, "none": None}] * 3,
        {1: "a", 2.5: "b", False: "c", None: "d", "k": [1, (2, 3)]},
        [math.nan, math.inf, -math.inf, 1e-300, 10**50],
        {"when": Opaque(), "rows": [Opaque(), "\u2028", "\ud800"]},
        _nested(900),  # deeper than the Python path reaches: written by C instead
        [],
        {},
    ],
    ids=["rows", "keys", "numbers", "default", "deep", "empty-list", "empty-dict"],
)
def test_the_same_text_as_json_dumps(value: Any) -> None:
    assert dumps(value, str) == json.dumps(value, default=str)


def test_a_tools_rows_and_long_integers_read_as_before() -> None:
    """stringify's paths through it: plain rows, and integers past the int-to-text limit."""
    assert stringify([{"a": 1}] * 2) == '[{"a": 1}, {"a": 1}]'
    text = stringify({"n": 10**5000})
    assert text.startswith('{"n": 1000') and text.endswith("000}") and len(text) == 6 + 5001 + 1
