"""Secrets out of every text that is stored, shown or logged.

A model endpoint may carry credentials in its URL (`http://user:pw@host/v1`,
`...?api-key=...`), and a provider's error body may echo the API key it was
sent. Error text travels far: into history (the Temporal UI shows an
activity's last failure), worker logs, the JSONL `run_end` and
`RunResult.error`. So it is redacted where it is made: URL userinfo and query
values become `***`, and any known secret (the configured API keys) is masked
wherever it appears. A secret is masked in the forms a server may echo it
in too: percent-encoded, base64 (a Basic `Authorization` header), a URL's
credentials decoded, and in every spelling that reads as one of those
(`canonical`: in any letter case, JSON-escaped, percent-encoded or written as HTML
character references character by character, in full-width letters, with invisible
characters between its letters), all known forms found in one pass over the text.
Pure functions over strings: the worker, the facade and the CLI use the same rules.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

from agentor_temporal.workflows.byte_lists import mask_listed
from agentor_temporal.workflows.canonical import DASH_CHARS, canonical_forms, mask_canonical
from agentor_temporal.workflows.hex_dumps import mask_dumped
from agentor_temporal.workflows.url_runs import sub_urls
from agentor_temporal.workflows.userinfo import mask_raw_passwords, raw_passwords
from agentor_temporal.workflows.wrapped import forget as _forget_wrapped
from agentor_temporal.workflows.wrapped import mask_wrapped

#: What replaces a secret.
MASK = "***"
#: Secrets shorter than this are not masked: masking "a" everywhere would
#: garble every message, and a key that short protects nothing anyway.
MIN_SECRET_CHARS = 6

#: A query parameter outside a full URL ("no route POST /v1/?api-key=...", or a
#: fragment's, "/cb#access_token=..."):
#: servers echo paths, and paths carry the query. Its name may be percent-encoded
#: (`?%74oken=`), as a server decodes it.
_QUERY_VALUE = re.compile(r"([?&#][A-Za-z0-9_.%\-\[\]]+=)([^&\s#'\"<>]+)")
#: Punctuation that ends a sentence rather than the URL it follows.
_TRAILING = ".,;:!?)]}"
#: Header, query and body field names whose values are credentials.
CREDENTIAL_NAME = re.compile(r"key|auth|token|secret|sig|pass|cred|cookie|session", re.I)
#: The last word of a setting's, query parameter's or header's name that says its value is
#: a credential (`credential_name`): `AccountKey`, `api-key`, `X-Amz-Security-Token`,
#: `Password`, `sig`, `Set-Cookie`.
_CREDENTIAL_WORDS = frozenset(
    {
        "apikey",
        "auth",
        "authorization",
        "cookie",
        "credential",
        "credentials",
        "key",
        "keys",
        "pass",
        "passphrase",
        "passwd",
        "password",
        "pat",
        "pwd",
        "secret",
        "session",
        "sig",
        "signature",
        "token",
    }
)
#: The same words glued to the one before (`apikey`, `accesstoken`, `sslpassword`); `token`
#: after any word (Docker's `identitytoken` and `registrytoken`, `bottoken`): no word but
#: a token's name ends so, while `key` ends `hotkey` and `monkey`. And a key's data (a
#: kubeconfig's `client-key-data`, base64 of its PEM private key).
_GLUED_CREDENTIAL = re.compile(
    r"(?:api|access|account|secret|private|signing|shared|client|auth|session|security"
    r"|refresh|master|bearer|id)(?:key|secret)$|(?:password|passwd|passphrase|secret|token)$",
    re.I,
)
#: A name's words: apart (`.`, `_`, `-`, space) or in camel case (`AccountKey`, `SASToken`).
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def credential_name(name: str) -> bool:
    """Whether a setting, query parameter or header named `name` holds a credential: its last
    word says so (`AccountKey`, `Pwd`, `sig`, `client_secret`, `X-Amz-Security-Token`,
    `Set-Cookie`), glued or not (`apikey`, `sslpassword`, `identitytoken`), and a key's data
    (`client-key-data`).

    Not a credential word elsewhere in the name (`credential.helper=manager-core`,
    `authMechanism=SCRAM-SHA-256`, `Authentication=ActiveDirectoryPassword`,
    `SharedAccessKeyName=root`, `TokenCacheStorePath=...`, `max_tokens`): their values are
    settings, and masked as secrets they garbled every text holding them.
    """
    words = _NAME_WORDS.findall(name.strip())
    if not words:
        return False
    if [word.lower() for word in words[-2:]] == ["key", "data"]:
        return True
    return words[-1].lower() in _CREDENTIAL_WORDS or bool(_GLUED_CREDENTIAL.search(name.strip()))


#: Request headers that describe the client or the body, never a credential:
#: every other header value a user configures is taken for a secret (a gateway
#: token may come under any name).
_PLAIN_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "anthropic-version",
        "content-type",
        "http-referer",
        "openai-beta",
        "referer",
        "user-agent",
        "x-title",
    }
)
#: `scheme credentials` in an authorization header (`Bearer <token>`): the
#: credentials alone are echoed as often as the whole value.
_AUTH_VALUE = re.compile(r"([A-Za-z][A-Za-z0-9_.\-]*)\s+(\S+)")
_AUTH_SCHEMES = frozenset({"apikey", "api-key", "basic", "bearer", "key", "sso-key", "token"})


def _redact_url(url: str) -> str:
    tail = ""
    while url and url[-1] in _TRAILING:
        url, tail = url[:-1], url[-1] + tail
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK + tail
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    # a fragment of `name=value` pairs is read as a query is: an OAuth implicit grant's
    # redirect carries its token there (`#access_token=...&token_type=bearer`)
    query, fragment = _masked_pairs(parts.query), _masked_pairs(parts.fragment)
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment)) + tail


def _masked_pairs(query: str) -> str:
    """A query (or a fragment written as one) with each value masked."""
    if "=" not in query:
        return query
    return "&".join(
        f"{pair.split('=', 1)[0]}={MASK}" if "=" in pair else pair for pair in query.split("&")
    )


#: Credentials no one told us of, known by their shape: a JWT, the keys of OpenAI,
#: Anthropic, GitHub, Slack, AWS (access key ids) and Google, Stripe, Hugging Face,
#: GitLab, npm, PyPI, SendGrid, Groq, Replicate, Tavily, DigitalOcean and Shopify, and a
#: Google OAuth access token, whose prefixes say what they are. Masked in error text and
#: log lines (`redact`), not in content, where a token-shaped text may be data.
_SHAPED_KEY = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|[rs]k_(?:live|test)_[A-Za-z0-9]{20,}"
    r"|hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_\-]{20,}|npm_[A-Za-z0-9]{36}"
    r"|pypi-AgE[A-Za-z0-9_\-]{50,}|SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}"
    r"|gsk_[A-Za-z0-9]{40,}|r8_[A-Za-z0-9]{30,}|tvly-(?:dev-)?[A-Za-z0-9]{20,}"
    r"|dop_v1_[a-f0-9]{64}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}|ya29\.[A-Za-z0-9_\-]{20,}"
    r")"
)
#: The credentials after an auth scheme in text (`Authorization: Bearer <token>`, a
#: token no one told us of): masked when they hold a digit or a token character, so
#: words (`Basic authentication failed`) stay.
_SCHEMED = re.compile(r"\b((?:[Bb]earer|BEARER|[Bb]asic|BASIC)\s+)([A-Za-z0-9._~+/=\-]{8,})")


#: A credential header's value (`credential_name`) as a log line or an error quotes it:
#: a pair of reprs (`(b'set-cookie', b'sid=...')`: httpcore's DEBUG line of the response's
#: headers, and a cookie the endpoint sets is a session no one told us of), a dict's item
#: (`'authorization': 'Bearer ...'`, `"x-api-key": "..."`), or a header line
#: (`Set-Cookie: sid=...`).
_QUOTED_HEADER = re.compile(
    r"""(b?(['"])([A-Za-z][A-Za-z0-9_.\-]*)\2\s*[,:]\s*b?(['"]))((?:\\.|(?!\4)[^\\])*)(\4)"""
)
_HEADER_LINE = re.compile(r"(?m)^([ \t]*([A-Za-z][A-Za-z0-9_\-]*)[ \t]*:[ \t]*)(\S[^\r\n]*)$")


def _header_mask(value: str) -> str:
    """What a credential header's value shows: its auth scheme kept (`Bearer ***`)."""
    scheme = _AUTH_VALUE.fullmatch(value.strip())
    if scheme and scheme.group(1).lower() in _AUTH_SCHEMES:
        return f"{scheme.group(1)} {MASK}"
    return MASK


def _mask_header(match: re.Match[str]) -> str:
    if not credential_name(match.group(3)) or match.group(5) in ("", MASK):
        return match.group(0)
    return match.group(1) + _header_mask(match.group(5)) + match.group(6)


def _mask_header_line(match: re.Match[str]) -> str:
    if not credential_name(match.group(2)):
        return match.group(0)
    return match.group(1) + _header_mask(match.group(3))


def _mask_schemed(match: re.Match[str]) -> str:
    token = match.group(2)
    if token.isalpha():
        return match.group(0)
    return match.group(1) + MASK


def redact(text: str, secrets: Iterable[str | None] = (), pieces: bool = False) -> str:
    """`text` with URL userinfo and query values, every given secret, the credentials
    known by their shape (`_SHAPED_KEY`, a token after `Bearer`/`Basic`) and the values of
    credential headers quoted (`_QUOTED_HEADER`, `_HEADER_LINE`) masked (`pieces`: as
    `mask_all`'s)."""
    if not text:
        return text
    text = mask_all(text, secrets, pieces)
    forget_texts()
    text = _masked_shapes(text)
    if "earer" in text or "asic" in text or "EARER" in text or "ASIC" in text:
        text = _SCHEMED.sub(_mask_schemed, text)
    if CREDENTIAL_NAME.search(text):
        text = _QUOTED_HEADER.sub(_mask_header, text)
        if ":" in text:
            text = _HEADER_LINE.sub(_mask_header_line, text)
    if "://" in text:
        # a password holding `#`, `?` or `/` as written: `urlsplit` reads no userinfo there
        text = sub_urls(mask_raw_passwords(text, MASK), _redact_url)
    if "=" in text:
        text = _QUERY_VALUE.sub(_mask_value, text)
    return text


_DASHES_READ = str.maketrans(dict.fromkeys(DASH_CHARS, "-"))


def _masked_shapes(text: str) -> str:
    """`text` with the keys known by their shape masked, their hyphens written as dashes
    too (`sk‑proj‑...`: the non-breaking hyphen GPT models write for `-`, a page's hyphen or
    minus sign), as the known keys' are (`canonical`): read with each dash a `-`, one
    character for one, so a match's place is the same in `text`."""
    if not any(dash in text for dash in DASH_CHARS):
        return _SHAPED_KEY.sub(MASK, text)
    read = text.translate(_DASHES_READ)
    kept, at = [], 0
    for match in _SHAPED_KEY.finditer(read):
        kept += [text[at : match.start()], MASK]
        at = match.end()
    return "".join(kept) + text[at:]


def mask_secret(text: str, secret: str) -> str:
    """`text` with `secret` masked (`mask_all`)."""
    return mask_all(text, (secret,))


def mask_all(text: str, secrets: Iterable[str | None], pieces: bool = False) -> str:
    """`text` with every one of `secrets` masked, in every spelling that reads as it
    (`canonical`: any letter case, JSON escapes, percent-escapes, HTML character
    references, full-width letters, invisible characters between its letters) and
    its base64 split by the line breaks of wrapped base64 (`mask_wrapped`), its bytes
    in a hex dump (`mask_dumped`: `xxd .env`, its digits and its column of characters), and
    its bytes as a list of numbers (`mask_listed`: Go's `[115 107 45 ...]`).

    With `pieces` (a tool's result or error: a text that may be one chunk of a longer
    one), each piece of a secret at the edge of a word too (`key_pieces`). Not for a
    streamed text, whose deltas' ends are no word's edges.

    The text is read once for all of them (`canonical.mask_canonical`): the cost of a
    text grows by one search a known form, not by one pass per spelling a form.
    """
    forms = frozenset(s for s in secrets if s and len(s) >= MIN_SECRET_CHARS)
    if not text or not forms:
        return text
    # a dump's digits first, while its lines are as the dump wrote them
    text = mask_dumped(text, forms)
    # its bytes as a list of numbers (Go's `[]byte`, Java's `Arrays.toString`, `xxd -i`)
    text = mask_listed(text, forms, MASK)
    for form in forms:
        # its base64 split by the line breaks of wrapped base64 (`encodebytes`, MIME, PEM),
        # or a key by a quoted-printable soft line break: first, while the form is whole (a
        # piece of it at a word's edge, masked next, leaves the rest of it)
        text = mask_wrapped(text, form, MASK)
    return mask_canonical(text, canonical_forms(forms), MASK, pieces)


def forget_texts() -> None:
    """Let go of the copies kept while one text is tested against every known form: a
    text masked whole is not tested again, and a tool result may be megabytes."""
    _forget_wrapped()


def _mask_value(match: re.Match[str]) -> str:
    value, tail = match.group(2), ""
    while value and value[-1] in _TRAILING:
        value, tail = value[:-1], value[-1] + tail
    return match.group(1) + MASK + tail


def url_secrets(url: str | None) -> list[str]:
    """The credentials a URL carries: its userinfo, its credential query values
    (`query_credential`: `key=`, `code=`, a key's shape; not `api-version=`)
    and the path segments shaped like a key (`looks_like_key`).

    Remembered as secrets, they are masked wherever they turn up, even in a
    form no URL pattern matches (a client that glued the query into a path).
    """
    if not url:
        return []
    # a password holding `#`, `?`, `/` or a bracket as written, which `urlsplit` misses (or
    # refuses the URL for)
    found: list[str] = raw_passwords(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return [s for s in found if len(s) >= MIN_SECRET_CHARS]
    # as written (percent-encoded) and as sent: decoded, and the
    # `user:password` an HTTP client puts base64-encoded into a Basic header
    if parts.username:
        found += [parts.username, unquote(parts.username)]
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    if parts.username or parts.password:
        found.append(f"{unquote(parts.username or '')}:{unquote(parts.password or '')}")
    # the fragment's too (an OAuth redirect's `#access_token=`)
    for pair in [*parts.query.split("&"), *parts.fragment.split("&")]:
        if "=" in pair:
            name, value = pair.split("=", 1)
            if query_credential(unquote_plus(name), unquote_plus(value)):
                found += [value, unquote_plus(value)]
    # a gateway that takes its key in the path (`https://gw.example/<key>/v1`)
    for segment in parts.path.split("/"):
        if looks_like_key(unquote(segment)):
            found += [segment, unquote(segment)]
    return list(dict.fromkeys(s for s in found if len(s) >= MIN_SECRET_CHARS))


#: Query names that carry a credential though `CREDENTIAL_NAME` does not say so:
#: Azure Functions' function key (`?code=`).
_CREDENTIAL_QUERY_NAMES = frozenset({"code"})
#: A key's characters (`looks_like_key`): base64, URL-safe base64, hex, dashes.
_KEYLIKE = re.compile(r"[A-Za-z0-9_\-+/=.~]{20,}")


def query_credential(name: str, value: str) -> bool:
    """Whether a query value of a model endpoint's URL is a credential.

    When its name says so (as for `extra_query`: `key`, `api-key`, `sig`, ...,
    and Azure Functions' `code`), or its value looks like a key (long, letters
    and digits mixed). Any other value (`api-version=2024-06-01`) is plain
    data: masked as a secret it would be masked in every answer, tool result
    and final output that holds it.
    """
    if credential_name(name) or name.strip().lower() in _CREDENTIAL_QUERY_NAMES:
        return True
    return looks_like_key(value)


def looks_like_key(value: str) -> bool:
    """Whether `value` looks like a generated key: 20+ token characters, letters
    and digits both, their kind (digit, lower, upper, other) changing at least
    every fifth character: not words and dates (`2024-06-01-preview`)."""
    if not _KEYLIKE.fullmatch(value):
        return False
    digits = sum(c.isdigit() for c in value)
    letters = sum(c.isalpha() for c in value)
    if not digits or not letters:
        return False
    # a key's characters change kind often; a name's or a date's come in long runs
    changes = sum(1 for i in range(1, len(value)) if _kind(value[i - 1]) != _kind(value[i]))
    return changes >= len(value) // 5


def _kind(char: str) -> int:
    return 0 if char.isdigit() else 1 if char.islower() else 2 if char.isupper() else 3


def header_secrets(name: str, value: object) -> list[str]:
    """The credentials a request header carries (none for `Content-Type` and the like).

    The whole value, the token after an auth scheme (`Bearer <token>`), the
    `user:password` and password inside a Basic one, and each cookie's value.
    A value given as bytes (a key read from a file in binary mode) is sent as
    it is, so it is a credential as its text.
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or name.strip().lower() in _PLAIN_HEADERS:
        return []
    found = [value.strip()]
    scheme = _AUTH_VALUE.fullmatch(value.strip())
    if scheme and (scheme.group(1).lower() in _AUTH_SCHEMES or CREDENTIAL_NAME.search(name)):
        token = scheme.group(2)
        found.append(token)
        if scheme.group(1).lower() == "basic":
            try:
                pair = base64.b64decode(token, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                pair = ""
            found += [pair, pair.partition(":")[2]]
    if name.strip().lower() == "cookie":
        for cookie in value.split(";"):
            found.append(cookie.partition("=")[2].strip())
    return list(dict.fromkeys(s for s in found if len(s) >= MIN_SECRET_CHARS))


#: Shortest piece of a secret's base64 inside a longer base64 text that is
#: masked (12 bytes of the secret): a shorter run of base64 letters could be
#: anything, and masking it would garble unrelated text.
MIN_BASE64_PIECE = 16


_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")


def secret_forms(secret: str) -> list[str]:
    """`secret` and the encodings a server may echo it in.

    Percent-encoded (as `quote` and `quote_plus` write it: a key sent in a
    query or a form; in either case of hex; and twice) and base64 (standard and
    URL-safe, padded or not: how a Basic header carries `user:password`),
    and the secret's base64 inside a longer base64 text (an env file holding
    the key, base64'd as a Kubernetes secret keeps it): at each of base64's
    three alignments, the characters that encode the secret's bytes alone,
    all but at most two bytes at each end (`_base64_pieces`), of its UTF-8 and of its
    UTF-16, and of a text holding its base64 or percent-encoding (`_base64_again`); and hex,
    of its UTF-8 and its UTF-16 (either byte order).
    """
    forms = [secret, quote(secret), quote(secret, safe=""), quote_plus(secret)]
    # encoded twice: a URL holding it put in another's query (a redirect's `?next=`)
    forms += [quote(quote(secret, safe=""), safe=""), quote_plus(quote_plus(secret))]
    # and with lower-case hex, as .NET's `HttpUtility.UrlEncode` writes it (`%2f`)
    forms += [_PERCENT_HEX.sub(lambda m: m.group(0).lower(), form) for form in forms[1:]]
    raw = secret.encode("utf-8", "surrogatepass")
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        forms += [encoded.decode(), encoded.decode().rstrip("=")]
    forms += _base64_pieces(raw)
    # its UTF-16's base64 inside a longer one's: PowerShell's `-EncodedCommand` (a process
    # list's command line setting the key), a Windows file (UTF-16) sent as a mail attachment
    forms += _base64_pieces(secret.encode("utf-16-le", "surrogatepass"))
    forms += _base64_again(secret, raw)
    # hex, in either case: a dump of the bytes holding it; and of its UTF-16 (a Windows
    # file's, PowerShell's output), whose NULs the canonical pass reads as nothing in text
    forms += [raw.hex(), raw.hex().upper()]
    utf16 = secret.encode("utf-16-le", "surrogatepass").hex()
    if secret.isascii():
        # `73006b00...`: without its last NUL, inside either byte order's hex
        forms.append(utf16[:-2])
    else:
        forms += [utf16, secret.encode("utf-16-be", "surrogatepass").hex()]
    return list(dict.fromkeys(forms))


def _base64_again(secret: str, raw: bytes) -> list[str]:
    """The pieces of a longer base64 text that encode a text holding the secret's base64 or
    its percent-encoding (standard alphabet: Kubernetes writes a secret's data so).

    A Docker config's `auth` is base64 of `user:token`, and a Kubernetes secret holding the
    config is base64 of it again (`kubectl get secret regcred -o yaml`'s
    `.dockerconfigjson`); a URL's password is percent-encoded (`p%2Fss` for `p/ss`) and a
    secret holding the URL (`DATABASE_URL`) is base64 of that. Neither held any piece of
    the secret's own base64, so the token showed to anyone decoding twice (or once). The
    inner text's pieces are of the standard alphabet too; at most 12 more forms a secret.
    """
    texts = [piece.encode() for piece in _base64_pieces(raw, (base64.b64encode,))]
    quoted = quote(secret, safe="")
    if quoted != secret:
        texts.append(quoted.encode())
    pieces = []
    for text in texts:
        pieces += _base64_pieces(text, (base64.b64encode,))
    return pieces


def _base64_pieces(
    raw: bytes,
    alphabets: tuple[Callable[[bytes], bytes], ...] = (base64.b64encode, base64.urlsafe_b64encode),
) -> list[str]:
    """The base64 characters that encode `raw` alone when it begins 0, 1 or 2 bytes into a
    3-byte group of a longer text (both alphabets, unless told which)."""
    pieces = []
    for shift in range(3):
        # the groups wholly inside `raw`: from the first boundary on, to the last
        start = (3 - shift) % 3
        whole = (len(raw) - start) // 3 * 3
        if whole * 4 // 3 < MIN_BASE64_PIECE:
            continue
        piece = raw[start : start + whole]
        for encode in alphabets:
            pieces.append(encode(piece).decode())
    return pieces


def redact_url(url: str) -> str:
    """A URL safe to show: userinfo and query values masked."""
    return _redact_url(mask_raw_passwords(url, MASK))


def redact_address(address: str) -> str:
    """A server address (`host:port`, or a URL) safe to show: `user:password@` masked.

    A Temporal address is given as `host:port`, without a scheme, so the URL
    pattern of `redact` does not see its userinfo.
    """
    if "://" in address:
        return redact_url(address)
    if "@" not in address:
        return address
    return MASK + "@" + address.rsplit("@", 1)[1]


def address_secrets(address: str | None) -> list[str]:
    """The credentials a server address carries (`url_secrets`, with or without a scheme)."""
    if not address:
        return []
    return url_secrets(address if "://" in address else "//" + address)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (URLs and `secrets()`).

    Attached to the loggers that may print an endpoint's URL (ours, `httpx`'s
    request lines, `openai`'s); the record's message is formatted once here
    and replaced by its redacted form.
    """

    def __init__(self, secrets: Iterable[str] | None = None) -> None:
        super().__init__()
        self._secrets = secrets if secrets is not None else ()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is logging's to report
            return True
        cleaned = redact(message, list(self._secrets))
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
