"""Store behaviour, parametrised over every store; FileStore's crash rules."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from agentor_temporal.activities.journal import _next_in_line, catch_up, mirror_into
from agentor_temporal.activities.mirror import reconcile, store_count, unchanged
from agentor_temporal.store import Event, FileStore, MemoryStore, Usage


class DictStore:
    """The seed's 'your own' store: three methods and nothing else."""

    def __init__(self) -> None:
        self.data: dict[str, list[Event]] = {}

    def append(self, run_id: str, event: Event) -> None:
        self.data.setdefault(run_id, []).append(event)

    def load(self, run_id: str) -> list[Event]:
        return list(self.data.get(run_id, []))

    def list_runs(self) -> list[str]:
        return sorted(self.data)


@pytest.fixture(params=["file", "memory", "custom"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return {
        "file": lambda: FileStore(tmp_path / "runs"),
        "memory": MemoryStore,
        "custom": DictStore,
    }[request.param]()


def events(n: int, start: int = 0) -> list[Event]:
    return [
        Event(type="tool_result", call_id=f"c{i}", result=str(i)) for i in range(start, start + n)
    ]


def test_append_load_list(store: Any) -> None:
    """Events come back in order; unknown runs load as []; list_runs names runs."""
    for e in events(3):
        store.append("r1", e)
    store.append("r2", Event(type="run_start"))
    assert [e.call_id for e in store.load("r1")] == ["c0", "c1", "c2"]
    assert store.load("nope") == []
    assert store.list_runs() == ["r1", "r2"]


def test_mirror_is_idempotent_by_position(store: Any) -> None:
    """A retried mirror never writes an event twice and fills only what is new."""
    assert mirror_into(store, "r", 0, events(2)) == 2
    assert mirror_into(store, "r", 0, events(2)) == 2
    assert mirror_into(store, "r", 1, events(3, start=1)) == 4
    assert [e.call_id for e in store.load("r")] == ["c0", "c1", "c2", "c3"]


def test_mirror_leaves_a_gap_alone(store: Any) -> None:
    """Events that belong past the store's end are not written out of place."""
    assert mirror_into(store, "r", 5, events(2)) == 0
    assert store.load("r") == []


def test_file_store_creates_directory_and_writes_jsonl(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "a" / "b")
    store.append("r", Event(type="run_start", agent="A"))
    lines = (tmp_path / "a" / "b" / "r.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"type": "run_start", "agent": "A"}]


def test_a_runs_directory_deleted_mid_run_is_made_again(tmp_path: Path) -> None:
    """A deleted runs directory comes back at the next write, and the mirror fills it."""
    import shutil

    store = FileStore(tmp_path / "runs")
    assert mirror_into(store, "r", 0, events(2)) == 2
    shutil.rmtree(tmp_path / "runs")
    # the mirror's next step finds no log: it writes the run from its first event
    assert mirror_into(store, "r", 2, events(1, start=2)) == 0
    assert mirror_into(store, "r", 0, events(3)) == 3
    assert [e.call_id for e in store.load("r")] == ["c0", "c1", "c2"]
    assert (tmp_path / "runs").stat().st_mode & 0o777 == 0o700
    store.append("other", Event(type="run_start"))
    assert store.list_runs() == ["other", "r"]


def test_file_store_survives_a_torn_final_line(tmp_path: Path) -> None:
    """A torn last line is skipped on load and cut off before the next append."""
    store = FileStore(tmp_path)
    store.append("r", Event(type="run_start"))
    with open(tmp_path / "r.jsonl", "a") as f:
        f.write('{"type": "generation", "turn": 2, "usage": {"input_tok')
    assert [e.type for e in store.load("r")] == ["run_start"]
    assert store.count("r") == 1
    store.append("r", Event(type="run_end", status="completed"))
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["run_start", "run_end"]


@pytest.mark.parametrize("how", ["append_from", "append", "append_next"])
def test_a_whole_last_event_without_its_newline_is_ended_not_cut(how: str, tmp_path: Path) -> None:
    """A last line that lacks only its newline is an event: the next append keeps it."""
    FileStore(tmp_path).append_from("r", 0, [Event(type="run_start"), Event(type="message")])
    path = tmp_path / "r.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # cut just before the last newline
    store = FileStore(tmp_path)  # another process: counts it as it stands
    assert store.count("r") == 2
    end = Event(type="run_end", status="completed")
    if how == "append_from":
        assert store.append_from("r", 2, [end]) == 3
    elif how == "append":
        store.append("r", end)
    else:
        store.vouch("r")  # as the mirror does once it found the copy true to the run
        assert store.append_next("r", 2, [end]) == (2, True, 3)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["run_start", "message", "run_end"]
    assert store.count("r") == 3 and path.read_bytes().endswith(b"}\n")


def test_file_store_skips_a_corrupt_middle_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Unparseable lines, and lines whose fields have the wrong types, are skipped by name."""
    (tmp_path / "r.jsonl").write_text(
        '{"type": "run_start"}\nnot json\n[1]\n{"type": "generation", "messages": "oops"}\n'
        '{"type": "run_end"}\n'
    )
    assert [e.type for e in FileStore(tmp_path).load("r")] == ["run_start", "run_end"]
    assert "r.jsonl:4 (field 'messages' must be a list of objects, got str)" in caplog.text


def test_file_store_skips_lines_deeper_or_larger_than_python_reads(tmp_path: Path) -> None:
    """A line nested past the parser's recursion is skipped, not raised; a count of Infinity
    or NaN is read as 0, its generation kept (skipped, resume asked its turn again)."""
    deep = '{"type": "generation", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    infinite = '{"type": "generation", "usage": {"input_tokens": Infinity, "output_tokens": NaN}}'
    (tmp_path / "r.jsonl").write_text(
        f'{{"type": "run_start"}}\n{deep}\n{infinite}\n{{"type": "run_end"}}\n'
    )
    store = FileStore(tmp_path)
    events = store.load("r")
    assert [e.type for e in events] == ["run_start", "generation", "run_end"]
    assert events[1].usage == Usage()
    assert store.count("r") == 3


@pytest.mark.parametrize("run_id", ["../x", "/tmp/x", "a\\b", "C:x", ".hidden", "", "a/b", "x\ny"])
def test_file_store_refuses_hostile_ids(tmp_path: Path, run_id: str) -> None:
    """Ids that could escape or hide in the directory raise ValueError."""
    store = FileStore(tmp_path / "runs")
    with pytest.raises(ValueError, match="Invalid run id"):
        store.append(run_id, Event(type="run_start"))
    with pytest.raises(ValueError, match="Invalid run id"):
        store.load(run_id)
    assert not (tmp_path / "x").exists() and list((tmp_path / "runs").iterdir()) == []


def test_list_runs_ignores_foreign_files(tmp_path: Path) -> None:
    (tmp_path / ".hidden.jsonl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "good.jsonl").write_text('{"type": "run_start"}\n')
    assert FileStore(tmp_path).list_runs() == ["good"]


def test_count_notices_writes_by_another_process(tmp_path: Path) -> None:
    """The cached count is keyed by the file's identity, so an outside append invalidates it."""
    store = FileStore(tmp_path)
    store.append("r", Event(type="run_start"))
    assert store.count("r") == 1
    FileStore(tmp_path).append("r", Event(type="run_end"))
    assert store.count("r") == 2
    os.truncate(tmp_path / "r.jsonl", 0)
    assert store.count("r") == 0


def test_a_long_runs_log_is_counted_checked_cut_and_retracted_a_line_at_a_time(
    tmp_path: Path,
) -> None:
    """A fresh store (a worker started again) counts a log, checks it against the run's
    record, cuts its torn tail and retracts its end holding about one line at a time.

    A generation's line holds its whole request, so a long run's log grows
    with the square of its turns; the store read the whole file and parsed
    every event to count it (a 265 MB log of 500 turns took 890 MB, at every
    worker's first step of the run), the mirror loaded it whole again to
    check it, and the store read it whole to cut or retract.
    """
    line = 1_000_000
    record = [Event(type="tool_result", turn=n, result="x" * line) for n in range(17)]
    FileStore(tmp_path).append_from("r", 0, record[:16])
    with open(tmp_path / "r.jsonl", "ab") as f:
        f.write(b'{"type": "tool_res')  # a worker killed mid-write
    store = FileStore(tmp_path)
    tracemalloc.start()
    try:
        assert store.count("r") == 16
        assert reconcile(store, "r", record) == 16
        assert store.append_from("r", 16, record[16:]) == 17
        assert store.retract("r", 8) is not None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * line, f"{peak:,} bytes held for a log of {16 * line:,}"
    assert [e.turn for e in store.load("r")] == list(range(8))
    side = next(tmp_path.glob("r.jsonl.unconfirmed-*"))
    assert [json.loads(text)["turn"] for text in side.read_bytes().splitlines()] == list(
        range(8, 17)
    )


def test_count_notices_an_edit_that_keeps_the_size(tmp_path: Path) -> None:
    """A log damaged in place (same size, later mtime) is counted again, and caught up.

    Keyed by size alone, the count stayed 3 while no line loaded, so catching
    a finished run's mirror up wrote nothing: the log stayed unreadable.
    """
    store = FileStore(tmp_path)
    events = [
        Event(type="run_start", agent="A", text="London"),
        Event(type="message", text="London"),
        Event(type="run_end", text="London", status="completed"),
    ]
    assert mirror_into(store, "r", 0, events) == 3 and store.count("r") == 3
    path = tmp_path / "r.jsonl"
    before = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"London", b"Lond\xffn"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert os.stat(path).st_size == before.st_size
    assert store.load("r") == [] and store.count("r") == 0

    assert catch_up(store, "r", events, "A") == 3
    assert [e.to_dict() for e in store.load("r")] == [e.to_dict() for e in events]


def _three_steps(store: FileStore, run_id: str, start: int, events: list[Event]) -> Any:
    """The mirror's usual step as any store takes it: count, check, then append."""
    have, same = store_count(store, run_id), unchanged(store, run_id)
    if same and events and have == start + len(events):
        return have, same, have
    if same and have == start:
        return have, same, mirror_into(store, run_id, start, events)
    return have, same, None


def _torn(path: Path) -> None:
    with open(path, "a") as f:
        f.write('{"type": "generation", "tu')


def _touched(path: Path) -> None:
    with open(path, "a") as f:
        f.write(Event(type="message", text="from elsewhere").to_json() + "\n")


@pytest.mark.parametrize(
    ("case", "before", "start", "n"),
    [
        ("new run", None, 0, 2),
        ("new run, nothing to write", None, 0, 0),
        ("no file yet, events further on", None, 3, 2),
        ("next in line", None, 2, 2),
        ("a retry: already written", None, 0, 2),
        ("a gap", None, 5, 2),
        ("an overlap", None, 1, 2),
        ("touched by someone else", _touched, 2, 2),
        ("a torn final line", _torn, 2, 2),
        ("an empty file", "empty", 0, 2),
    ],
)
def test_the_one_visit_step_answers_as_count_check_append(
    tmp_path: Path, case: str, before: Any, start: int, n: int
) -> None:
    """`FileStore.append_next` (one open, one lock) leaves the log and answers as the
    three-step route does, in every case the mirror meets; and never creates a file
    it does not write to."""
    answers, logs = [], []
    for route in ("three steps", "one visit"):
        store = FileStore(tmp_path / route)
        path = store.path("r")
        if before == "empty":
            path.write_bytes(b"")
        elif case not in ("new run", "new run, nothing to write", "no file yet, events further on"):
            mirror_into(store, "r", 0, events(2))
            if callable(before):
                before(path)
        fresh = events(n, start=start)
        if route == "one visit":
            answers.append(store.append_next("r", start, fresh))
        else:
            answers.append(_three_steps(store, "r", start, fresh))
        logs.append(path.read_bytes() if path.exists() else None)
        answers.append((store.count("r"), store.unchanged("r")))
    assert answers[2:] == answers[:2], case
    assert logs[1] == logs[0], case


def test_a_mirror_step_opens_the_file_once_and_asks_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usual step opens the run's file once and stats nothing by name.

    Each system call of the step lets go of the GIL in the writing thread,
    which then waits for a busy worker's event loop to hand it back: the
    three-step route made 22 calls (3 opens or stats by name), this one 10.
    """
    store = FileStore(tmp_path)
    mirror_into(store, "r", 0, events(2))
    calls: list[str] = []
    for name in ("open", "stat"):
        real = getattr(os, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counted)
    lock = threading.Lock()
    assert _next_in_line(store, "r", 2, events(2, start=2), lock) == (2, True, 4)
    assert calls == ["open"]
    assert [e.call_id for e in store.load("r")] == ["c0", "c1", "c2", "c3"]


def test_show_of_a_long_runs_log_holds_about_one_line_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show --store`, readable and as JSONL, prints a log holding about one line at a time,
    and says what it said when the whole log was loaded.

    A generation's line holds its whole request, so a long run's log grows
    with the square of its turns; `show` loaded every event first (500 turns
    of 2 KB results: a 260 MB log, held whole).
    """
    from agentor_temporal.cli import execute

    line = 1_000_000
    request = [{"role": "user", "content": "Read the repository."}]
    events = [Event(type="run_start", agent="coder", model="m", messages=request, started_at=1.0)]
    for n in range(1, 17):
        messages = [*request, {"role": "tool", "content": "x" * line}]
        usage = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
        events.append(
            Event.from_dict(
                {
                    "type": "generation",
                    "turn": n,
                    "text": f"turn {n}",
                    "messages": messages,
                    "usage": usage,
                }
            )
        )
    events.append(Event(type="run_end", status="completed", text="done", ended_at=3.0))
    FileStore(tmp_path).append_from("r", 0, events)

    class Sink:
        def __init__(self) -> None:
            self.text: list[str] = []
            self.jsonl = 0

        def write(self, text: str) -> int:
            if len(text) > 10_000:
                self.jsonl += 1
            else:
                self.text.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    sink = Sink()
    monkeypatch.setattr("sys.stdout", sink)
    # keys known, as a worker's or a command's: each line is masked, and masking kept the
    # copies it tested (a line, lowered, decoded) of the last four lines (8.2 MB here)
    from agentor_temporal.activities import _redact

    monkeypatch.setattr(_redact, "_known", set(_redact._known))
    for n in range(3):
        _redact.remember(f"sk-a-known-key-{n}-0123456789")
    tracemalloc.start()
    try:
        assert execute(["show", "r", "--store", str(tmp_path), "--jsonl"]) == 0
        assert execute(["show", "r", "--store", str(tmp_path)]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * line, f"{peak:,} bytes held for a log of {16 * line:,}"
    assert sink.jsonl == 16
    shown = "".join(sink.text).splitlines()
    assert "status   completed" in shown and "output   done" in shown
    assert "usage    16 turns, 176 tokens (160 in, 16 out)" in shown
    assert f"source   the store {tmp_path}" in shown
    rows = [row for row in shown if row[:4].strip().isdigit()]
    assert len(rows) == 18 and 'answers "turn 16", 11 tokens' in rows[-2]
    assert "coder (m): Read the repository." in rows[0]


def test_a_long_runs_log_is_written_a_part_at_a_time(tmp_path: Path) -> None:
    """Many events written at once (a fork's first step writes its parent's events up to
    the fork; a copy set aside is written again whole) hold about one line's text at a time.

    A generation's line holds its whole request, so a long run's log grows
    with the square of its turns; the store joined the text of every event
    before writing it (a fork at turn 200 of a run of 2 KB results: 56 MB).
    """
    line = 1_000_000
    events = [Event(type="tool_result", turn=n, result="x" * line) for n in range(16)]
    store = FileStore(tmp_path)
    tracemalloc.start()
    try:
        assert store.append_next("r", 0, events) == (0, True, 16)
        assert store.append_from("s", 0, events) == 16
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * line, f"{peak:,} bytes held writing a log of {16 * line:,}"
    for run_id in ("r", "s"):
        assert [e.to_dict() for e in store.load(run_id)] == [e.to_dict() for e in events]


def test_a_retract_a_full_disk_refuses_leaves_the_log_and_no_half_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while the retracted tail is copied aside: the log keeps every event and no
    partial `unconfirmed-` file is left beside it (one was, holding part of the tail)."""
    import shutil

    store = FileStore(tmp_path)
    for n in range(4):
        store.append("r", Event(type="message", text=f"m{n}"))

    def full(src: Any, dst: Any, *args: object) -> None:
        dst.write(src.read(10))
        dst.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", full)
    with pytest.raises(OSError, match="No space left"):
        store.retract("r", 2)
    assert [e.text for e in store.load("r")] == ["m0", "m1", "m2", "m3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]
