"""`prune` decides from a log's last segment, read from its end, never the whole log of a
long run; wherever the tail is not as this project writes it, the log is read whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentor_temporal import _prune
from agentor_temporal.store import Event, FileStore, Usage, final_event
from agentor_temporal.store.base import read_events

from helpers import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


def lines(*events: Event) -> str:
    return "".join(e.to_json() + "\n" for e in events)


START = Event(type="run_start", messages=[{"role": "user", "content": "go"}])
GEN = Event(type="generation", turn=1, messages=[{"role": "user", "content": "x" * 3_000_000}])
END = Event(type="run_end", status="completed", turn=1)
FAILED = Event(type="run_end", status="failed", error="boom")

CASES = {
    "finished": lines(START, GEN, END),
    "in flight": lines(START, GEN),
    "resumed, in flight": lines(START, GEN, FAILED, START, GEN),
    "resumed, finished": lines(START, FAILED, START, GEN, END),
    "torn final line": lines(START, GEN, END) + '{"type": "tool_ca',
    "torn final run_end": lines(START, GEN) + '{"type": "run_end", "stat',
    "empty": "",
    "only a torn line": '{"type": "run_st',
    "no trailing newline": lines(START, END)[:-1],
    # Agentor's json.dumps writes a provider's infinite count as it is: prune raised
    # OverflowError reading the run_end, and the whole log's read skipped it
    "infinite count at the end": lines(START, GEN)
    + '{"type": "run_end", "status": "completed", "usage": {"input_tokens": Infinity}}\n',
    "nan count at the end": lines(START, GEN)
    + '{"type": "run_end", "status": "completed", "usage": {"total_tokens": NaN}}\n',
    # standard JSON, but more digits than Python reads: the run_end was skipped
    "5000-digit count at the end": lines(START, GEN)
    + '{"type": "run_end", "status": "completed", "usage": {"total_tokens": '
    + "9" * 5000
    + "}}\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_tail_says_what_the_whole_log_says(tmp_path: Path, name: str) -> None:
    store = FileStore(tmp_path)
    store.path("r1").write_text(CASES[name])
    events = read_events(store, "r1")
    assert _prune.last_segment_end(store.path("r1")) == (bool(events), final_event(events))
    if "count at the end" in name:
        assert events[-1].type == "run_end" and events[-1].usage == Usage()


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.jsonl")))
def test_agentors_own_logs_are_read_from_their_end(tmp_path: Path, fixture: str) -> None:
    store = FileStore(tmp_path)
    store.path("r1").write_bytes((FIXTURES / fixture).read_bytes())
    events = read_events(store, "r1")
    assert _prune.last_segment_end(store.path("r1")) == (bool(events), final_event(events))


def test_a_line_written_otherwise_reads_the_log_whole(tmp_path: Path) -> None:
    path = tmp_path / "r1.jsonl"
    path.write_text(lines(START) + '{"status": "completed", "type": "run_end"}\n')
    assert _prune.last_segment_end(path) is None


def test_a_long_finished_log_is_decided_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1,000-turn run's log is 630 MB: prune read it whole (18 s a log) for its last line."""
    store = FileStore(tmp_path)
    store.path("r1").write_text(CASES["finished"])

    def refuse(*args: object, **kwargs: object) -> list[Event]:
        raise AssertionError("the whole log was read")

    monkeypatch.setattr(_prune, "read_events", refuse)
    verdicts = asyncio.run(_prune.plan(store, 0, None, now=1e12))
    assert [(v.run_id, v.remove) for v in verdicts] == [("r1", True)]
