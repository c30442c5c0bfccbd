"""`prune`: remove old JSONL logs of finished runs, and never a run in flight.

Agentor's documentation says nothing prunes old runs; a runs directory grows
forever. A log is removed only when it is older than the cut-off (by the time
it was last written), its last segment ends with `run_end`, and, when
Temporal can be asked, the run's workflow is not running (a resumed run may
be working on a new segment that the log has not seen yet). Anything else is
kept, with the reason, and a log written to while pruning is kept too.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.store import Event, FileStore, final_event, validate_run_id
from agentor_temporal.store.base import read_events
from agentor_temporal.store.encoding import read_json
from agentor_temporal.store.events import with_readable_counts

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """Seconds in an age like `30d`, `12h`, `90m`, `45s` or `2w`.

    Raises:
        ValueError: saying what is expected.
    """
    match = _AGE.match(text)
    if not match:
        raise ValueError(
            f"invalid age {text!r}: expected a number and a unit, e.g. 30d, 12h, 90m, 45s or 2w"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def age_text(seconds: float) -> str:
    """`3d`, `5h`, `12m` or `40s`: how long ago, roughly."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@dataclass
class Age:
    """An age as given (`30d`) and in seconds."""

    seconds: float
    text: str


@dataclass
class Verdict:
    """What prune does with one log, and why."""

    run_id: str
    path: Path
    remove: bool
    reason: str
    #: the file's mtime when decided; a different one at removal means a writer
    mtime: float = 0.0
    #: the removal was refused (a read-only or failing disk): the log is kept
    refused: bool = False


async def plan(
    store: FileStore, older_than: float, client: Client | None, *, now: float | None = None
) -> list[Verdict]:
    """Decide, for every log in `store`, whether it goes (nothing is removed here).

    Args:
        store: the runs directory.
        older_than: seconds since a log was last written before it may go.
        client: Temporal to ask whether a run is still running; None when it
            cannot be reached (the logs alone decide).
        now: the current time (epoch seconds), for tests.
    """
    now = time.time() if now is None else now
    verdicts = []
    for run_id in store.list_runs():
        path = store.path(run_id)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            continue
        age = now - mtime
        verdict = Verdict(run_id, path, remove=False, reason="", mtime=mtime)
        verdicts.append(verdict)
        if age < older_than:
            verdict.reason = f"newer than the cut-off (last written {age_text(age)} ago)"
            continue
        tail = last_segment_end(path)
        if tail is None:
            events = read_events(store, run_id)
            tail = (bool(events), final_event(events))
        some, end = tail
        if not some:
            verdict.reason = "the log has no events"
            continue
        if end is None:
            verdict.reason = "in flight: its last segment has no run_end"
            continue
        if client is not None:
            try:
                running = await _running(client, run_id)
            except Exception as exc:  # keep what cannot be checked
                verdict.reason = f"could not ask Temporal about it ({exc})"
                continue
            if running:
                verdict.reason = "still running in Temporal"
                continue
        verdict.remove = True
        verdict.reason = f"finished ({end.status}), last written {age_text(age)} ago"
    return verdicts


def _parses(line: bytes) -> bool:
    try:
        read_json(line)
    except ValueError:
        return False
    return True


async def _running(client: Client, run_id: str) -> bool:
    """Whether the run's latest execution is running (describing it: its history is not read)."""
    validate_run_id(run_id)
    try:
        described = await client.get_workflow_handle(run_id).describe()
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


#: Bytes read at a time from a log's end.
_TAIL_BLOCK = 1 << 20
#: An event line's type, as this project and Agentor write it (the first key).
_TYPE = re.compile(rb'^\{"type": "([a-z_]+)"')


def last_segment_end(path: Path) -> tuple[bool, Event | None] | None:
    """(whether the log has events, its last segment's `run_end`), read from its end.

    Only the lines after the last `run_start` or `run_end` are parsed (a
    finished run's: none but its `run_end`): a long run's log grows with the
    square of its turns (a 1,000-turn run's is 630 MB), and reading it whole
    to find its last event took prune 18 s a log. None when a line is not as
    this project and Agentor write them (the caller reads the log whole).
    """
    try:
        with path.open("rb") as f:
            pos = f.seek(0, 2)
            carry = b""  # the part of a line that began before the block read
            final = True  # the file's last line, torn by a hard kill as load allows
            seen = False
            while pos > 0:
                start = max(0, pos - _TAIL_BLOCK)
                f.seek(start)
                pieces = (f.read(pos - start) + carry).split(b"\n")
                pos = start
                carry = pieces.pop(0) if pos > 0 else b""
                for line in reversed(pieces):
                    if not line.strip():
                        continue
                    torn_allowed, final = final, False
                    match = _TYPE.match(line)
                    kind = match.group(1) if match else None
                    if kind == b"run_end":
                        try:
                            return True, Event.from_dict(with_readable_counts(read_json(line)))
                        except ValueError:
                            kind = None
                    if kind is None:
                        if torn_allowed and not _parses(line):
                            continue  # torn by a hard kill: load skips it too
                        return None
                    seen = True
                    if kind == b"run_start":
                        return True, None
            return seen, None
    except OSError:
        return None


async def apply(store: FileStore, verdicts: list[Verdict], client: Client | None = None) -> None:
    """Remove the logs `verdicts` say go, unless written to or resumed since.

    A log whose mtime moved since `plan` is being appended to (a resume
    started meanwhile): it is kept, and its verdict says so. With `client`,
    Temporal is asked again just before each removal: a run resumed after
    `plan` asked (for many logs, seconds before) whose worker has not yet
    written to its log was removed as finished while it ran again. A log the
    disk refuses to remove (read-only, an I/O error) is kept, its verdict saying
    so, and the others are still tried.
    """
    for verdict in verdicts:
        if not verdict.remove:
            continue
        try:
            current = verdict.path.stat().st_mtime
        except FileNotFoundError:
            continue
        if current != verdict.mtime:
            verdict.remove = False
            verdict.reason = "written to while pruning"
            continue
        if client is not None:
            try:
                running = await _running(client, verdict.run_id)
            except Exception as exc:  # keep what cannot be checked
                verdict.remove = False
                verdict.reason = f"could not ask Temporal about it again ({exc})"
                continue
            if running:
                verdict.remove = False
                verdict.reason = "resumed while pruning: running in Temporal again"
                continue
        try:
            store.delete(verdict.run_id)
        except OSError as exc:  # a read-only disk, an I/O error: said per log, the rest go on
            verdict.remove = False
            verdict.refused = True
            why = exc.strerror or type(exc).__name__
            verdict.reason = f"{verdict.reason}, but could not be removed: {why}"
