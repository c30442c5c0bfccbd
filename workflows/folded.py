"""A secret in another letter case, or with any of its characters percent-encoded.

The known forms (`redaction.secret_forms`) match a key as a server echoes it
whole: as it is, percent-encoded as `quote` writes it, in one case of hex. A
key also comes back upper-cased (a gateway's error shouting what it was sent),
and with every byte percent-encoded, in hex of either case or a mix (an encoder
escaping all it writes, `%73%6B%2d...`): no known form matched either. Each
character of the secret here matches as it is or as its UTF-8 bytes
percent-encoded, in any letter case. Pure functions over strings, as
`redaction`'s.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote


def mask_folded(text: str, secret: str, mask: str) -> str:
    """`text` with `secret` masked in any letter case, any of its characters percent-encoded."""
    if "%" in secret:  # a percent-encoded form: its characters decoded are the secret's own
        return text
    # a quick test before the pattern (slow on long texts): the text decoded and lowered holds it
    if secret.lower() not in _folded(text):
        return text
    return _pattern(secret).sub(mask, text)


# one text is tested against every known form in turn; only the last is kept (a tool
# result of megabytes and its copy, held until `forget` or the next text)
@functools.lru_cache(maxsize=1)
def _folded(text: str) -> str:
    return (unquote(text, errors="replace") if "%" in text else text).lower()


# one pattern per known form, as `redaction._escaped`
@functools.lru_cache(maxsize=2048)
def _pattern(secret: str) -> re.Pattern[str]:
    parts = []
    for char in secret:
        encoded = "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        parts.append(f"(?:{re.escape(char)}|{re.escape(encoded)})")
    return re.compile("".join(parts), re.IGNORECASE)


def forget() -> None:
    """Let go of the last text tested and its folded copy (after masking a text whole)."""
    _folded.cache_clear()
