"""Text and JSON that every encoder and parser accepts.

Python strings may hold lone surrogates (a file name decoded with
`surrogateescape`, a byte string read as UTF-16 halves): `json.dumps` writes
them as `\\udcff` escapes that strict parsers refuse, and encoding them as
UTF-8 (an HTTP request body) raises `UnicodeEncodeError`. `float('nan')` and
infinities become the non-standard tokens `NaN` / `Infinity`. Text crossing a
boundary (into a model request, into a log line) goes through `encodable`, and
JSON this project writes through `standard_json`: lone surrogates become
U+FFFD (a valid surrogate pair is joined into its character), and non-finite
numbers become `null`, as JavaScript's `JSON.stringify` writes them. JSON
read from outside (a model's reply, a log line) goes through `read_json`: an
integer longer than Python reads is its text, not a refused document.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

#: A `\\uD800`-`\\uDFFF` escape in `json.dumps` output (ensure_ascii): the
#: cheap test for whether a value needs the slow, exact walk.
_SURROGATE_ESCAPE = re.compile(r"\\ud[89a-f][0-9a-f]{2}")


def encodable_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD (pairs joined); encodable as UTF-8."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 round trip: a high+low pair becomes its character, a lone
        # half becomes the replacement character
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def encodable(value: Any) -> Any:
    """`value` with every string (keys too) made encodable and non-finite floats as None."""
    if isinstance(value, str):
        return encodable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {
            (encodable_text(k) if isinstance(k, str) else k): encodable(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [encodable(v) for v in value]
    return value


def standard_json(value: Any, **options: Any) -> str:
    """`json.dumps(value)` as standard JSON: no NaN/Infinity, no lone-surrogate escapes.

    Args:
        value: any JSON-serialisable value (`default=str` covers the rest).
        **options: passed to `json.dumps` (e.g. `indent`).
    """
    options.setdefault("default", str)
    try:
        text = json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a non-finite float somewhere
        return json.dumps(encodable(value), allow_nan=False, **options)
    if _SURROGATE_ESCAPE.search(text) is None:
        return text
    # surrogate escapes: maybe only pairs (an emoji is one), maybe a lone half
    return json.dumps(encodable(value), allow_nan=False, **options)


def standard_value(value: Any) -> Any:
    """`value` as `standard_json` would write it, as a value: itself when it is already so.

    For what goes to Temporal's JSON converter, which writes `NaN` and
    `Infinity` as it finds them: a run's input replayed from a log that holds
    them (Agentor's `json.dumps` writes them) went into history so, which no
    other SDK, the UI or the temporal CLI decodes.
    """
    try:
        json.dumps(value, allow_nan=False, default=str)
    except ValueError:  # a non-finite float somewhere
        return encodable(value)
    except (TypeError, RecursionError):
        return value  # not this function's to judge: the converter says what it is
    return value


def nesting(value: Any) -> int:
    """How deeply `value` nests lists and dicts (0 for a scalar), without recursing.

    Deep values are the ones this measures: walking them recursively (a copy,
    an encoder) is what fails on Python's recursion limit.

    Raises:
        ValueError: when a list or dict contains itself (a Python value, never
            one decoded from JSON): measured, it nests without end, and the
            walk never finished.
    """
    deepest, stack = 0, [(value, 1, False)]
    inside: set[int] = set()  # the containers on the way down to the item
    while stack:
        item, depth, leaving = stack.pop()
        if leaving:
            inside.discard(id(item))
            continue
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if id(item) in inside:
            raise ValueError(f"a {type(item).__name__} in it contains itself")
        inside.add(id(item))
        deepest = max(deepest, depth)
        stack.append((item, depth, True))
        stack.extend((child, depth + 1, False) for child in children)
    return deepest


def _integer(text: str) -> int | str:
    """`text` as an int, or as it is when Python refuses to read that many digits."""
    limit = sys.get_int_max_str_digits()
    if limit and len(text) - (text[0] == "-") > limit:
        return text
    return int(text)


def read_json(data: str | bytes) -> Any:
    """`json.loads(data)`, an integer past Python's int-text limit read as its text.

    JSON puts no bound on an integer's length, but Python refuses one past
    `sys.get_int_max_str_digits()` (4300 digits) and raises ValueError for the
    whole document: a model's paid reply was thrown away for an unread field,
    a log's event skipped (a generation: resume asked that turn again). Read
    as its text, it is JSON-safe wherever it goes, and a field read as a number
    takes it for no number (a token count reads 0).
    """
    return json.loads(data, parse_int=_integer)
