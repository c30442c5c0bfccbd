"""Setting a wrong log aside while other processes use it: no event lands in the copy set aside.

Two workers may share one runs directory. A worker that finds a run's log
wrong sets it aside and writes the run's log again; a writer in another
process may have opened the log just before (its descriptor is then the
copy set aside) and take the lock just after. Each child here pauses at
one exact point (a patched `fcntl.flock` or `os.open` waits for a line on
its stdin), so the order is the same on every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentor_temporal.activities.mirror import reconcile
from agentor_temporal.store import Event, FileStore

from helpers import ROOT, stop_process, wait_line

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock and fork-free children")

RUN = "r1"

#: A writer in its own process that opened the log and waits, before locking it, for "go".
WRITER = """
import fcntl, json, sys
from agentor_temporal.store import Event, FileStore

real = fcntl.flock
paused = []
def flock(fd, op):
    if not paused:
        paused.append(1)
        print("OPENED", flush=True)
        sys.stdin.readline()
    return real(fd, op)
fcntl.flock = flock

store = FileStore(sys.argv[1])
late = Event(type="message", text="late")
if sys.argv[2] == "append":
    store.append("r1", late)
    print(json.dumps({"done": True}), flush=True)
else:  # the mirror's step: this process wrote the log as it is now, and extends it
    store.vouch("r1")
    have = store.count("r1")
    print(json.dumps({"done": store.append_next("r1", have, [late])[2]}), flush=True)
"""

#: A worker in its own process that rewrites a wrong log, waiting for "go" before creating a
#: file or before replacing one (argv[3]: "creating", "replacing").
REWRITER = """
import json, os, sys
from agentor_temporal.activities.mirror import reconcile
from agentor_temporal.store import Event, FileStore

real_open, real_replace = os.open, os.replace
paused = []
def pause(what):
    if sys.argv[3] == what and not paused:
        paused.append(1)
        print(what.upper(), flush=True)
        sys.stdin.readline()
def opener(path, flags, *args, **kwargs):
    if flags & os.O_CREAT:
        pause("creating")
    return real_open(path, flags, *args, **kwargs)
def replacer(*args, **kwargs):
    pause("replacing")
    return real_replace(*args, **kwargs)
os.open, os.replace = opener, replacer

events = [Event.from_dict(e) for e in json.loads(sys.argv[2])]
print(json.dumps({"kept": reconcile(FileStore(sys.argv[1]), "r1", events)}), flush=True)
"""


def story() -> list[Event]:
    return [
        Event(type="run_start", agent="A", model="m", messages=[{"role": "user"}]),
        Event(type="generation", turn=1, calls=[{"id": "c1"}]),
        Event(type="tool_call", name="t", call_id="c1", turn=1),
        Event(type="tool_result", name="t", call_id="c1", result="1", turn=1),
        Event(type="message", text="done"),
        Event(type="run_end", status="completed"),
    ]


def damaged_log(runs: Path) -> tuple[list[Event], bytes]:
    """A log whose second event is another run's: the run's events, and the log's bytes."""
    run = story()
    wrong = [*run[:1], Event(type="generation", turn=1, calls=[{"id": "other"}]), *run[2:4]]
    data = "".join(e.to_json() + "\n" for e in wrong).encode()
    (runs / f"{RUN}.jsonl").write_bytes(data)
    return run, data


def child(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_of(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate("go\n", timeout=30)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))


def dicts(events: list[Event]) -> list[dict[str, object]]:
    return [e.to_dict() for e in events]


@pytest.mark.parametrize("op", ["append", "append_next"])
def test_a_writer_that_opened_the_log_before_it_was_set_aside_writes_the_new_log(
    op: str, tmp_path: Path
) -> None:
    """The copy set aside stays byte for byte what was set aside; the late event is not lost."""
    run, data = damaged_log(tmp_path)
    writer = child(WRITER, str(tmp_path), op)
    try:
        wait_line(writer, "OPENED", timeout=20)  # its descriptor is the wrong log's
        assert reconcile(FileStore(tmp_path), RUN, run) == len(run)
        done = result_of(writer)
    finally:
        stop_process(writer)
    [aside] = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert aside.read_bytes() == data  # nothing written into it after it was set aside
    late = Event(type="message", text="late")
    if op == "append":  # a plain append goes to the run's log
        assert dicts(FileStore(tmp_path).load(RUN)) == dicts([*run, late])
    else:  # the mirror's step finds a log it did not write, to be checked first
        assert done == {"done": None}
        assert dicts(FileStore(tmp_path).load(RUN)) == dicts(run)


def test_a_log_being_rewritten_is_never_missing_or_partial(tmp_path: Path) -> None:
    """While a worker rewrites a wrong log, others read the old log whole, never no log."""
    run, data = damaged_log(tmp_path)
    rewriter = child(REWRITER, str(tmp_path), json.dumps(dicts(run)), "creating")
    try:
        wait_line(rewriter, "CREATING", timeout=20)
        store = FileStore(tmp_path)
        assert store.list_runs() == [RUN]
        assert (tmp_path / f"{RUN}.jsonl").read_bytes() == data
        assert result_of(rewriter) == {"kept": len(run)}
    finally:
        stop_process(rewriter)
    assert dicts(FileStore(tmp_path).load(RUN)) == dicts(run)
    [aside] = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert aside.read_bytes() == data


def test_two_workers_rewriting_one_wrong_log_set_it_aside_once(tmp_path: Path) -> None:
    """The second worker finds the log already right under the lock: no good log set aside."""
    run, data = damaged_log(tmp_path)
    rewriter = child(REWRITER, str(tmp_path), json.dumps(dicts(run)), "creating")
    try:
        wait_line(rewriter, "CREATING", timeout=20)  # it compared, found the log wrong
        done = threading.Event()

        def other() -> None:
            assert reconcile(FileStore(tmp_path), RUN, run) == len(run)
            done.set()

        thread = threading.Thread(target=other)
        thread.start()  # it reads the wrong log too, then waits for the lock, or finds no log
        assert result_of(rewriter) == {"kept": len(run)}
        thread.join(30)
        assert done.is_set()
    finally:
        stop_process(rewriter)
    assert dicts(FileStore(tmp_path).load(RUN)) == dicts(run)
    asides = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert [p.read_bytes() for p in asides] == [data]


def test_a_rewrite_killed_between_its_two_renames_leaves_no_log_refused_for_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGKILLed with the old log linked to its side name and not yet replaced, the log has
    two names: it was refused ("2 hard links") by every later step, the run's mirror dead."""
    run, data = damaged_log(tmp_path)
    rewriter = child(REWRITER, str(tmp_path), json.dumps(dicts(run)), "replacing")
    try:
        wait_line(rewriter, "REPLACING", timeout=20)
        rewriter.kill()
        rewriter.wait(10)
    finally:
        stop_process(rewriter)
    store = FileStore(tmp_path)
    assert [e.type for e in store.load(RUN)][:1] == ["run_start"]  # read, not refused
    assert reconcile(store, RUN, run) == len(run)
    assert dicts(FileStore(tmp_path).load(RUN)) == dicts(run)
    asides = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert [p.read_bytes() for p in asides] == [data]  # the wrong log kept once
    assert "interrupted" in caplog.text
    assert (tmp_path / f"{RUN}.jsonl").stat().st_mode & 0o777 == 0o600  # writable again
