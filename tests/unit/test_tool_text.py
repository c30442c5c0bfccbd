"""A tool's return value reads as the same text here as under Agentor 0.1.1.

The text is what the model reads and the `tool_result`'s `result` in the
JSONL. A value JSON cannot hold (a `date`, a dataclass, a set, a `Decimal`,
bytes) was written as a JSON string of its `str()`, quotes and escapes the
model never saw under Agentor (`"2026-01-01"` for `2026-01-01`), and a pydantic
model as pydantic's own JSON (`{"city":"Oslo","when":"2026-01-01T09:00:00"}`
for Agentor's `{"city": "Oslo", "when": "2026-01-01 09:00:00"}`): an Agentor
user's tools answered their model differently once moved here.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from pathlib import PurePosixPath
from typing import Any

import pydantic
import pytest

from agentor_temporal.activities._tool_schema import stringify

import agentor_ref


@dataclasses.dataclass
class Forecast:
    city: str
    high: int


class Reading(pydantic.BaseModel):
    city: str
    when: datetime.datetime
    rain: decimal.Decimal


class Handle:
    def __str__(self) -> str:
        return "handle #7"


class Holder(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    handle: Handle
    count: int


class Colour(enum.Enum):
    RED = "red"


#: a return value and the text Agentor 0.1.1 gives the model for it
CASES: list[tuple[Any, str]] = [
    (Forecast("Oslo", 4), "Forecast(city='Oslo', high=4)"),
    (
        Reading(city="Oslo", when=datetime.datetime(2026, 1, 1, 9), rain=decimal.Decimal("0.5")),
        '{"city": "Oslo", "when": "2026-01-01 09:00:00", "rain": "0.5"}',
    ),
    (Holder(handle=Handle(), count=3), '{"handle": "handle #7", "count": 3}'),
    (datetime.date(2026, 1, 1), "2026-01-01"),
    (decimal.Decimal("1.50"), "1.50"),
    ({3}, "{3}"),
    (Colour.RED, "Colour.RED"),
    (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
    (PurePosixPath("/srv/data"), "/srv/data"),
    (b"\x00raw", "b'\\x00raw'"),
    (complex(1, 2), "(1+2j)"),
    (range(2), "range(0, 2)"),
    # JSON values: as json.dumps writes them (a str() nested in them as a JSON string)
    ({"when": datetime.date(2026, 1, 1), "rows": (1, 2)}, '{"when": "2026-01-01", "rows": [1, 2]}'),
    ([Forecast("Oslo", 4)], "[\"Forecast(city='Oslo', high=4)\"]"),
    ({"a": math.nan}, '{"a": NaN}'),
    (1.5, "1.5"),
    (True, "true"),
    (7, "7"),
    (None, ""),
    ("as is", "as is"),
]


@pytest.mark.parametrize(("value", "text"), CASES, ids=[type(v).__name__ for v, _ in CASES])
def test_a_return_value_reads_as_agentor_writes_it(value: Any, text: str) -> None:
    assert stringify(value) == text


def test_the_texts_are_agentors_own() -> None:
    """The table above is what Agentor 0.1.1's own `stringify` writes."""
    theirs = agentor_ref.tools()
    if theirs is None:
        pytest.skip("Agentor 0.1.1's wheel is not in .cache/wheels (scripts/test downloads it)")
    for value, text in CASES:
        assert theirs.stringify(value) == text, value
