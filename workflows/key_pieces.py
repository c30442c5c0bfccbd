"""A piece of a known key at the edge of a text or a word: a key split across two texts.

A tool reading a file in chunks (`read_file(offset, limit)`), a paginated API or a
terminal wrapping its output cuts a text where the chunk ends, not where the key does:
one result ends with the key's beginning and the next begins with its end (a long key
across three chunks: the middle one is all key). No text holds the whole key, so
searching for it finds nothing, and the model, history and the JSONL read the key from
the pieces put together.

So a run of a known form's characters (a word: what a chunk boundary, a quote or a
space ends) whose end or beginning is a piece of the form (`piece_size` characters or
more) has that piece masked: the run's longest end, or beginning, found in the form.
Only forms long enough to be cut in useful pieces (`MIN_PIECE_FORM`): a shorter secret
is masked whole only. What is left of a key at a cut is shorter than `piece_size`.

For a tool's result and error only (`mask_all(..., pieces=True)`): a streamed reply's
deltas end where the stream was cut, not where a word does (the hold-back of a key's
beginning, `canonical.begun`, covers them), and the model can only repeat what a tool
showed it. Searched in the canonical text (`canonical.Canonical`), one scan for the runs long
enough (`_runs`) and a dictionary look-up at each of their ends: a text's cost does not
grow with the number of known forms.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: The shortest piece of a long form masked at a word's edge (a key's piece this long is
#: 72 bits of a random key; shorter ones turn up in ordinary text).
PIECE_CHARS = 12
#: A form shorter than this is masked whole only (pieces of it would be too short).
MIN_PIECE_FORM = 16


def piece_size(form: str) -> int:
    """The shortest piece of `form` masked: half of it, at most `PIECE_CHARS`."""
    return min(PIECE_CHARS, len(form) // 2)


@dataclass(frozen=True)
class _Index:
    #: each piece size, and the forms by each of their pieces of that size
    pieces: dict[int, dict[str, tuple[str, ...]]]
    #: the forms' characters (but blanks) as 1, every other byte as 0 (`_runs`)
    table: bytes
    #: a run of the forms' characters, for forms with characters past Latin-1
    runs: re.Pattern[str] | None


@functools.lru_cache(maxsize=64)  # one set of known forms a process, changing rarely
def _index(forms: tuple[str, ...]) -> _Index | None:
    pieces: dict[int, dict[str, list[str]]] = {}
    chars: set[str] = set()
    for form in forms:
        if len(form) < MIN_PIECE_FORM:
            continue
        size = piece_size(form)
        found = pieces.setdefault(size, {})
        for at in range(len(form) - size + 1):
            found.setdefault(form[at : at + size], []).append(form)
        chars.update(form)
    if not pieces:
        return None
    chars = {c for c in chars if not c.isspace()}
    word = "".join(re.escape(c) for c in sorted(chars))
    return _Index(
        pieces={
            size: {piece: tuple(dict.fromkeys(f)) for piece, f in found.items()}
            for size, found in pieces.items()
        },
        table=bytes(1 if chr(i) in chars else 0 for i in range(256)),
        runs=re.compile(f"[{word}]{{{min(pieces)},}}") if max(map(ord, chars)) > 0xFF else None,
    )


def _runs(canon: str, index: _Index, shortest: int) -> list[tuple[int, int]]:
    """The runs of the forms' characters in `canon`, `shortest` characters or more.

    Read in bytes (each character one: Latin-1, anything past it a `?`) mapped to 1 for a
    form's character and 0 for any other, and searched for `shortest` 1s: a text's
    ordinary words are passed over at the speed of `bytes.find`, not one match attempt a
    character (a megabyte's regular-expression scan took 0.1 s).
    """
    if index.runs is not None:
        return [m.span() for m in index.runs.finditer(canon)]
    mapped = canon.encode("latin-1", "replace").translate(index.table)
    needle, found = b"\x01" * shortest, []
    at = mapped.find(needle)
    while at >= 0:
        end = mapped.find(b"\x00", at)
        end = len(mapped) if end < 0 else end
        found.append((at, end))
        at = mapped.find(needle, end)
    return found


def piece_spans(canon: str, forms: tuple[str, ...]) -> list[tuple[int, int]]:
    """The spans of `canon` (a canonical text) that are a piece of one of `forms` (canonical
    forms) at the end or the beginning of a run of their characters."""
    index = _index(forms)
    if index is None or not canon:
        return []
    found: list[tuple[int, int]] = []
    sizes = sorted(index.pieces, reverse=True)
    for start, end in _runs(canon, index, sizes[-1]):
        run = canon[start:end]
        for size in sizes:
            if len(run) < size:
                continue
            pieces = index.pieces[size]
            tail = pieces.get(run[-size:])
            if tail:
                found.append((end - _longest(run, tail, size, from_end=True), end))
            head = pieces.get(run[:size])
            if head:
                found.append((start, start + _longest(run, head, size, from_end=False)))
    return found


def _longest(run: str, forms: tuple[str, ...], size: int, *, from_end: bool) -> int:
    """The length of the longest end (or beginning) of `run` found in one of `forms`."""
    longest = size
    for form in forms:
        for length in range(min(len(run), len(form)), longest, -1):
            if (run[-length:] if from_end else run[:length]) in form:
                longest = length
                break
    return longest
