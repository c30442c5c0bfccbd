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
_BASE64_FORM = re.compile(rf"[A-Za-z0-9+/_\-=.]{{{MIN_WRAPPED},}}")


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
    """`text`'s lines joined, None when it has no line break: worked out once a text, not
    once a form (each known key has several forms: looking for a line break in a 5 MB text
    for each of them took seconds a mask)."""
    if "\n" not in text and "\\n" not in text:
        return None
    if _soft_breaks(text):
        # the soft breaks read as nothing, and joined as other line breaks are too (`=` may
        # end a key, base64's padding, at a line's end): both, for the quick test
        unbroken = _joined(_SOFT_BREAK.sub(lambda m: m.group(0)[:1] + m.group(0)[-1:], text))
        # and its `=3D`s read as the `=` they stand for (a base64 key's padding)
        return f"{unbroken}\n{_joined(text)}\n{_QP_EQUALS.sub('=', unbroken)}"
    if not _wraps_base64(text):
        return None
    return _joined(text)


def _joined(text: str) -> str:
    return text.replace("\\r", "").replace("\\n", "").replace("\r", "").replace("\n", "")


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


def _wraps_base64(text: str) -> bool:
    """Whether a line of `text` ends in base64 (`MIN_WRAPPED` characters of it) and the next
    goes on in it: wrapped base64's line breaks. A traceback or a log is not searched."""
    for brk in ("\n", "\\n"):  # as it is, or JSON-escaped
        at = text.find(brk)
        while at >= 0:
            end = at + len(brk)
            start = at - 1 if text.startswith("\r", at - 1) else at
            if brk == "\\n" and text.startswith("\\r", at - 2):
                start = at - 2
            before = text[max(0, start - MIN_WRAPPED) : start]
            if (
                len(before) == MIN_WRAPPED
                and _BASE64_CHARS.fullmatch(before)
                and _BASE64_CHARS.match(text, end, end + 1)
            ):
                return True
            at = text.find(brk, end)
    return False


_BASE64_CHARS = re.compile(r"[A-Za-z0-9+/_\-=.]+")


@functools.lru_cache(maxsize=2048)
def _pattern(form: str) -> re.Pattern[str]:
    # a line break as it is, or JSON-escaped (wrapped base64 inside a tool's JSON text), and
    # after a quoted-printable soft line break's `=`; an `=` of the form as quoted-printable
    # writes it too (`=3D`)
    return re.compile(
        r"(?:=?(?:\r?\n|(?:\\r)?\\n))?".join(
            "=(?:3[Dd])?" if c == "=" else re.escape(c) for c in form
        )
    )


def forget() -> None:
    """Let go of the texts kept joined (after masking a text whole)."""
    _unwrapped.cache_clear()
