"""Every known secret found in one pass over a text, in any of the forms it may be written in.

A key comes back from a server, a tool or an HTML error page written in many ways
that all read as the key: in another letter case, percent-encoded (`%73%6B...`),
JSON-escaped (`\\u0073`, `\\/`; escaped again, `\\\\/`: JSON text in JSON or a repr),
as HTML character references (`&#115;`, `&#x73;`, `&lowbar;`; escaped again, `&amp;#x2f;`:
HTML quoted in HTML or XML), in full-width or other
compatibility letters (`ｓｋ－...`), with invisible characters between its letters
(zero-width space, word joiner, soft hyphen), or as UTF-16 text read as bytes (a NUL
beside each letter: `s\\x00k\\x00`, as a Windows file or PowerShell's output holds it,
decoded as Latin-1 or UTF-8, or shown as the `\\x00` escapes of a bytes repr). Searching
each text for each known form in each of these ways scanned a text many times per form.
Instead the text is mapped once to a canonical form (`Canonical`: escapes and references decoded,
compatibility letters folded by NFKC, dashes read as `-`, invisible (default-ignorable)
characters and NULs dropped, lower case) with an index back to the
original positions, and each known form's canonical form is searched for in it
(`find`, one scan a form); a match is masked over the original characters it
came from; in a tool's result, so is a piece of one at a word's edge (`key_pieces`: a
key cut in two by a chunked read). Pure functions over strings, as `redaction`'s.

Not masked: a key spelled out with visible separators (`s k - a b c`), reversed or
in an encoding no reader decodes at sight (base32, rot13): deliberate disguises,
which no list of forms can close, and whose search would mask ordinary text.
"""

from __future__ import annotations

import bisect
import functools
import html.entities
import json
import re
import unicodedata

from agentor_temporal.workflows.key_pieces import piece_spans

#: A non-ASCII character's UTF-8 bytes percent-encoded (`%C3%A4`).
_UTF8_ESCAPED = r"%[C-Fc-f][0-9A-Fa-f](?:%[89ABab][0-9A-Fa-f]){1,3}"
#: A terminal's control sequence, shown as nothing: a colour or style (`ESC[01;31m`, `ESC[K`:
#: `grep --color=always` around its match, `ls --color`, a colouring logger) or a character
#: set (`ESC(B`: `tput sgr0`); as it is written or escaped (`\\u001b[31m`, a repr's
#: `\\x1b[31m`). A key a command coloured in part reads whole on the terminal.
_TERMINAL = (
    r"(?:\x1b|(?<!\\)\\+(?:u001[bB]|x1[bB]))(?:\[[0-?]{0,32}[ -/]{0,8}[@-~]|[()*+][0-9A-Za-z])"
)
_TERMINAL_RE = re.compile(_TERMINAL)
#: A character reference's `&`, itself escaped again any number of times (`&amp;#115;`,
#: `&#38;#x2f;`): HTML quoted in HTML or XML (an Atom feed's `type="html"` content, a SOAP
#: fault's XML held as text, a page showing a page's source) escapes each reference's `&`
#: once more. Or the `&` JSON-escaped (`\\u0026#x2F;`): Go's `encoding/json` and .NET's
#: System.Text.Json escape every `&` so by default, a JSON answer holding HTML (a build
#: log's) holds its references so. Read from the run's first `&` (one `&` a run: read once);
#: a token of its own, tried before a plain reference's: a plain `&lt;` costs no more.
_AMPS = r"(?:(?:amp|AMP|#0{0,5}38|#[xX]0{0,4}26);)"
_AMPED = rf"(?:&{_AMPS}+|(?<!\\)\\+u0026{_AMPS}*)"
_AMP_RUN = re.compile(rf"(?:&{_AMPS}*|\\+u0026{_AMPS}*)(?=[#A-Za-z])")
#: One written character (or escape) that may stand for another: a percent-escape, a JSON
#: escape, an HTML character reference, a terminal's control sequence, quoted-printable's
#: `=3D` (a mail's `=`: a base64 key's padding), or a run of non-ASCII characters.
_TOKEN = re.compile(
    _TERMINAL + "|" + _UTF8_ESCAPED + r"|%[0-9A-Fa-f]{2}|=3[Dd]"
    r"|" + _AMPED + r"(?:#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});?|[A-Za-z][A-Za-z0-9]{1,31};)"
    r"|(?<!\\)\\+(?:u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|[^\\\r\n])"
    r"|\\u[0-9A-Fa-f]{4}|\\{1,2}x[0-9A-Fa-f]{2}|\\[^\r\n]"
    r"|&#[0-9]{1,7};?|&#[xX][0-9A-Fa-f]{1,6};?|&[A-Za-z][A-Za-z0-9]{1,31};"
    r"|[^\x00-\x7f]+|\x00+"
)
#: Unicode's default-ignorable characters, shown as nothing (or as a blank) wherever
#: they stand: the format characters (`Cf`: zero-width space, soft hyphen, word joiner,
#: tags) and those of other categories (variation selectors, the combining grapheme
#: joiner, Hangul fillers, Mongolian and Khmer invisible marks, shorthand format
#: controls, musical formatting characters).
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0"
    "\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
_JSON_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
#: The shortest canonical form searched for: a shorter one (a secret made of escapes and
#: invisible characters) would be found in ordinary text.
MIN_CANONICAL = 6
#: The dashes a key's `-` may be written as (NFKC keeps them apart): the hyphen and the
#: non-breaking hyphen, which models write for `-` (GPT's `sk\u2011proj\u2011...` reads as
#: the key and is pasted as one), and the minus sign of typeset text. Not the en and figure
#: dashes: nothing writes a word's hyphen so.
DASH_CHARS = "\u2010\u2011\u2212"
_DASHES = str.maketrans(dict.fromkeys(DASH_CHARS, "-"))


class Canonical:
    """A text's canonical form and the way back to the text's own positions.

    `segments` holds, for each piece of the canonical text, its start there, its start
    in the original text, and either None (a plain piece: the same length in both) or
    the end in the original text of the escape or character it came from.
    """

    def __init__(self, text: str, charset: frozenset[str] | None = None) -> None:
        """`charset`: the characters of the forms searched for; an escape or reference of
        any other character is left as it is written (none of them can be part of a
        match), so a text dense in them (`%20`, `\\n`, `&amp;`) costs little more."""
        self.text = text
        # a dash as a `-` (one character for one: positions unchanged), by `replace`, not a
        # token each: a model's text holds a non-breaking hyphen in every other sentence
        for dash in DASH_CHARS:
            if dash in text:
                text = text.replace(dash, "-")
        if (
            text.isascii()
            and "%" not in text
            and "\\" not in text
            and "&" not in text
            and "\x00" not in text
            and "\x1b" not in text
            and "=3" not in text
        ):
            self.canon = text.lower()
            self._starts = [0]
            self._segments: list[tuple[int, int | None]] = [(0, None)]
            return
        pieces: list[str] = []
        starts: list[int] = []
        segments: list[tuple[int, int | None]] = []
        at = 0  # in the canonical text

        def piece(canon: str, start: int, end: int | None) -> None:
            nonlocal at
            pieces.append(canon)
            starts.append(at)
            segments.append((start, end))
            at += len(canon)

        def plain(start: int, end: int) -> None:
            # a plain piece keeps its length: a letter whose lower case is longer (`İ`,
            # two characters) is a piece of its own, or every later position would drift
            run = text[start:end]
            lowered = run.lower()
            if len(lowered) == len(run):
                piece(lowered, start, None)
                return
            pos = 0  # rare (a Turkish text): one character at a time
            for i, char in enumerate(run):
                if len(char.lower()) != 1:
                    if i > pos:
                        piece(run[pos:i].lower(), start + pos, None)
                    piece(char.lower(), start + i, start + i + 1)
                    pos = i + 1
            if pos < len(run):
                piece(run[pos:].lower(), start + pos, None)

        decoded: dict[str, str | tuple[str, ...] | None] = {}
        pos = 0
        for match in (_TOKEN if charset is None else _tokens(charset)).finditer(text):
            token = match.group(0)
            if token in decoded:
                canon = decoded[token]
            else:
                canon = decoded[token] = _token(token, charset)
            if canon is None:  # as written: part of the plain run around it
                continue
            start, end = match.span()
            if start > pos:
                plain(pos, start)
            if isinstance(canon, str):
                piece(canon, start, end)
            else:
                for i, char in enumerate(canon):
                    piece(char, start + i, start + i + 1)
            pos = end
        if pos < len(text):
            plain(pos, len(text))
        self.canon = "".join(pieces)
        self._starts = starts or [0]
        self._segments = segments or [(0, None)]

    def start(self, at: int) -> int:
        """The original position of canonical position `at`'s character."""
        i = bisect.bisect_right(self._starts, at) - 1
        origin, end = self._segments[i]
        return origin + (at - self._starts[i]) if end is None else origin

    def end(self, at: int) -> int:
        """The original position just past the character canonical position `at - 1` came from."""
        i = bisect.bisect_right(self._starts, at - 1) - 1
        origin, end = self._segments[i]
        return origin + (at - self._starts[i]) if end is None else end

    def visible(self) -> str:
        """The text without what reads as nothing: each invisible character, and each
        escape or reference of one (`%E2%80%8B`, `&ZeroWidthSpace;`, `\\u200b`)."""
        segments, starts = self._segments, [*self._starts, len(self.canon)]
        origins = [origin for origin, _ in segments[1:]] + [len(self.text)]
        return "".join(
            self.text[origin : origins[i]]  # a piece runs to the next one's origin
            for i, (origin, end) in enumerate(segments)
            if end is None or starts[i + 1] > starts[i]
        )

    def spans(self, forms: tuple[str, ...], pieces: bool = False) -> list[tuple[int, int]]:
        """The original spans where any of the canonical `forms` is found, merged; with
        `pieces`, and where a piece of one is at a word's edge (`key_pieces`)."""
        canon = self.canon
        found = piece_spans(canon, forms) if pieces else []
        for form in forms:
            at = canon.find(form)
            while at >= 0:
                found.append((at, at + len(form)))
                at = canon.find(form, at + 1)
        if not found:
            return []
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return [(self.start(s), self.end(e)) for s, e in merged]


def _token(token: str, charset: frozenset[str] | None) -> str | tuple[str, ...] | None:
    """What one token (`_TOKEN`) is in the canonical text: a text, one text a character
    (a non-ASCII run), or None to leave it as it is written (`Canonical`'s `charset`)."""
    canon: str | None
    if token[0] == "\x1b" or (token[0] == "\\" and _TERMINAL_RE.fullmatch(token)):
        return ""  # a terminal's control sequence: nothing on the screen
    if token[0] == "=":
        canon = "="  # quoted-printable's `=3D`
    elif token[0] == "%" and len(token) > 3:
        try:
            canon = _char(bytes.fromhex(token.replace("%", "")).decode())
        except ValueError:  # not UTF-8: as it is written
            return None
    elif token[0] == "%":
        byte = int(token[1:], 16)
        # a byte of no UTF-8 character's escapes stays as it is written
        canon = _char(chr(byte)) if byte < 0x80 else None
    elif token[0] == "\\" and _AMP_RUN.match(token) is None:
        canon = _char(_unescape(token))
    elif token[0] in "&\\":
        reference = _reference(token)
        canon = _char(reference) if reference != token else None
    elif unicodedata.normalize("NFKC", token).lower().translate(
        _DASHES
    ) == token and not _has_format(token):
        return None
    else:
        return tuple(_char(char) for char in token)
    if canon is None or charset is None or not canon:
        return canon
    return canon if all(char in charset for char in canon) else None


@functools.lru_cache(maxsize=4096)
def _char(char: str) -> str:
    """One character as the canonical text holds it: NFKC-folded, lower case, a dash as
    `-` (`_DASHES`), and nothing for an invisible format character (zero-width space,
    soft hyphen, word joiner)."""
    if char.isascii():
        return "" if char == "\x00" else char.lower()
    folded = unicodedata.normalize("NFKC", char).lower().translate(_DASHES)
    return "".join(c for c in folded if not _ignorable(c))


def _ignorable(char: str) -> bool:
    """Whether `char` is shown as nothing: a default-ignorable character (`_IGNORABLE`)."""
    return (
        unicodedata.category(char) == "Cf" or char == "\x00" or _IGNORABLE.match(char) is not None
    )


def _has_format(run: str) -> bool:
    return any(_ignorable(c) for c in run)


def _unescape(token: str) -> str:
    # `\x73`, JSON's `\\x73` (a repr's); `\\\\/`: an escape escaped again, and again
    body = token.lstrip("\\") or "\\"
    if len(body) == 3 and body[0] == "x":
        return chr(int(body[1:], 16))
    if len(body) == 5 and body[0] == "u":
        return chr(int(body[1:], 16))  # a surrogate alone: a pair's halves are two escapes
    return _JSON_ESCAPES.get(body[0], body[0])


def _reference(token: str) -> str:
    run = _AMP_RUN.match(token)
    if run is not None and run.end() > 1:  # its `&` escaped: the reference, if it is one
        inner = "&" + token[run.end() :]
        decoded = _reference(inner)
        return token if decoded == inner else decoded
    if token[1] == "#":
        number = token[2:].rstrip(";")
        code = int(number[1:], 16) if number[:1] in "xX" else int(number)
        return chr(code) if 0 < code <= 0x10FFFF else "\ufffd"
    return html.entities.html5.get(token[1:], token)


def canonical(text: str) -> str:
    """`text` in its canonical form (see the module's docstring)."""
    return Canonical(text).canon


def _split_astral(text: str) -> str:
    """`text` with each character past U+FFFF as its UTF-16 surrogates: a text's JSON
    escapes of one are decoded one by one."""
    out = []
    for char in text:
        code = ord(char) - 0x10000
        out.append(char if code < 0 else chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF)))
    return "".join(out)


@functools.lru_cache(maxsize=64)  # one set of known forms a process, changing rarely
def canonical_forms(forms: frozenset[str]) -> tuple[str, ...]:
    """The distinct canonical forms of `forms` to search for, longest first.

    With each form's JSON-escaped spelling too when it differs (a secret holding a
    backslash or a quote: its escape decoded is the character, not its escape).
    """
    found: dict[str, None] = {}
    for form in sorted(forms):
        for spelling in (form, json.dumps(form, ensure_ascii=False)[1:-1]):
            canon = canonical(spelling)
            if len(canon) >= MIN_CANONICAL:
                found[canon] = None
            split = _split_astral(canon)
            if split != canon and len(split) >= MIN_CANONICAL:
                found[split] = None
    return tuple(sorted(found, key=len, reverse=True))


@functools.lru_cache(maxsize=64)
def charset(forms: tuple[str, ...]) -> frozenset[str]:
    return frozenset("".join(forms))


#: The non-ASCII characters that may read as an ASCII one, or as nothing: full-width and
#: half-width forms, invisible format characters (soft hyphen, zero-width space and
#: joiners, direction marks, word joiner, byte-order mark, tags), superscripts and
#: subscripts, letterlike symbols (the Kelvin sign), enclosed alphanumerics, ligatures,
#: mathematical alphanumerics (the dashes read as `-` are replaced before: `_DASHES`). Other
#: non-ASCII text (accented letters, CJK, emoji) is not looked at unless a known form holds
#: non-ASCII characters itself.
_LOOKALIKES = (
    "\u00aa\u00ad\u00b2\u00b3\u00b9\u00ba\u034f\u0600-\u0605\u061c\u06dd\u070f"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\u2000-\u200f\u2024-\u2026\u202a-\u202f\u205f-\u209f\u2100-\u214f\u2460-\u24ff"
    "\ufb00-\ufb06\ufe00-\ufe0f\ufeff\uff01-\uffef\ufff9-\ufffb"
    "\U0001d400-\U0001d7ff\U0001f100-\U0001f1ff\U000e0000-\U000e0fff"
)
#: The same, as the hex of a JSON escape (`\\uff53`), and the halves of a surrogate pair.
_LOOKALIKE_ESCAPES = (
    "00a[ad]|00b[239a]|034f|060[0-5]|061c|06dd|070f|115f|1160|17b[45]|180[b-f]|3164|200[0-9a-f]|201[01]|2212|202[4-6a-f]|205f|20[6-9][0-9a-f]"
    "|21[0-4][0-9a-f]|24[6-9a-f][0-9a-f]|fb0[0-6]|fe0[0-9a-f]|feff|ff[0-9a-e][0-9a-f]"
    "|fff[0-9ab]|d[89a-f][0-9a-f]{2}"
)


@functools.lru_cache(maxsize=64)
def _tokens(charset: frozenset[str]) -> re.Pattern[str]:
    """`_TOKEN` narrowed to what may stand for a character of `charset` or for nothing (an
    invisible character): a text's JSON escapes of line breaks and quotes, its `%20`s,
    `&amp;`s and accented letters are then not even looked at (a JSON text is dense in
    them)."""
    # a letter matched in any case: its upper case escaped (`%41`, `\\u0041`) too
    ascii_chars = sorted({v for c in charset if c.isascii() for v in (c, c.upper())})
    others = sorted({v for c in charset if not c.isascii() for v in (c, c.upper(), c.title())})
    hexes = "|".join(f"{ord(c):02x}" for c in ascii_chars) or "(?!)"
    names = sorted(
        {name for char, found in _named().items() if char in charset or not char for name in found},
        key=len,
        reverse=True,
    )
    # `\\n` is a line break, not an `n`
    escaped = "".join(re.escape(c) for c in ascii_chars if c not in "bfnrtuBFNRTU")
    units = "|".join(f"{ord(c):04x}" for c in others if len(c) == 1 and ord(c) <= 0xFFFF)
    # not a backslash: the run is the escape's, read to the character it escapes
    run_escaped = escaped.replace(re.escape("\\"), "")
    escape = (
        rf"u(?i:00(?:{hexes}|00)|{_LOOKALIKE_ESCAPES}{'|' + units if units else ''})"
        rf"|x(?i:{hexes}|00)" + (rf"|[{run_escaped}]" if run_escaped else "")
    )
    parts = [
        _TERMINAL,  # before the escapes: `\\u001b[31m` is one control sequence, not an ESC
        _UTF8_ESCAPED,  # a non-ASCII letter's or an invisible character's UTF-8
        # a NUL reads as nothing, whichever way it is written (UTF-16 text read as bytes)
        rf"%(?i:{hexes}|00)",
        # an escape whose backslash was escaped again, any number of times (`\\\\/`: JSON
        # text quoted in JSON or in a repr), read from its run's first backslash: read
        # from each, a long run of them would be read again and again
        rf"(?<!\\)\\+(?:{escape})",
        # one escape alone inside such a run (a backslash of a secret's own, escaped)
        rf"\\u(?i:00(?:{hexes}|00)|{_LOOKALIKE_ESCAPES}{'|' + units if units else ''})",
        rf"\\{{1,2}}x(?i:{hexes}|00)",
        *([rf"\\[{escaped}]"] if escaped else []),
        r"\x00+",
        # a reference escaped again, or its `&` JSON-escaped (`\\u0026`: none of the escapes
        # above unless a key holds `&`), before a plain one (`&#38;#x2f;` is `/`, not `&` and
        # what follows); its own alternative: a plain `&lt;` or `\\n` costs little more
        _AMPED
        + r"(?:#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});?"
        + "".join("|" + re.escape(n) for n in names)
        + ")",
        r"&#[0-9]{1,7};?|&#[xX][0-9A-Fa-f]{1,6};?",
        *([r"&(?:" + "|".join(re.escape(n) for n in names) + ")"] if names else []),
        "[" + _LOOKALIKES + "".join(re.escape(c) for c in others if len(c) == 1) + "]+",
    ]
    if "=" in charset:  # a form holding `=` (base64's padding): a mail's `=3D` for it
        parts.append("=3[Dd]")
    # the lookahead lets the scan skip to a character a token may begin with
    begins = r"%\\&\x00\x1b\x80-\U0010ffff" + ("=" if "=" in charset else "")
    return re.compile(f"(?=[{begins}])(?:" + "|".join(parts) + ")")


@functools.lru_cache(maxsize=1)
def _named() -> dict[str, list[str]]:
    """HTML's named character references (with their `;`), by the canonical text of what
    they stand for."""
    found: dict[str, list[str]] = {}
    for name, value in html.entities.html5.items():
        if name.endswith(";"):
            found.setdefault("".join(_char(c) for c in value), []).append(name)
    return found


def mask_canonical(text: str, forms: tuple[str, ...], mask: str, pieces: bool = False) -> str:
    """`text` with each place reading as one of `forms` (`canonical_forms`) masked; with
    `pieces`, each piece of one at a word's edge too (`key_pieces`)."""
    if not text or not forms:
        return text
    spans = Canonical(text, charset(forms)).spans(forms, pieces)
    if not spans:
        return text
    out, pos = [], 0
    for start, end in spans:
        if start < pos:  # two matches over one escape: already masked
            start = pos
        if end <= start:
            continue
        out += [text[pos:start], mask]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def begun(text: str, forms: tuple[str, ...]) -> int:
    """The length of the longest end of `text` that may begin one of `forms`: its canonical
    end a proper beginning of a form, or an escape or reference cut short."""
    cut = _PARTIAL.search(text)
    held_from = cut.start() if cut else len(text)
    view = Canonical(text[:held_from], charset(forms))
    canon = view.canon
    longest = 0
    for form in forms:
        for size in range(min(len(form) - 1, len(canon)), longest, -1):
            if canon.endswith(form[:size]):
                longest = size
                break
    if longest:
        held_from = min(held_from, view.start(len(canon) - longest))
    return len(text) - held_from


#: An escape or reference cut short at the end of a text (the next delta may finish it), with
#: the backslashes before it (escaped again, up to three times: `\\\\u00`); no more, or a
#: reply streaming a long run of them would be held, and read again, whole; a terminal's
#: control sequence cut short too; and a reference with the escaped `&`s before it (escaped
#: again, up to four times: `&amp;#x2`), or its `&` JSON-escaped (`\\u0026#x2`).
_PARTIAL = re.compile(
    r"(?:(?:%[C-Fc-f][0-9A-Fa-f](?:%[89ABab][0-9A-Fa-f]){0,2})?%[0-9A-Fa-f]?"
    r"|%[C-Fc-f][0-9A-Fa-f](?:%[89ABab][0-9A-Fa-f]){0,2}|\\{1,8}(?:u[0-9A-Fa-f]{0,3}|x[0-9A-Fa-f]?)?"
    r"|\x1b(?:\[[0-?]{0,32}[ -/]{0,8}|[()*+])?"
    r"|(?:&|\\{1,8}u0026)(?:(?:amp|AMP|#0{0,5}38|#[xX]0{0,4}26);){0,4}"
    r"(?:#[xX]?[0-9A-Fa-f]{0,6}|[A-Za-z][A-Za-z0-9]{0,31})?)\Z"
)
