"""A known key in a hex dump: its bytes' hex digits apart, and its characters across lines.

A tool inspecting a file byte by byte (`xxd .env`, `hexdump -C`, `od -A x -t x1z`,
`tcpdump -X`, Python's `bytes.hex(" ")`, `xxd -p`'s 60 digits a line) shows each byte
as two hex digits, in groups a space apart and lines of 16 bytes, with the same bytes as
characters in a column at each line's end. A key in the file is then spelled in hex split
by spaces and line breaks (no form of it, `redaction.secret_forms`' hex included, matched
it), and its characters are cut every 16 into that column, where the middle pieces are no
word's edge for `key_pieces` (and outside a tool's result nothing masks pieces at all).

So the bytes a text's hex digits spell are read in order, line by line (a line's offset
left out, NULs read as nothing as the canonical pass reads them: a UTF-16 file's dump), a
known form is searched for in them, and each byte of it has its two digits masked (`**`,
the dump's layout kept), and its character in the line's column too when the column holds
one character a byte. Pure functions over strings, as `redaction`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: A group of a dump's hex digits: 2 or 4 (`xxd`, `hexdump -C`, `od -t x1`, `tcpdump -X`),
#: or a whole line's worth (`xxd -p`), between spaces, a tab or a colon (`aa:bb:cc`).
#: A line's offset: 4 digits or more followed by a colon (`00000010:`, tcpdump's `0x0010:`;
#: not a colon-separated dump's first byte), or 6 digits or more followed by a space
#: (`hexdump -C`'s `00000010  ...`); after the line's indent (tcpdump's tab, JSON-escaped too).
_OFFSET = re.compile(
    r"(?:\s|\\t)*(?:(?:0x[0-9A-Fa-f]+|[0-9A-Fa-f]{4,}):(?=\s)|[0-9A-Fa-f]{6,}(?=[ \t]))"
)
#: Where a text may be a dump: four groups of 2 or 4 digits in a row, each after a space or
#: colon (searched from the separators, rarer than hex letters: a quick test before the text
#: is read line by line). Not three: a log line's time (` 12:30:45,`) is three, and a log of
#: megabytes was read line by line for nothing (~0.13 s of CPU a MB); any dump line of 8
#: bytes or more has four. `xxd -p`'s lines of digits alone are wrapped hex, which
#: `wrapped.mask_wrapped` reads across their line breaks.
_DUMPISH = re.compile(r"(?:[ :][0-9A-Fa-f]{2}(?:[0-9A-Fa-f]{2})?){3}[ :][0-9A-Fa-f]{2}")
#: Characters searched at a time for `_DUMPISH`: a search over megabytes holds the GIL
#: (the tool's heartbeats with it), a chunk's a few milliseconds.
_CHUNK = 1 << 16
#: The longest stretch of a line read at once (a dump's lines are under 80 characters).
_LONG_LINE = 4096
#: A line's end: as it is, or JSON-escaped (a dump inside a tool's JSON text).
_LINE_END = re.compile(r"\r?\n|(?:\\r)?\\n")
#: The characters around a line's column of characters (`|...|`, `>...<`).
_COLUMN_EDGES = (("|", "|"), (">", "<"))


#: A line's run of digit groups (after its offset): groups a space, tab or colon apart.
_RUN = re.compile(r"(?:[0-9A-Fa-f]{2})+(?![^\s:])(?:[ \t:]+(?:[0-9A-Fa-f]{2})+(?![^\s:]))*")
_PAIR = re.compile(r"[0-9A-Fa-f]{2}")


@dataclass
class _Line:
    """A dump line: where its run of digits is, its first byte's index, and its column."""

    run_start: int
    run_end: int
    first: int
    count: int
    column: int | None


class _Bytes:
    """The bytes a text's hex digits spell, line by line (where each byte's digits and
    character are is worked out only for a line a key was found in)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.values = bytearray()
        self.lines: list[_Line] = []

    def read_line(self, start: int, end: int) -> None:
        offset = _OFFSET.match(self.text, start, end)
        run = _RUN.search(self.text, offset.end() if offset else start, end)
        if run is None:
            return
        spelled = bytes.fromhex(_SEPARATORS.sub(" ", run.group(0)))
        count = len(spelled)
        line = self.text[start:end]
        column = _column(line, run.end() - start, count)
        self.lines.append(
            _Line(
                run.start(),
                run.end(),
                len(self.values),
                count,
                None if column is None else start + column,
            )
        )
        self.values += spelled

    def spots(self, indices: set[int]) -> list[int]:
        """Where the bytes at `indices` are in the text: each one's two digits, and its
        character in its line's column."""
        found: list[int] = []
        for line in self.lines:
            wanted = [k - line.first for k in indices if line.first <= k < line.first + line.count]
            if not wanted:
                continue
            pairs = [m.start() for m in _PAIR.finditer(self.text, line.run_start, line.run_end)]
            for k in wanted:
                found += [pairs[k], pairs[k] + 1]
                if line.column is not None:
                    found.append(line.column + k)
        return found


#: What may stand between a run's groups, read by `bytes.fromhex` as a space.
_SEPARATORS = re.compile(r"[\s:]+")


def _column(line: str, after: int, count: int) -> int | None:
    """Where the line's column of characters begins: its last `count` characters (between
    `|` or `>` `<` marks, `hexdump -C`'s, `od`'s), after two spaces or more."""
    rest = line[after:].rstrip()
    for left, right in _COLUMN_EDGES:
        if rest.endswith(right) and len(rest) >= count + 2 and rest[-count - 2] == left:
            return after + len(rest) - count - 1
    if len(rest) >= count + 2 and rest[: len(rest) - count].endswith("  "):
        return after + len(rest) - count
    return None


def _dumpish(text: str) -> bool:
    """Whether `text` has a dump's groups of digits (`_DUMPISH`), searched a chunk at a time."""
    overlap = 24  # longer than a match of `_DUMPISH`
    for at in range(0, len(text), _CHUNK):
        if _DUMPISH.search(text, max(0, at - overlap), at + _CHUNK) is not None:
            return True
    return False


def _read_line(dumped: _Bytes, start: int, end: int) -> None:
    """Read a line, a long one (`bytes.hex(" ")` of a whole file) a stretch at a time: a
    run of hundreds of thousands of groups held the GIL for a second in one search."""
    while end - start > _LONG_LINE:
        cut = dumped.text.find(" ", start + _LONG_LINE, start + _LONG_LINE + 64)
        cut = start + _LONG_LINE if cut < 0 else cut
        dumped.read_line(start, cut)
        start = cut
    dumped.read_line(start, end)


def mask_dumped(text: str, forms: Iterable[str]) -> str:
    """`text` with each of `forms` spelled in hex dump lines masked (unchanged when none is)."""
    if not _dumpish(text):
        return text
    dumped = _Bytes(text)
    start = 0
    for end in _LINE_END.finditer(text):
        _read_line(dumped, start, end.start())
        start = end.end()
    _read_line(dumped, start, len(text))
    values = bytes(dumped.values)
    if len(values) < 2:
        return text
    # NULs read as nothing (a UTF-16 file's dump), as in the canonical pass; letters folded
    plain = values.replace(b"\0", b"").lower()
    kept: list[int] | None = None
    masked: set[int] = set()
    for form in forms:
        wanted = form.encode("utf-8", "surrogatepass").lower()
        at = plain.find(wanted)
        while at >= 0:
            if kept is None:
                kept = [k for k, value in enumerate(values) if value]
            masked.update(range(kept[at], kept[at + len(wanted) - 1] + 1))
            at = plain.find(wanted, at + 1)
    if not masked:
        return text
    chars = list(text)
    for spot in dumped.spots(masked):
        chars[spot] = "*"
    return "".join(chars)
