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

from temporalio.client import Client

from agentor_temporal.store import FileStore, final_event
from agentor_temporal.store.base import read_events
from agentor_temporal.workflows import TemporalStore

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
    temporal = TemporalStore(client) if client is not None else None
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
        events = read_events(store, run_id)
        end = final_event(events)
        if not events:
            verdict.reason = "the log has no events"
            continue
        if end is None:
            verdict.reason = "in flight: its last segment has no run_end"
            continue
        if temporal is not None:
            try:
                latest = await temporal.latest(run_id)
            except Exception as exc:  # keep what cannot be checked
                verdict.reason = f"could not ask Temporal about it ({exc})"
                continue
            if latest is not None and latest.status == "running":
                verdict.reason = "still running in Temporal"
                continue
        verdict.remove = True
        verdict.reason = f"finished ({end.status}), last written {age_text(age)} ago"
    return verdicts


def apply(store: FileStore, verdicts: list[Verdict]) -> None:
    """Remove the logs `verdicts` say go, unless written to since.

    A log whose mtime moved since `plan` is being appended to (a resume
    started meanwhile): it is kept, and its verdict says so.
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
        store.delete(verdict.run_id)
