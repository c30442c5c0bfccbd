"""Sizes as Temporal counts them, and cutting text to fit.

Temporal refuses any payload over 2 MB (the SDK checks before sending), and a
workflow task that would record one fails and is retried forever: the run
wedges. The size that counts is the *encoded* one: the JSON converter escapes
every non-ASCII character (`é` is 6 bytes, an emoji 12), so 256k characters
can be 3 MB. The activities and the workflow measure with these same pure
functions, which is also what keeps the workflow's cuts deterministic.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

_NOTE = re.compile(
    r"\n\[truncated to fit Temporal's payload limit: "
    r"the first \d+ of (\d+) characters are shown\]\Z"
)


def encoded_size(value: Any) -> int:
    """Bytes of `value` as Temporal's JSON converter writes it (non-ASCII escaped)."""
    return len(json.dumps(value, separators=(",", ":")))


def plain(value: Any) -> Any:
    """`value` to hand the SDK's JSON converter: a dataclass as a dict of its fields.

    The converter encodes a dataclass by `dataclasses.asdict`, which deep-copies
    every value inside, ~10 us a list item or dict entry: a turn of 500 calls
    each given a list of 200 numbers spent 1.4 s of one workflow task copying
    the arguments its journal step and its pause's answer carry (past the SDK's
    2 s deadlock limit on a slower machine, on every retry: the run wedged).
    Given the fields as they are, the encoder walks them in C. Only dataclass
    fields are walked here (a dataclass inside a list is left to the converter):
    the bytes are the same either way, so nothing here changes what any run
    records or sends.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def fields_of(value: Any) -> dict[str, Any]:
    """The dataclass `value` as `plain` gives it: a dict of its fields."""
    data: dict[str, Any] = plain(value)
    return data


def _note(shown: int, total: int) -> str:
    return (
        f"\n[truncated to fit Temporal's payload limit: the first {shown} of {total} "
        "characters are shown]"
    )


def clip_to_size(text: str, limit: int) -> str:
    """`text` cut so that its encoded size is at most `limit`, ending with a note saying so.

    Cutting a text this function already cut keeps the original length in the
    note. The note always fits: `limit` is a budget of hundreds of kilobytes.
    """
    # a character costs at least one byte (plus two quotes): a text longer
    # than the limit is not even encoded, whatever its size
    if len(text) + 2 <= limit and encoded_size(text) <= limit:
        return text
    total = len(text)
    previous = _NOTE.search(text)
    if previous is not None:
        text, total = text[: previous.start()], int(previous.group(1))
    # every character costs at least one byte, so no longer prefix can fit
    lo, hi = 0, min(len(text), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if encoded_size(text[:mid] + _note(mid, total)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + _note(lo, total)


def share_budget(sizes: list[int], budget: int) -> list[int | None]:
    """Per-item limits so that the items fit `budget` together (None: keep as is).

    Small items keep their size and what they leave is shared by the big ones,
    so one huge result does not cost its small siblings anything.
    """
    limits: list[int | None] = [None] * len(sizes)
    left, count = budget, len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        allowance = left // count
        if sizes[index] > allowance:
            limits[index] = allowance
            left -= allowance
        else:
            left -= sizes[index]
        count -= 1
    return limits
