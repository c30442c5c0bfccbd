"""A tool's return value written as JSON a piece at a time, letting other threads run.

`json.dumps` writes in C and holds the interpreter's lock until the whole text is
written. A tool returning a few million rows (a query's result: 80 MB of JSON, cut
to 256 kB afterwards) held it for seconds on end, so the thread that beats for the
call could not: the server timed the live call out and gave it to another worker,
which ran the tool again, and every other call of the stalled worker went the same
way (a second paid model request each). The encoder's own Python path
(`iterencode`) writes the same text a value at a time, and the lock passes between
threads as it goes; it costs about 2.5 times the C path's CPU, for what only a huge
value notices.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any


def dumps(value: Any, default: Callable[[Any], Any]) -> str:
    """`json.dumps(value, default=default)`: the same text, written piece by piece."""
    out = io.StringIO()
    write = out.write
    try:
        # not one-shot: the Python path, whose pieces are what lets the lock go
        for piece in json.JSONEncoder(default=default).iterencode(value, _one_shot=False):
            write(piece)
    except RecursionError:
        # nested deeper than the Python path reaches (it takes more frames a level than
        # C's depth count): a value so deep and yet valid is narrow, and C writes it fast
        return json.dumps(value, default=default)
    return out.getvalue()
