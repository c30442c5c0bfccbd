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
_WORD = re.compile(r"\w")


def sub_urls(text: str, redact_url: Callable[[str], str]) -> str:
    """`text` with each URL replaced by `redact_url(url)`, the URLs being exactly those
    `\\b[A-Za-z][A-Za-z0-9+.\\-]*://[^\\s'"<>`]+` finds."""
    return _RUN.sub(lambda match: _one(match, redact_url), text)


def _one(match: re.Match[str], redact_url: Callable[[str], str]) -> str:
    found = match.group(0)
    run = found.index("://")
    text, at = match.string, match.start()
    for i in range(run):
        char = text[at + i]
        # a letter at a word's edge: what `\b[A-Za-z]` took for the scheme's start
        if char.isascii() and char.isalpha() and (at + i == 0 or not _WORD.match(text[at + i - 1])):
            return found[:i] + redact_url(found[i:])
    # no scheme starts in the run ("9://"): a URL may still start further on
    head = run + len("://")
    return found[:head] + sub_urls(found[head:], redact_url)
