"""`FileStore`: one append-only JSONL file per run, fsynced line by line.

A crash is the case this exists for, so every line is flushed and fsynced,
a torn final line is skipped on load and cut off before the next append
(appending onto it would glue a good event to the fragment), and a run id
that could escape the directory or hide a file is refused. The logs hold
prompts and tool results in the clear, so files and the directory are
created readable by their owner only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

try:  # POSIX: lets two worker processes share one runs directory safely
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from agentor_temporal.store.base import validate_run_id
from agentor_temporal.store.events import Event

logger = logging.getLogger(__name__)


class FileStore:
    """One append-only `<run_id>.jsonl` file per run in `directory`.

    Args:
        directory: where run files live; created if missing.
    """

    def __init__(self, directory: str | os.PathLike[str] = "runs") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # (file size, event count) per run: counting is on the mirror's hot
        # path, and re-parsing a long log on every step is quadratic. Keyed by
        # size, so a write by another process invalidates it.
        self._counts: dict[str, tuple[int, int]] = {}
        # one lock per run, not per store: runs mirror concurrently, and an
        # fsync of one must not queue behind another's
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"

    def path(self, run_id: str) -> Path:
        """The file of `run_id`.

        Raises:
            ValueError: for an id that could escape or hide in the directory.
        """
        return self.directory / f"{validate_run_id(run_id)}.jsonl"

    def append(self, run_id: str, event: Event) -> None:
        """Append one event and fsync it."""
        with self._locked(run_id) as f:
            self._write(run_id, f, [event])

    def append_from(self, run_id: str, start: int, events: list[Event]) -> int:
        """Append the events whose position in the log is new; return the count.

        `events[0]` belongs at position `start`. Under one lock (a thread lock
        and an exclusive `flock`, so two workers sharing a volume cannot
        interleave) the file is counted and only events past its end are
        written: a retried mirror never writes an event twice. A log shorter
        than `start` is left alone, since writing past a gap would misplace
        events; the caller backfills first.
        """
        with self._locked(run_id) as f:
            have = self._count_unlocked(run_id)
            if have < start:
                return have
            fresh = events[have - start :]
            if fresh:
                self._write(run_id, f, fresh)
            return max(have, start + len(events))

    @contextlib.contextmanager
    def _locked(self, run_id: str) -> Iterator[BinaryIO]:
        path = self.path(run_id)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with self._run_lock(run_id), os.fdopen(fd, "ab") as f:
            if fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            yield f

    def _write(self, run_id: str, f: BinaryIO, events: list[Event]) -> None:
        path = self.path(run_id)
        size = f.seek(0, os.SEEK_END)
        if size > 0:
            with path.open("rb") as tail:
                tail.seek(-1, os.SEEK_END)
                torn = tail.read(1) != b"\n"
            if torn:
                size = self._cut_torn_tail(path)
        data = b"".join((e.to_json() + "\n").encode("utf-8") for e in events)
        f.write(data)
        f.flush()
        # fsync: a crash is the case this store exists for
        os.fsync(f.fileno())
        cached = self._counts.get(run_id)
        if cached is not None and cached[0] == size:
            self._counts[run_id] = (size + len(data), cached[1] + len(events))
        else:
            self._counts.pop(run_id, None)

    @staticmethod
    def _cut_torn_tail(path: Path) -> int:
        """Drop a torn final fragment (a hard kill mid-write); return the new size."""
        with path.open("rb+") as g:
            data = g.read()
            keep = data.rfind(b"\n") + 1
            logger.warning(
                "Removing a torn final line (%d bytes) from %s before appending",
                len(data) - keep,
                path,
            )
            g.truncate(keep)
            g.flush()
            os.fsync(g.fileno())
        return keep

    def load(self, run_id: str) -> list[Event]:
        """Every readable event of the run, in order ([] for an unknown run)."""
        path = self.path(run_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return []
        events: list[Event] = []
        for number, line in enumerate(raw.split(b"\n"), 1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                events.append(Event.from_dict(data))
            except (ValueError, TypeError) as exc:
                # a torn final line is expected after a hard kill; anything
                # that parsed before it is still the run's story
                logger.warning("Skipping unreadable event at %s:%d (%s)", path, number, exc)
        return events

    def count(self, run_id: str) -> int:
        """How many events `load(run_id)` would return, cheaply when unchanged."""
        with self._run_lock(run_id):
            return self._count_unlocked(run_id)

    def _run_lock(self, run_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(run_id, threading.Lock())

    def _count_unlocked(self, run_id: str) -> int:
        path = self.path(run_id)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return 0
        cached = self._counts.get(run_id)
        if cached is not None and cached[0] == size:
            return cached[1]
        count = len(self.load(run_id))
        self._counts[run_id] = (size, count)
        return count

    def list_runs(self) -> list[str]:
        """Every run id with a file here, sorted."""
        runs = []
        for p in self.directory.glob("*.jsonl"):
            try:
                runs.append(validate_run_id(p.stem))
            except ValueError:
                continue  # a foreign file; load() would refuse its id anyway
        return sorted(runs)

    def delete(self, run_id: str) -> None:
        """Remove a run's file (used by `prune`)."""
        self.path(run_id).unlink(missing_ok=True)
        self._counts.pop(run_id, None)
