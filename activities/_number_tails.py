"""How much of a streamed reply's end may be a known key's bytes written as numbers, unfinished.

A reply is masked as a whole once it ends, but its deltas are published as they come
(`streaming.MaskedDeltas`), and an end that begins a known secret is held back until the next
delta shows whether the secret follows. That end was read in the spellings the canonical pass
knows (`canonical.begun`): a key written as its bytes' numbers (`byte_lists`: `[115, 107, 45,
...]`, `73-6B-2D-...`) or in a hex dump (`hex_dumps`: `xxd`'s lines, their column of
characters) came one number or one word a delta, no delta held a whole key, and each was sent
as it was: the key in the live followers' deltas (`stream`, serve's SSE, A2A streams) and in
the run's history (the deltas are the stream's publish signals).

So an end made of a run of numbers (digits, hex letters, `0x`, commas, dashes, blanks,
escaped line breaks), or of a hex dump's lines (each from its offset), is held too, up to the
characters the longest known form's bytes take so written: a key begun earlier than that
would already be whole, and masked, in what is held. Bounded, so a reply streaming a long
array of numbers is read a bounded stretch a delta, not whole each time.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from agentor_temporal.workflows.byte_lists import MIN_ITEMS

#: The characters a run of numbers is written with (`byte_lists`, `hex_dumps`' digit groups,
#: `bytes.hex(" ")`), read backwards from a text's end; `\\` for a JSON-escaped line break.
_RUN_BACKWARDS = re.compile(r"[0-9A-Fa-fxX,:\- \t\r\n\\\[\]{}]*")
#: The characters a number and the separator before it take at most (`byte_lists._ITEM_CHARS`).
_ITEM_CHARS = 37
#: A hex dump's line: from its offset (`00000010:`, tcpdump's `0x0010:`, `hexdump -C`'s
#: `00000010  `), after its indent.
_DUMP_LINE = re.compile(r"(?:\s|\\t)*(?:(?:0x[0-9A-Fa-f]+|[0-9A-Fa-f]{4,}):|[0-9A-Fa-f]{6,}[ \t])")
#: The start of a line a dump's next line may be: blanks and digits so far (its offset cut).
_DUMP_LINE_BEGUN = re.compile(r"(?:\s|\\t)*(?:0x)?[0-9A-Fa-f]*\Z")
#: The line ends a dump is read across: as written or JSON-escaped.
_LINE_END = re.compile(r"\n|\\n")
#: The bytes a dump's line shows (`xxd`, `hexdump -C`: 16).
_DUMP_LINE_BYTES = 16
#: The characters a dump's line takes at most (with its column and an indent).
_DUMP_LINE_CHARS = 128


def numbers_begun(text: str, forms: Collection[str]) -> int:
    """The length of the end of `text` that may be a known key's bytes written as numbers,
    not yet whole: a run of numbers or a hex dump's lines reaching the end (0 when none)."""
    longest = max((len(f.encode("utf-8", "surrogatepass")) for f in forms), default=0)
    if not text or longest < MIN_ITEMS:
        return 0
    return max(_run_end(text, longest), _dump_end(text, longest))


def run_bound(forms: Collection[str]) -> int:
    """The most characters of a run of numbers held: the longest of `forms` so written."""
    return max((len(f.encode("utf-8", "surrogatepass")) for f in forms), default=0) * _ITEM_CHARS


def in_run(text: str) -> bool:
    """Whether all of `text` may be part of a run of numbers (a delta that ends none)."""
    return _RUN_BACKWARDS.fullmatch(text) is not None


def _run_end(text: str, longest: int) -> int:
    bound = longest * _ITEM_CHARS
    tail = text[-bound:]
    held = len(_RUN_BACKWARDS.match(tail[::-1]).group(0))  # type: ignore[union-attr]
    if not any(c.isdigit() for c in tail[len(tail) - held :]):
        return 0  # prose of hex letters (`a face`) waits for no number
    return held


def _dump_end(text: str, longest: int) -> int:
    lines = longest // _DUMP_LINE_BYTES + 2
    tail = text[-lines * _DUMP_LINE_CHARS :]
    ends = [m.end() for m in _LINE_END.finditer(tail)]
    starts = [0, *ends]
    last = tail[starts[-1] :]
    if len(last) > _DUMP_LINE_CHARS:
        return 0  # no dump's line is so long: a run of numbers', if any
    if not (_DUMP_LINE.match(last) or _DUMP_LINE_BEGUN.match(last)):
        return 0  # the reply went on past a dump: nothing of one is unfinished
    held_from = starts[-1]
    # the dump's whole lines before it, as many as the longest form's bytes take
    for start in reversed(starts[-lines:-1]):
        if not _DUMP_LINE.match(tail, start):
            break
        held_from = start
    if held_from == starts[-1] and not _DUMP_LINE.match(last):
        return 0  # a line of blanks or digits after no dump: the run of numbers' to hold
    return len(tail) - held_from


def open_dump_line(text: str) -> int:
    """The length of `text`'s last line when it is a hex dump's, not yet ended (0 when not).

    Left unmasked while it is held: the dump is masked by its digits and its column of
    characters together (`hex_dumps`), and a line whose digits were masked before its column
    came could no longer tell which of its characters to mask.
    """
    ends = [m.end() for m in _LINE_END.finditer(text, max(0, len(text) - _DUMP_LINE_CHARS - 2))]
    last = text[ends[-1] :] if ends else text
    if len(last) > _DUMP_LINE_CHARS or not _DUMP_LINE.match(last):
        return 0
    return len(last)
