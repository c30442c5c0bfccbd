"""Text and JSON any encoder and parser accepts: lone surrogates, NaN, infinities."""

from __future__ import annotations

import json
import math

import pytest

from agentor_temporal.store import Event
from agentor_temporal.store.encoding import encodable, encodable_text, read_json, standard_json


def _strict_loads(text: str) -> object:
    """json.loads as a strict parser reads: no NaN/Infinity, no lone surrogate escapes."""

    def refuse(token: str) -> object:
        raise ValueError(f"non-standard token {token}")

    value = json.loads(text, parse_constant=refuse)

    def walk(v: object) -> None:
        if isinstance(v, str):
            v.encode("utf-8")  # a lone surrogate raises here
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return value


def test_lone_surrogates_become_replacement_characters_and_pairs_are_joined() -> None:
    assert encodable_text("file-\udcff.txt") == "file-\ufffd.txt"
    assert encodable_text("\ud83d\ude00") == "\U0001f600"  # a pair as two code points
    assert encodable_text("\ude00\ud83d") == "\ufffd\ufffd"
    assert encodable_text("plain") == "plain"
    assert encodable_text("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"


def test_encodable_walks_keys_values_and_numbers() -> None:
    value = {"k\udcff": ["\udcff", 1.5, math.nan, -math.inf, {"x": math.inf}], "n": 3}
    assert encodable(value) == {"k\ufffd": ["\ufffd", 1.5, None, None, {"x": None}], "n": 3}


@pytest.mark.parametrize(
    "event",
    [
        Event(type="tool_result", result="name: \udcff\udcfe", call_id="c"),
        Event(type="tool_call", name="t", args={"x": math.nan, "y": math.inf, "z": -math.inf}),
        Event(type="generation", messages=[{"role": "user", "content": "\ud800"}]),
        Event(type="message", text="emoji \U0001f600 and \ud83d\ude00"),
    ],
)
def test_every_jsonl_line_is_standard_json(event: Event) -> None:
    """`Event.to_json` writes what strict parsers (and Agentor's FileStore) accept."""
    line = event.to_json()
    assert "NaN" not in line and "Infinity" not in line
    data = _strict_loads(line)
    assert isinstance(data, dict) and Event.from_dict(data).type == event.type


def test_standard_json_keeps_ordinary_values_exactly() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": "caf\u00e9"}
    assert json.loads(standard_json(value)) == value
    assert standard_json(value) == json.dumps(value)


def test_read_json_reads_an_integer_past_pythons_limit_as_its_text() -> None:
    """Standard JSON json.loads refuses (5000 digits) is read, that integer as its text."""
    digits = "9" * 5000
    with pytest.raises(ValueError, match="4300 digits"):
        json.loads(f'{{"n": {digits}}}')
    assert read_json(f'{{"n": -{digits}, "m": [12, -3]}}'.encode()) == {
        "n": f"-{digits}",
        "m": [12, -3],
    }
    assert read_json("4300" + "0" * 4296) == 4300 * 10**4296  # at the limit: still an int


def test_an_activitys_failure_is_made_encodable_keeping_what_temporal_reads() -> None:
    """A failure holding a lone surrogate encodes (type, retry decision and cause kept)."""
    import asyncio
    from datetime import timedelta

    from temporalio.api.failure.v1 import Failure
    from temporalio.converter import DataConverter
    from temporalio.exceptions import ApplicationError

    from agentor_temporal.activities._errors import encodable_error

    def encoded(exc: BaseException) -> Failure:
        failure = Failure()
        asyncio.run(DataConverter.default.encode_failure(exc, failure))
        return failure

    cause = OSError("no file 'report-\udcff.txt'")
    refused = ApplicationError(
        "bad \ud800 request",
        type="ModelRequestError",
        non_retryable=True,
        next_retry_delay=timedelta(seconds=3),
    )
    refused.__cause__ = cause
    with pytest.raises(UnicodeEncodeError):
        encoded(refused)  # what the SDK met: it sent 'Failed building exception result'
    failure = encoded(encodable_error(refused))
    assert failure.message == "bad \ufffd request"
    info = failure.application_failure_info
    assert (info.type, info.non_retryable, info.next_retry_delay.seconds) == (
        "ModelRequestError",
        True,
        3,
    )
    assert failure.cause.message == "no file 'report-\ufffd.txt'"
    assert failure.cause.application_failure_info.type == "OSError"
    # any other exception is what the SDK would make of it; an encodable one is itself
    other = encoded(encodable_error(RuntimeError("k\ud800")))
    assert (other.message, other.application_failure_info.type) == ("k\ufffd", "RuntimeError")
    fine = ApplicationError("fine", type="X")
    assert encodable_error(fine) is fine
