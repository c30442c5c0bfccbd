"""A URL's password holding characters a URL parser stops at, read as its user meant it.

`postgresql://app:Zx8#1kQp...@db/prod`: a generated password holding `#`, `?`, `/`, `[` or
`]` is often written into a connection string as it is, not percent-encoded, and it works:
SQLAlchemy's URLs and libpq's take everything between the user's `:` and the `@` before the
host for the password. `urlsplit` ends the URL's authority at the first `/`, `?` or `#` (and
refuses a lone bracket outright), so it saw no password there: `DATABASE_URL`'s was never
remembered as a secret (a tool returning the connection string recorded it as it was), and
an error or log line quoting the URL showed it whole, the rest of the URL taken for a path
or a fragment. Pure functions over strings, for `redaction` and the worker's environment.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

#: Where a URL's userinfo begins: its scheme at a run of scheme characters' start (each
#: run read once, as `url_runs` reads them), `://`, a user (maybe empty) and its `:`.
_START = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\[\]\s'\"<>`]*:")
#: An `@` that a host follows (a name or a bracketed IPv6 address, a port, then the
#: URL's path, query, fragment or end, or a list's `,` or `;`).
_HOST_AFTER = re.compile(
    r"@(?:[A-Za-z0-9\-._~%]+|\[[0-9A-Za-z:.%\-]+\])(?::\d+)?(?=[/?#,;\s'\"<>`]|$)"
)
#: Where the stretch a password may take ends: a space or quote, or the next URL.
_STRETCH_END = re.compile(r"[\s'\"<>`]|://")
#: What a URL parser ends the authority at (or refuses), and what ends a URL in a list of
#: them (`_env_secrets`): a password holding none of these is read by `urlsplit` already.
_SPLITTER = re.compile(r"[/?#\[\];,]")
#: A port and what follows it (`host:8080/x?email=a@b.example`): a URL without
#: userinfo whose `@` is in its path or query, not a password.
_PORT_FIRST = re.compile(r"\d+[/?#]")


def _candidates(text: str) -> list[tuple[int, list[int]]]:
    """For each URL whose password `urlsplit` would not see: where the password begins,
    and each place it may end (before each `@` a host follows: an `@` may be in it).

    Each stretch is read once (no slice of it made per `@`): an error quoting a long
    run of them holds the interpreter's lock no longer than reading it takes.
    """
    found: list[tuple[int, list[int]]] = []
    pos = 0
    while (start := _START.search(text, pos)) is not None:
        begin = start.end()
        pos = begin  # a URL of a list may begin inside this one's stretch
        stop = _STRETCH_END.search(text, begin)
        end = stop.start() if stop is not None else len(text)
        split = _SPLITTER.search(text, begin, end)
        if split is None or _PORT_FIRST.match(text, begin, end):
            continue
        ends = []
        at = text.find("@", split.end(), end)
        while at != -1:
            if _HOST_AFTER.match(text, at):
                ends.append(at)
            at = text.find("@", at + 1, end)
        if ends and (not found or begin >= found[-1][1][-1]):
            found.append((begin, ends))
    return found


def raw_passwords(text: str) -> list[str]:
    """The passwords of the URLs in `text` written with `/?#[];,` in them, as written and
    percent-decoded (what the database is sent): for one holding an `@` too, each
    stretch up to an `@` a host follows (the password is one of them)."""
    found: list[str] = []
    for begin, ends in _candidates(text):
        for end in ends:
            found += [text[begin:end], unquote(text[begin:end])]
    return list(dict.fromkeys(found))


def mask_raw_passwords(text: str, mask: str) -> str:
    """`text` with each such password replaced by `mask` (the user and host kept), up to
    its last `@` a host follows."""
    if "://" not in text or "@" not in text:
        return text
    parts: list[str] = []
    pos = 0
    for begin, ends in _candidates(text):
        parts += [text[pos:begin], mask]
        pos = ends[-1]
    parts.append(text[pos:])
    return "".join(parts)
