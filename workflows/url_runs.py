"""Finding the URLs in a text in one pass, for `redaction` to mask their credentials.

A URL is a scheme (a letter, then letters, digits, `+`, `.` or `-`) starting at a word's
edge, `://`, and what follows up to a space or quote. Searched for as such
(`\\b[A-Za-z][A-Za-z0-9+.\\-]*://...`), every letter after a `.`, `+` or `-` of a long run
of those characters was a start the search tried, reading the run to its end each time:
quadratic, in C, holding the interpreter's lock throughout. A tool's 80 kB error
quoting a dotted or hyphenated list and any URL took 7 s: its heartbeats stopped, and
the call ran again on another worker. Here each run is read once: a match starts only
where a run of scheme characters begins, and the scheme is found inside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: A run of scheme characters, whole (nothing of the run before it), then `://` and the rest.
_RUN = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z0-9+.\-]+://[^\s'\"<>`]+")
#: Where such a run begins, read up to its `://` only.
_START = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z0-9+.\-]+://")
_WORD = re.compile(r"\w")


def sub_urls(text: str, redact_url: Callable[[str], str]) -> str:
    """`text` with each URL replaced by `redact_url(url)`, the URLs being exactly those
    `\\b[A-Za-z][A-Za-z0-9+.\\-]*://[^\\s'"<>`]+` finds.

    A `://` whose run holds no scheme ("9://") is passed over to the next run of the same
    stretch in a loop, each stretch read once: a call for each (searching the rest again)
    passed Python's recursion limit on an error quoting thousands in a row (`0://0://...`),
    and the tool's call, which had run, was never answered: it ran again on each start.
    """
    parts: list[str] = []
    pos = 0
    while (match := _RUN.search(text, pos)) is not None:
        parts.append(text[pos : match.start()])
        at, end = match.start(), match.end()
        while True:
            run = text.index("://", at, end) - at
            scheme = _scheme_start(text, at, run)
            if scheme is not None:
                parts.append(text[at:scheme] + redact_url(text[scheme:end]))
                break
            # no scheme starts in the run: a URL may still start further on
            later = _START.search(text, at + run + len("://"), end)
            if later is None or later.end() == end:
                parts.append(text[at:end])
                break
            parts.append(text[at : later.start()])
            at = later.start()
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def _scheme_start(text: str, at: int, run: int) -> int | None:
    """Where the scheme of the run of `run` characters at `at` starts, if one does."""
    for i in range(at, at + run):
        char = text[i]
        # a letter at a word's edge: what `\b[A-Za-z]` took for the scheme's start
        if char.isascii() and char.isalpha() and (i == 0 or not _WORD.match(text[i - 1])):
            return i
    return None
