"""A known key written as its bytes' numbers: `[115, 107, 45, ...]`.

Printing bytes as a list of numbers is how several languages show a byte string: Go's
`fmt.Println` of a `[]byte` (`[115 107 45 ...]`), Java's `Arrays.toString(bytes)`,
Python's `list(data)`, Node's `JSON.stringify(buffer)` (`{"type":"Buffer","data":[115,...]}`,
one number a line when indented), a C array as `xxd -i` writes it (`0x73, 0x6b, ...`), and
.NET's `BitConverter.ToString(bytes)` (`73-6B-2D-...`). A tool's debug output or a service's
error holding such a list spelled the key in numbers no form of it matched (its hex is
digits without separators or with spaces, `hex_dumps`).

So each run of six numbers or more (0-255, decimal or `0x` hex, apart by commas, spaces or
line breaks, as written or JSON-escaped; or two-digit hex apart by `-`) is read as the bytes
it spells, NULs as nothing (UTF-16 text's bytes) and letters folded as the canonical pass
reads them, each known form is searched for in them, and the numbers that spell one are
masked (`***`). The text is read once, a window at a time (a search over megabytes holds
the GIL: the tool's heartbeats with it). Pure functions over strings, as `redaction`'s.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

#: The fewest numbers in a run read as bytes: no known secret is shorter (MIN_SECRET_CHARS).
MIN_ITEMS = 6
_DEC = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?![0-9])"
_HEX = r"0[xX][0-9A-Fa-f]{1,2}(?![0-9A-Za-z])"
_ITEM = rf"(?:{_HEX}|{_DEC})"
#: A run's first number, read from its first digit (a pattern beginning with a character
#: class is searched for that character first: about four times faster over prose than one
#: beginning with the lookbehind), the digits after it by what the first was: 0-255.
_FIRST = (
    r"[0-9](?<![0-9A-Za-z.\-][0-9])"
    r"(?:(?<=0)[xX][0-9A-Fa-f]{1,2}(?![0-9A-Za-z])|(?<=1)[0-9]{0,2}(?![0-9])"
    r"|(?<=2)(?:[0-4][0-9]?|5[0-5]?|[6-9])?(?![0-9])|(?<=[3-9])[0-9]?(?![0-9])"
    r"|(?<=0)(?![0-9]))"
)
#: Between two numbers: a comma with blanks around it, or blanks alone (Go's), a line break
#: as written or JSON-escaped (an indented JSON array inside a tool's JSON text); bounded, so
#: a run is read once whatever blanks it holds.
_BLANK = r"(?:[ \t\r\n]|\\[rnt])"
_SEP = rf"(?:{_BLANK}{{0,16}},{_BLANK}{{0,16}}|{_BLANK}{{1,16}})"
_LISTED = re.compile(rf"{_FIRST}(?:{_SEP}{_ITEM}){{{MIN_ITEMS - 1},}}")
_DASHED = re.compile(
    r"[0-9A-Fa-f](?<![0-9A-Za-z\-][0-9A-Fa-f])[0-9A-Fa-f]"
    rf"(?:-[0-9A-Fa-f]{{2}}){{{MIN_ITEMS - 1},}}(?![0-9A-Za-z\-])"
)
_NUMBER = re.compile(rf"{_HEX}|{_DEC}")
_PAIR = re.compile(r"[0-9A-Fa-f]{2}")
#: Characters searched at a time; a run begun in a window's last `_OVERLAP` characters is
#: read from the next one (six numbers and their widest separators take fewer).
_WINDOW = 1 << 16
_OVERLAP = 512
#: The most characters a number and the separator before it take (`0xff` after 33 blanks).
_ITEM_CHARS = 37


def _runs(pattern: re.Pattern[str], text: str, overlap: int) -> Iterable[re.Match[str]]:
    """Each match of `pattern` in `text`, searched a window at a time; a run longer than a
    window (a JSON array of millions of numbers: seconds in one search) is read a window at
    a time too, each piece from `overlap` characters before the last one's end, so a key
    cut by a window is read whole in the next."""
    pos, size = 0, len(text)
    window = max(_WINDOW, 4 * overlap)
    while pos < size:
        end = min(size, pos + window)
        found = pattern.search(text, pos, end)
        if found is None:
            if end == size:
                return
            pos = end - _OVERLAP
            continue
        yield found
        if found.end() == end and end < size:
            pos = max(found.start() + 1, end - overlap)
        else:
            pos = found.end()


def _value(item: str) -> int:
    return int(item[2:], 16) if item[:2] in ("0x", "0X") else int(item)


def _hex(item: str) -> int:
    return int(item, 16)


def _spans(text: str, forms: Collection[str]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    # the characters the longest form's bytes may take as numbers, with their separators
    # (a form's bytes: up to 4 a character)
    overlap = max(_OVERLAP, max(map(len, forms), default=0) * 4 * _ITEM_CHARS)
    wanted: list[bytes] | None = None  # encoded once a text holds a run: most hold none
    for pattern, items, value in ((_LISTED, _NUMBER, _value), (_DASHED, _PAIR, _hex)):
        for run in _runs(pattern, text, overlap):
            if wanted is None:
                encoded = (f.encode("utf-8", "surrogatepass").lower() for f in forms)
                wanted = [w for w in encoded if w]
            spelled = items.findall(text, run.start(), run.end())
            # a decimal run's numbers read in C (a JSON array of a million numbers: seconds
            # one by one)
            plain_ints = value is _value and "x" not in run.group(0).lower()
            values = bytes(map(int if plain_ints else value, spelled))
            plain = values.replace(b"\0", b"").lower()
            found = [(at, len(w)) for w in wanted for at in _finds(plain, w)]
            if not found:
                continue
            numbers = list(items.finditer(text, run.start(), run.end()))
            kept = [k for k, byte in enumerate(values) if byte]
            for at, size in found:
                spans.append((numbers[kept[at]].start(), numbers[kept[at + size - 1]].end()))
    return spans


def _finds(data: bytes, wanted: bytes) -> Iterable[int]:
    at = data.find(wanted)
    while at >= 0:
        yield at
        at = data.find(wanted, at + 1)


def mask_listed(text: str, forms: Collection[str], mask: str) -> str:
    """`text` with each of `forms` spelled as a list of its bytes' numbers masked (unchanged
    when none is)."""
    if len(text) < MIN_ITEMS * 2:
        return text
    spans = sorted(_spans(text, forms))
    if not spans:
        return text
    out, pos = [], 0
    for start, end in spans:
        if end <= pos:
            continue
        out += [text[pos : max(pos, start)], mask]
        pos = end
    out.append(text[pos:])
    return "".join(out)
