"""A store's own ground: only inside its directory, only standard JSON, never a wrong log extended.

A FileStore writes only inside its directory, whatever that directory holds:
a run's file that is a symbolic link (to anywhere), a hard link, a FIFO or a
directory is refused, and nothing outside changes. A copy of a run whose
content does not match the run's record (a damaged middle line, another run's
log, lines out of order or repeated) is set aside under a new name, never
deleted and never extended, and a complete log is written in its place.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agentor_temporal.activities.journal import _next_in_line, catch_up, mirror_into
from agentor_temporal.store import Event, FileStore, MemoryStore

RUN = "r1"


def story(n_turns: int = 1, agent: str = "A") -> list[Event]:
    events = [Event(type="run_start", agent=agent, model="m", messages=[{"role": "user"}])]
    for turn in range(1, n_turns + 1):
        events += [
            Event(type="generation", turn=turn, calls=[{"id": f"c{turn}"}]),
            Event(type="tool_call", name="t", call_id=f"c{turn}", turn=turn),
            Event(type="tool_result", name="t", call_id=f"c{turn}", result=str(turn), turn=turn),
        ]
    return events + [Event(type="message", text="done"), Event(type="run_end", status="completed")]


def write_lines(path: Path, events: list[Event]) -> None:
    path.write_text("".join(e.to_json() + "\n" for e in events))


# -- links and special files ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["symlink-out", "symlink-dangling", "hardlink", "fifo", "dir"])
def test_the_store_never_follows_a_link_or_writes_a_special_file(kind: str, tmp_path: Path) -> None:
    """Appends, loads and mirrors refuse the file clearly; nothing outside changes."""
    runs, outside = tmp_path / "runs", tmp_path / "outside.txt"
    runs.mkdir()
    outside.write_text("precious\n")
    target = runs / f"{RUN}.jsonl"
    if kind == "symlink-out":
        target.symlink_to(outside)
    elif kind == "symlink-dangling":
        target.symlink_to(tmp_path / "created-by-nobody.txt")
    elif kind == "hardlink":
        os.link(outside, target)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    store = FileStore(runs)
    with pytest.raises(OSError, match="Refusing to use .*r1.jsonl"):
        store.append(RUN, Event(type="run_start"))
    with pytest.raises(OSError, match="Refusing to use"):
        store.load(RUN)
    with pytest.raises(OSError, match="Refusing to use"):
        mirror_into(store, RUN, 0, story())
    for start in (0, 3):  # the mirror's usual step, a new run's and a later one
        with pytest.raises(OSError, match="Refusing to use"):
            _next_in_line(store, RUN, start, story(), threading.Lock())
    assert outside.read_text() == "precious\n"
    assert not (tmp_path / "created-by-nobody.txt").exists()


def test_a_link_set_aside_is_renamed_not_followed(tmp_path: Path) -> None:
    runs, outside = tmp_path / "runs", tmp_path / "outside.txt"
    runs.mkdir()
    outside.write_text("precious\n")
    (runs / f"{RUN}.jsonl").symlink_to(outside)
    name = FileStore(runs).set_aside(RUN)
    assert name is not None and (runs / name).is_symlink()
    assert outside.read_text() == "precious\n"


# -- standard JSON ----------------------------------------------------------------------


def test_the_store_writes_only_standard_json(tmp_path: Path) -> None:
    """NaN, infinities and lone surrogates never reach the file as non-standard JSON."""
    store = FileStore(tmp_path)
    store.append(RUN, Event(type="tool_call", name="t", args={"x": math.nan, "y": -math.inf}))
    store.append(RUN, Event(type="tool_result", name="t", result="\udcff", call_id="c"))
    raw = (tmp_path / f"{RUN}.jsonl").read_text(encoding="utf-8")

    def refuse(token: str) -> Any:
        raise AssertionError(f"non-standard JSON token {token}")

    rows = [json.loads(line, parse_constant=refuse) for line in raw.splitlines()]
    assert rows[0]["args"] == {"x": None, "y": None}
    assert rows[1]["result"] == "\ufffd"
    assert "\\ud" not in raw


# -- damaged, foreign and reordered logs ---------------------------------------------------


def damage(kind: str, path: Path, run: list[Event]) -> None:
    lines = path.read_text().splitlines(keepends=True)
    if kind == "corrupt-middle":
        lines[3] = '{"type": "tool_res\n'
    elif kind == "middle-line-missing":
        del lines[2]
    elif kind == "foreign-log":
        lines = [e.to_json() + "\n" for e in story(2, agent="Other")]
    elif kind == "foreign-same-length":
        other = story(1, agent="A")
        other[2].call_id = "someone-else"
        lines = [e.to_json() + "\n" for e in other]
    elif kind == "lines-swapped":
        lines[2], lines[3] = lines[3], lines[2]
    elif kind == "line-repeated":
        lines.insert(3, lines[2])
    elif kind == "longer-than-the-run":
        lines.append(Event(type="message", text="not in the run").to_json() + "\n")
    path.write_text("".join(lines))


DAMAGES = [
    "corrupt-middle",
    "middle-line-missing",
    "foreign-log",
    "foreign-same-length",
    "lines-swapped",
    "line-repeated",
    "longer-than-the-run",
]


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_log_that_does_not_match_is_set_aside_and_rewritten(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Catching up a finished run never duplicates: a wrong copy is moved aside, then rewritten."""
    run = story(1)
    path = tmp_path / f"{RUN}.jsonl"
    write_lines(path, run)
    damage(kind, path, run)
    damaged = path.read_bytes()
    store = FileStore(tmp_path)
    assert catch_up(store, RUN, run, "A") == len(run)
    assert [e.to_dict() for e in store.load(RUN)] == [e.to_dict() for e in run]
    assert len(path.read_text().splitlines()) == len(run)
    [aside] = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert aside.name.startswith(f"{RUN}.jsonl.damaged-")
    assert aside.read_bytes() == damaged  # kept, byte for byte
    assert store.list_runs() == [RUN]
    assert f"The log of run {RUN} in" in caplog.text and "set aside as" in caplog.text


def test_a_matching_or_short_log_is_only_extended(tmp_path: Path) -> None:
    """A copy that is a true prefix (a mirror left behind) gets its tail; nothing is set aside."""
    run = story(2)
    path = tmp_path / f"{RUN}.jsonl"
    write_lines(path, run[:4])
    with open(path, "a") as f:
        f.write('{"type": "tool_res')  # a torn final line: a crash, not damage
    store = FileStore(tmp_path)
    assert catch_up(store, RUN, run, "A") == len(run)
    assert [e.to_dict() for e in store.load(RUN)] == [e.to_dict() for e in run]
    assert [p.name for p in tmp_path.iterdir()] == [f"{RUN}.jsonl"]


def test_an_unconfirmed_tail_is_moved_aside_and_the_copy_goes_on(tmp_path: Path) -> None:
    """Events past the run's confirmed record that it recorded differently go to a side file."""
    from agentor_temporal.activities.mirror import reconcile

    run = story(1)
    stale = [Event.from_dict({**e.to_dict(), "started_at": 1.0}) for e in run[3:5]]
    path = tmp_path / f"{RUN}.jsonl"
    write_lines(path, run[:3] + stale)
    store = FileStore(tmp_path)
    assert reconcile(store, RUN, run[:5], confirmed=3) == 3
    assert mirror_into(store, RUN, 0, run) == len(run)
    assert [e.to_dict() for e in store.load(RUN)] == [e.to_dict() for e in run]
    [side] = [p for p in tmp_path.iterdir() if ".unconfirmed-" in p.name]
    assert [json.loads(line)["started_at"] for line in side.read_text().splitlines()] == [1.0, 1.0]


def test_memory_and_three_method_stores(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """MemoryStore sets aside too; a store that cannot is left alone, loudly, never extended."""
    run = story(1)
    memory = MemoryStore()
    for event in run[:2] + run[3:]:
        memory.append(RUN, event)
    assert catch_up(memory, RUN, run, "A") == len(run)
    assert [e.to_dict() for e in memory.load(RUN)] == [e.to_dict() for e in run]
    assert len(memory.set_aside_runs) == 1

    class Plain:
        def __init__(self) -> None:
            self.events: list[Event] = []

        def append(self, run_id: str, event: Event) -> None:
            self.events.append(event)

        def load(self, run_id: str) -> list[Event]:
            return list(self.events)

        def list_runs(self) -> list[str]:
            return [RUN]

    plain = Plain()
    plain.events = run[:2] + run[3:]
    assert catch_up(plain, RUN, run, "A") is None
    assert len(plain.events) == len(run) - 1
    assert "this store cannot set it aside" in caplog.text


def test_a_copy_written_before_a_key_was_known_matches_the_masked_run(tmp_path: Path) -> None:
    """A copy holding a key as recorded (written before this process knew it) is the run's
    copy, masked or not: caught up, never set aside as foreign."""
    from agentor_temporal.activities._redact import remember

    key = "sk-unit-mirror-7f3a9c2e1b4d"
    run = story(1)
    run[0] = Event.from_dict({**run[0].to_dict(), "messages": [{"role": "user", "content": key}]})
    write_lines(tmp_path / f"{RUN}.jsonl", run[:3])
    remember(key)
    store = FileStore(tmp_path)
    assert catch_up(store, RUN, run, "A") == len(run)
    assert [p.name for p in tmp_path.iterdir()] == [f"{RUN}.jsonl"]
    assert store.load(RUN)[-1].to_dict() == run[-1].to_dict()


@pytest.mark.parametrize("kind", ["dangling-link", "file"])
def test_a_runs_directory_that_cannot_be_one_is_refused_naming_why(
    kind: str, tmp_path: Path
) -> None:
    """`FileStore("runs")` where runs is a link to a directory since removed, or a file,
    says which: it said "File exists: 'runs'", of a path that was no directory."""
    from agentor_temporal.worker import ConfigError, worker_store

    runs = tmp_path / "runs"
    if kind == "dangling-link":
        runs.symlink_to(tmp_path / "volume" / "runs")
        why = f"runs is a symbolic link to '{tmp_path / 'volume' / 'runs'}', which does not exist"
    else:
        runs.write_text("not a directory")
        why = "runs is a file, not a directory"
    with pytest.raises(FileExistsError) as caught:
        FileStore(runs)
    assert why in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=why.replace("(", r"\(")) as refused:
        worker_store(str(runs))
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "volume").exists()  # nothing made through the link
