"""Run ids: one rule at every entry point, by what a file system accepts.

The id names `<id>.jsonl` (255 bytes at most on common file systems) and the
name a damaged log is set aside under, so it is limited by its UTF-8 length,
not its characters; ids that are only whitespace, or that carry Unicode
control, format or separator characters (C0/C1 controls, bidi overrides,
zero-width characters) are refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentor_temporal import Agentor
from agentor_temporal.store import Event, FileStore, MemoryStore, validate_run_id

#: store.base.MAX_RUN_ID_BYTES, spelled out: the limit is part of the contract
MAX_RUN_ID_BYTES = 200

REFUSED = {
    "200 emoji": "\U0001f600" * 200,
    "201 ascii": "a" * 201,
    "51 four-byte chars": "\U0001f600" * 51,
    "only spaces": "   ",
    "only a tab": "\t",
    "only ideographic spaces": "\u3000\u3000",
    "C1 next-line": "run\u0085id",
    "C1 control": "run\u009bid",
    "bidi override": "evil\u202etxt.exe",
    "bidi isolate": "a\u2066b",
    "zero-width space": "a\u200bb",
    "zero-width joiner": "a\u200db",
    "byte-order mark": "\ufeffabc",
    "line separator": "a\u2028b",
    "paragraph separator": "a\u2029b",
    "lone surrogate": "a\udcffb",
    "DEL": "a\x7fb",
    "NUL": "a\x00b",
    "newline": "a\nb",
}

ACCEPTED = [
    "cabc9046ac5040298aa362c0d6d2c5c5",
    "order-42_retry",
    "a" * MAX_RUN_ID_BYTES,
    "\u00e9" * (MAX_RUN_ID_BYTES // 2),  # 2 bytes each: exactly the limit
    "\U0001f600" * (MAX_RUN_ID_BYTES // 4),
    "with space inside",
    "\u65e5\u672c\u8a9e",
]


@pytest.mark.parametrize("run_id", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_ids_name_the_rule(run_id: str) -> None:
    """Every refused id raises ValueError saying why, without echoing raw control characters."""
    with pytest.raises(ValueError, match="Invalid run id") as info:
        validate_run_id(run_id)
    message = str(info.value)
    assert message.isprintable(), message
    assert not any(ord(c) > 127 for c in message)


@pytest.mark.parametrize("run_id", ACCEPTED)
def test_accepted_ids_name_a_file(run_id: str, tmp_path: Path) -> None:
    """An accepted id is a file the store can write, set aside and load."""
    assert validate_run_id(run_id) == run_id
    store = FileStore(tmp_path)
    store.append(run_id, Event(type="run_start"))
    assert [e.type for e in store.load(run_id)] == ["run_start"]
    assert store.set_aside(run_id) is not None
    assert store.load(run_id) == []


@pytest.mark.parametrize("run_id", list(REFUSED.values()), ids=list(REFUSED))
def test_stores_refuse_them(run_id: str, tmp_path: Path) -> None:
    """FileStore and MemoryStore refuse them before touching anything (no OSError)."""
    store = FileStore(tmp_path / "runs")
    for call in (lambda: store.append(run_id, Event(type="run_start")), lambda: store.load(run_id)):
        with pytest.raises(ValueError, match="Invalid run id"):
            call()
    with pytest.raises(ValueError, match="Invalid run id"):
        MemoryStore().append(run_id, Event(type="run_start"))
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("run_id", list(REFUSED.values()), ids=list(REFUSED))
def test_the_facade_refuses_them_before_connecting(run_id: str) -> None:
    """run/resume/approve/stream refuse them at once (no server is reachable here)."""
    agent = Agentor(name="A", temporal="127.0.0.1:1", embedded_worker=False)
    with pytest.raises(ValueError, match="Invalid run id"):
        agent.run("hi", run_id=run_id)
    with pytest.raises(ValueError, match="Invalid run id"):
        agent.resume(run_id)
    with pytest.raises(ValueError, match="Invalid run id"):
        agent.approve(run_id, "call_1")
