"""`url_runs.sub_urls` finds the URLs the plain pattern finds, reading each run once."""

from __future__ import annotations

import random
import re
import time

from agentor_temporal.activities import _redact
from agentor_temporal.workflows.url_runs import sub_urls

#: the pattern it replaces (quadratic on a long run of scheme characters)
PLAIN = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")


def _marked(url: str) -> str:
    return f"<{url}>"


def test_the_same_urls_as_the_plain_pattern() -> None:
    pieces = ["a", "Z", "9", ".", "+", "-", "_", "é", ":", "/", "://", " ", "'", "x.y", "http"]
    rng = random.Random(18)
    texts = [
        "see https://u:p@host/x?token=1, then 9://a.b,http://c and -http://d _http://e",
        "éhttp://f a.b.c://g 1a.http://h .http://i",
    ]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(5000)]
    for text in texts:
        assert sub_urls(text, _marked) == PLAIN.sub(lambda m: _marked(m.group(0)), text), text


def test_a_long_dotted_run_is_read_once() -> None:
    """80 kB of 'a.a.a...' and a URL: 7 s in the plain pattern's C search (the lock held)."""
    text = "a." * 40_000 + " see http://u:secret@host/"
    started = time.monotonic()
    cleaned = _redact.clean(text)
    assert time.monotonic() - started < 2.0
    assert "secret" not in cleaned and cleaned.startswith("a.a.a.")


def test_a_long_chain_of_schemeless_runs_is_read_once() -> None:
    """'0://' 100,000 times in a row: a call for each passed the recursion limit (3,000 did),
    and searching the rest again for each was quadratic."""
    text = "0://" * 100_000 + "http://u:secret@host/ a"
    started = time.monotonic()
    cleaned = _redact.clean(text)
    assert time.monotonic() - started < 5.0
    assert cleaned.startswith("0://0://") and cleaned.endswith(" a") and "secret" not in cleaned
    short = "x 0://" * 2 + "0://" * 3 + "h://y ://z 0://"
    assert sub_urls(short, _marked) == PLAIN.sub(lambda m: _marked(m.group(0)), short)
