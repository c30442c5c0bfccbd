"""A secret's base64 form across the line breaks of wrapped base64 text.

Base64 written for mail or files is cut into lines (`base64.encodebytes`, MIME and
`openssl base64`: 76 or 64 characters a line; PEM's 64): a key inside the encoded
text (a JSON credentials file, an env file) is then split by a line break wherever one
falls in its characters, and no known form of it (`redaction.secret_forms`) matched.
Its line breaks as they are or JSON-escaped (`\\n`: the file inside a tool's JSON text).
So is a form cut by a quoted-printable soft line break (a line ending in `=` that goes on
in the next: an email's source, MIME's other way to keep lines under 76 characters), which
cuts a key written in the mail's text wherever the line's 76th character falls, and
writes each `=` of it (a base64 key's padding) as `=3D`.
So is a key cut by a line break in other text: `textwrap` and `fold` break a long line at a
key's hyphen (`sk-proj-` ending one line) or inside it, a log's or a help text's wrapped
lines go on indented, and a shell script goes on past a `\\` ending its line: each reads
as the key once its line break (and the indentation after it) is taken out, and is pasted
so. Only a break between two of the key's characters counts, and only where the key's
characters on both sides of it join to one of its forms.
Pure functions over strings, as `redaction`'s.
"""

from __future__ import annotations

import functools
import re

#: A form is looked for across line breaks when it is this long and all base64 characters:
#: shorter ones are the ends of a key's base64, matched in too much ordinary text. A `.`
#: counts: a JWT is base64url parts joined by dots, and one written over lines (`textwrap`,
#: a reply's code block) was masked nowhere but in a tool's text, by its pieces.
MIN_WRAPPED = 16
_CHARS = r"A-Za-z0-9+/_\-=."
_BASE64_FORM = re.compile(rf"[{_CHARS}]{{{MIN_WRAPPED},}}")


def mask_wrapped(text: str, form: str, mask: str) -> str:
    """`text` with `form` masked where line breaks of wrapped base64 split it."""
    if not _BASE64_FORM.fullmatch(form):
        return text
    # a quick test before the pattern (slow on long texts): the text's lines joined hold it
    joined = _unwrapped(text)
    if joined is None or form not in joined:
        return text
    return _pattern(form).sub(mask, text)


@functools.lru_cache(maxsize=4)  # one text is tested against every known form in turn
def _unwrapped(text: str) -> str | None:
    """`text`'s lines (and literals) joined, None when no break falls inside a run of base64
    characters: worked out once a text, not
    once a form (each known key has several forms: looking for a line break in a 5 MB text
    for each of them took seconds a mask)."""
    if "\n" not in text and "\\n" not in text and '"' not in text and "'" not in text:
        return None
    if _soft_breaks(text):
        # the soft breaks read as nothing, and joined as other line breaks are too (`=` may
        # end a key, base64's padding, at a line's end): both, for the quick test
        unbroken = _joined(_SOFT_BREAK.sub(lambda m: m.group(0)[:1] + m.group(0)[-1:], text))
        # and its `=3D`s read as the `=` they stand for (a base64 key's padding)
        return f"{unbroken}\n{_joined(text)}\n{_QP_EQUALS.sub('=', unbroken)}"
    # only the runs of base64 characters a break falls inside, joined: a key split by
    # breaks is all in one, and the forms are looked for in these only (in a whole text of
    # megabytes, once a known form, they cost three times the mask of the text)
    return "\n".join(s for s in _spans(text) if len(s) >= MIN_WRAPPED) or None


def _spans(text: str) -> list[str]:
    """The runs of base64 characters in `text` a break falls inside, each joined: found
    from the breaks (a scan for their first characters, in C) and the runs around them, not
    by a pattern tried at each word (which doubled the mask of megabytes of text)."""
    spans: list[str] = []
    joined: list[str] = []
    run_end = -1  # where the run after the last break inside a run ends
    scanned = 0  # where the last break ended: no run before a break begins before it
    for brk in _SCAN.finditer(text):
        start, end = brk.span()
        if not (0 < start and end < len(text) and text[start - 1] in _CHARSET):
            scanned = end
            continue
        if text[end] not in _CHARSET:
            scanned = end
            continue
        after = _RUN.match(text, end)
        assert after is not None  # text[end] is one of the characters
        if run_end != start:
            # a new span: the run ending at this break, from its first character
            if joined:
                spans.append("".join(joined))
            before = text[scanned:start]
            joined = [before[len(before.rstrip(_CHARSET)) :]]
        joined.append(after.group(0))
        run_end, scanned = after.end(), end
    if joined:
        spans.append("".join(joined))
    return spans


#: A line break as it is or JSON-escaped, after a shell's `\\` line continuation or not, and
#: the indentation that follows it (a wrapped log line's, a help text's, a script's); or a
#: string literal closed and the next opened, joined by nothing (Python's, a shell's), `+`,
#: `.` or `||`, on one line or over two (code holding a long key in two literals).
_LINE = r"\\{0,2}(?:\r?\n|(?:\\r)?\\n)[ \t]*"
_BREAK = rf"(?:{_LINE}|[\"'][ \t]*(?:(?:\+|\.|\|\|)[ \t]*)?(?:{_LINE})?[\"'])"
_BREAK_RE = re.compile(_BREAK)
#: `_BREAK` written with a character each alternative begins with, which `re` then looks
#: for alone, fast; as `_BREAK`, each position of a text entered its alternatives (0.5 s
#: for 2 MB of JSON).
_QUOTED = rf"[ \t]*(?:(?:\+|\.|\|\|)[ \t]*)?(?:{_LINE})?[\"']"
_SCAN = re.compile(
    r"\\(?:n|r\\n|\\{0,2}(?:\r?\n|(?:\\r)?\\n))[ \t]*|\r\n[ \t]*|\n[ \t]*"
    rf"|\"{_QUOTED}|'{_QUOTED}"
)


def _joined(text: str) -> str:
    return _BREAK_RE.sub("", text)


#: A quoted-printable soft line break inside a run of base64 characters (a key's): its `=`
#: ending a line, as it is or JSON-escaped, between the characters around it.
_SOFT_BREAK = re.compile(r"[A-Za-z0-9+/_\-]=(?:\r?\n|(?:\\r)?\\n)[A-Za-z0-9+/_\-=]")


#: Quoted-printable's escape of `=` itself: a mail's text holding a key written `=3D` for
#: each `=` in it (a base64 key's padding, `...Gw=3D=3D`).
_QP_EQUALS = re.compile("=3[Dd]")


def _soft_breaks(text: str) -> bool:
    """Whether `text` holds a quoted-printable soft line break inside base64 characters (a
    quick look for `=` ending a line first: the pattern is slower over megabytes)."""
    return ("=\n" in text or "=\r\n" in text or "=\\n" in text or "=\\r\\n" in text) and (
        _SOFT_BREAK.search(text) is not None
    )


#: The characters of a run a break may fall inside (wrapped base64's, a key's). A
#: traceback's lines, ending in `:` or `)`, have no break inside one.
_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-=."
_RUN = re.compile(f"[{_CHARS}]+")


@functools.lru_cache(maxsize=2048)
def _pattern(form: str) -> re.Pattern[str]:
    # a line break as it is, or JSON-escaped (wrapped base64 inside a tool's JSON text), and
    # after a quoted-printable soft line break's `=` or a shell's `\\`, the indentation after
    # it aside; an `=` of the form as quoted-printable writes it too (`=3D`)
    return re.compile(
        rf"(?:=?{_BREAK})?".join("=(?:3[Dd])?" if c == "=" else re.escape(c) for c in form)
    )


def forget() -> None:
    """Let go of the texts kept joined (after masking a text whole)."""
    _unwrapped.cache_clear()


#: A break cut short at a text's end (the next delta may finish it): backslashes (a shell's
#: `\\`, a JSON escape begun), a CR, `\\r` JSON-escaped; a string literal closed, with the
#: spaces, the `+`, `.` or `|`/`||` and the line break after it, the next one not yet opened.
_PARTIAL_LINE = r"\\{1,3}|\\{0,2}(?:\r|\\r\\?)"
_PARTIAL_BREAK = re.compile(
    rf"(?:{_PARTIAL_LINE}|[\"'][ \t]*(?:(?:\+|\.|\|\|?)[ \t]*)?(?:{_LINE}|{_PARTIAL_LINE})?)\Z"
)
#: A whole break ending where the search ends (`search(text, pos, endpos)`).
_BREAK_BEFORE = re.compile(rf"(?:{_BREAK})\Z")
#: How many characters before a run a break ending there is looked for in (an indent's room).
_BREAK_ROOM = 160
#: How many characters of a text's end are read for a key cut by breaks, a form's length
#: aside: room for a break a few of its characters (a narrow `textwrap`) and an indent.
_WRAP_ROOM = 512


def wrapped_begun(text: str, forms: tuple[str, ...]) -> int:
    """The length of the longest end of `text` that may begin one of `forms` cut by line
    breaks (or split between string literals) as `mask_wrapped` reads them: with the breaks
    taken out, the end is a proper beginning of a form, a break cut short after it or not.

    A streamed reply's end so (`sk-proj-` ending a line) holds no key's spelling, and went
    out before the rest of the key came. Only an end of `_WRAP_ROOM` characters and twice
    the longest form's is read, from its end back (runs of a key's characters and the
    breaks between them): a long reply is never held, nor read again, whole.
    """
    forms = _wrappable(forms)
    if not forms or not text:
        return 0
    longest = max(map(len, forms))
    window = text[-(_WRAP_ROOM + 2 * longest) :]
    ends = [len(window)]
    partial = _PARTIAL_BREAK.search(window, max(0, len(window) - _BREAK_ROOM))
    if partial:
        ends.append(partial.start())
    return max(_run_begun(window, end, forms, longest) for end in ends)


@functools.lru_cache(maxsize=8)
def _wrappable(forms: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f for f in forms if _BASE64_FORM.fullmatch(f))


def _run_begun(window: str, end: int, forms: tuple[str, ...], longest: int) -> int:
    """The length of the longest end of `window` whose part before `end`, read back as runs
    of a key's characters joined across the whole breaks between them, is a proper
    beginning of one of `forms`; 0 when no break is crossed (`canonical.begun` reads a
    key's beginning in one piece)."""
    runs: list[tuple[int, str]] = []  # (where it starts, the run), the last first
    total = 0
    crossed = end < len(window)  # a break cut short after it
    pos = _break_before(window, end)
    if pos is None:
        pos = end
    else:
        crossed = True
    while total < longest:
        start = _run_start(window, pos)
        if start == pos:
            break  # no key's characters here (two breaks in a row)
        runs.append((start, window[start:pos]))
        total += pos - start
        before = _break_before(window, start)
        if before is None:
            break
        crossed, pos = True, before
    if not crossed:
        return 0
    joined = "".join(run for _, run in reversed(runs))[-longest:]
    size = 0
    for form in forms:
        # the earliest place the joined end begins a form: the longest such end
        at = joined.find(form[0], max(0, len(joined) - len(form) + 1))
        while at != -1 and len(joined) - at > size:
            if form.startswith(joined[at:]):
                size = len(joined) - at
                break
            at = joined.find(form[0], at + 1)
    if not size:
        return 0
    for start, run in runs:
        if size <= len(run):
            return len(window) - (start + len(run) - size)
        size -= len(run)
    return 0  # not reached: the runs hold the joined end


def _break_before(window: str, at: int) -> int | None:
    """Where a whole break ending at `at` begins, if one does."""
    if at <= 0:
        return None
    brk = _BREAK_BEFORE.search(window, max(0, at - _BREAK_ROOM), at)
    return None if brk is None else brk.start()


def _run_start(window: str, end: int) -> int:
    """Where the run of a key's characters ending at `end` begins: after a JSON-escaped line
    break's `n` (`\\n`), which is no character of the key."""
    start = len(window[:end].rstrip(_CHARSET))
    if start < end and start and window[start] == "n" and window[start - 1] == "\\":
        if _break_before(window, start + 1) is not None:
            return start + 1
    return start
