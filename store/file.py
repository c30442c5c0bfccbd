"""`FileStore`: one append-only JSONL file per run, fsynced line by line.

A crash is the case this exists for, so every line is flushed and fsynced,
a torn final line is skipped on load and cut off before the next append
(appending onto it would glue a good event to the fragment; a whole event
that only lacks its newline is ended instead, never cut), and a run id
that could escape the directory or hide a file is refused. The logs hold
prompts and tool results in the clear, so files and the directory are
created readable by their owner only. The store writes only inside its
directory, whatever that directory holds: a run's file is opened without
following links, and one that is a symbolic link, a hard link, a FIFO or
anything but a regular file is refused. A log whose content does not match
its run is never deleted: `set_aside` renames it beside the others, and
`replace_log` puts a whole new log in its place by one rename, both holding
the lock writers take (a writer that opened the old log first then opens the
new one). A log in UTF-16 or UTF-32 is refused, never read as a few events.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from agentor_temporal.store._file_io import (
    SET_ASIDE_MODE,
    _after_last_newline,
    _append_whole,
    _check_encoding,
    _identity,
    _last_byte,
    _make_directory,
    _move_aside,
    _open_locked,
    _open_safely,
)
from agentor_temporal.store._file_io import UnsafeLogFile as UnsafeLogFile  # its home before
from agentor_temporal.store.base import validate_run_id
from agentor_temporal.store.encoding import read_json
from agentor_temporal.store.events import Event, with_readable_counts

logger = logging.getLogger(__name__)


class FileStore:
    """One append-only `<run_id>.jsonl` file per run in `directory`.

    Args:
        directory: where run files live; created if missing. A relative one is
            taken from the working directory the store is made in, once.
    """

    def __init__(self, directory: str | os.PathLike[str] = "runs") -> None:
        # made absolute now: the working directory is the process's, and a tool
        # that changes it (a coding agent's `cd`, os.chdir into a checkout) moved
        # every later write of a relative store there, leaving the log where the
        # run began cut short (a resume from it ran the agent again from the cut)
        self.directory = Path(directory).absolute()
        #: the directory as given, as the store is shown (`repr`)
        self._given = str(directory)
        _make_directory(self.directory)
        # (file identity, event count) per run: counting is on the mirror's hot
        # path, and re-parsing a long log on every step is quadratic. Keyed by
        # the file's identity (inode, size, mtime), not its size alone: an edit
        # that keeps the size (a byte damaged, a line rewritten) made the
        # store count events that no longer load, and never write them again.
        self._counts: dict[str, tuple[tuple[int, int, int], int]] = {}
        # one lock per run, not per store: runs mirror concurrently, and an
        # fsync of one must not queue behind another's
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # the identity (inode, size, mtime) of each run's file as this store
        # last wrote it: a file that no longer matches was touched by someone
        # else, and must be checked before it is extended
        self._written: dict[str, tuple[int, int, int]] = {}

    def __repr__(self) -> str:
        return f"FileStore({self._given!r})"

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

    def append_next(
        self, run_id: str, start: int, events: list[Event]
    ) -> tuple[int, bool, int | None]:
        """The mirror's usual step in one visit: `(count, unchanged, new length)`.

        What `count` and `unchanged` say, and when the log is exactly `start`
        events long and unchanged, `events` appended (the new length; also
        when it already holds exactly them). None when the log must be
        checked first (a gap, an overlap, a file someone else touched).

        The same checks as `count`, `unchanged` and `append_from` in turn,
        with under half their system calls (10 instead of 22 for an append:
        one open and one lock, the file read and written through its
        descriptor, nothing looked up by name again). A busy worker pays for
        each call twice: the writing thread lets go of the GIL for it, then
        waits for the event loop to hand it back.
        """
        path = self.path(run_id)
        flags = os.O_RDWR | os.O_APPEND
        with self._run_lock(run_id):
            try:
                # a new run's first step: its file is made here
                fd, created, st = _open_locked(
                    path, flags | (os.O_CREAT | os.O_EXCL if start == 0 else 0)
                )
            except FileNotFoundError:  # as `count` and `unchanged` say for no file
                return 0, True, None
            try:
                identity = _identity(st)
                # a file made just now is as new as no file: unchanged, empty
                same = created or self._written.get(run_id) == identity
                cached = self._counts.get(run_id)
                if cached is not None and cached[0] == identity:
                    have = cached[1]
                elif created:
                    have = 0
                else:
                    have = self._read_count(run_id)
                    self._counts[run_id] = (identity, have)
                if same and events and have == start + len(events):
                    return have, same, have
                if not (same and have == start):
                    return have, same, None
                if not events:
                    return have, same, have
                if st.st_size > 0 and _last_byte(fd, st.st_size) != b"\n":
                    torn = True  # rare: cut by `append_from` below, under its own open
                else:
                    torn = False
                    _append_whole(fd, st.st_size, events)
                    after = _identity(os.fstat(fd))
                    self._counts[run_id] = (after, have + len(events))
                    self._written[run_id] = after
            finally:
                os.close(fd)
        if torn:
            return have, same, self.append_from(run_id, start, events)
        return have, same, start + len(events)

    @contextlib.contextmanager
    def _locked(self, run_id: str) -> Iterator[BinaryIO]:
        path = self.path(run_id)
        with self._run_lock(run_id):
            fd, _, _ = _open_locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                f = cast(BinaryIO, os.fdopen(fd, "rb+"))
            except BaseException:
                os.close(fd)
                raise
            with f:
                yield f

    def _write(self, run_id: str, f: BinaryIO, events: list[Event]) -> None:
        before: tuple[int, int, int] | None = _identity(os.fstat(f.fileno()))
        size = f.seek(0, os.SEEK_END)
        if size > 0:
            _check_encoding(f, self.path(run_id))  # UTF-8 lines are not added to another
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                self._mend_torn_tail(f, self.path(run_id))
                before = None  # counted afresh: the mend changed the file
        f.flush()
        # written past the buffer: bytes a failed write left in it would land at close
        _append_whole(f.fileno(), os.fstat(f.fileno()).st_size, events)
        after = _identity(os.fstat(f.fileno()))
        cached = self._counts.get(run_id)
        if cached is not None and cached[0] == before:
            self._counts[run_id] = (after, cached[1] + len(events))
        else:
            self._counts.pop(run_id, None)
        self._written[run_id] = after

    @staticmethod
    def _mend_torn_tail(f: BinaryIO, path: Path) -> None:
        """End a final line that lacks its newline: ended if it is a whole event, else cut.

        A hard kill mid-write leaves a fragment, which `load` skips and which
        is dropped. A whole event without its newline (a log cut just before
        it, a copy or an editor that strips the last newline) is one `load`
        reads and the caller counted: cut, it was lost from the log for good,
        since the events after it are appended by position.
        """
        size = f.seek(0, os.SEEK_END)
        keep = _after_last_newline(f, size)
        f.seek(keep)
        if _readable(f.read(size - keep)):
            logger.warning("Ending the last line of %s, which lacked its newline", path)
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
            return
        logger.warning(
            "Removing a torn final line (%d bytes) from %s before appending",
            size - keep,
            path,
        )
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())

    def unchanged(self, run_id: str) -> bool:
        """Whether the run's file is exactly as this store last wrote or vouched for it.

        True for a run without a file. False once anything else touched it
        (another process, a person, a copy over it): its content must then be
        checked against the run's record before it is extended.
        """
        try:
            st = os.stat(self.path(run_id), follow_symlinks=False)
        except FileNotFoundError:
            return True
        return self._written.get(run_id) == _identity(st)

    def vouch(self, run_id: str) -> None:
        """Record the run's file as checked: `unchanged` is True until it changes."""
        with contextlib.suppress(FileNotFoundError):
            self._written[run_id] = _identity(os.stat(self.path(run_id), follow_symlinks=False))

    def set_aside(self, run_id: str) -> str | None:
        """Rename the run's file out of the way (never delete it); return its new name.

        The new name (`<id>.jsonl.damaged-<UTC time>`) is not a run's file, so
        `list_runs` and `load` ignore it; None when there was no file. Done
        holding the file's lock, as writers hold it: a writer in another
        process waiting for it then finds the file gone and opens the new one.
        """
        with self._run_lock(run_id), self._held(run_id) as mark:
            return self._move_aside(run_id, None, mark)

    def replace_log(
        self, run_id: str, events: list[Event], wrong: Callable[[], bool]
    ) -> str | None:
        """Set the run's file aside and put a log of `events` in its place, if still `wrong()`.

        Under one lock, the one writers take: `wrong` is asked again under it
        (another worker may have put a right log there meanwhile), and the new
        log, written whole beside it first, replaces the old one in one rename.
        A reader or writer never finds the run without a log, or half of one,
        and a writer that opened the old log before never writes into the
        copy set aside. Returns the set-aside name; None when nothing was wrong.
        """
        path = self.path(run_id)
        with self._run_lock(run_id), self._held(run_id) as mark:
            if not wrong():
                return None
            fresh = path.with_name(f"{path.name}.rewrite-{os.getpid()}-{time.time_ns()}")
            try:
                with _open_safely(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL) as g:
                    _append_whole(g.fileno(), 0, events)
                moved = self._move_aside(run_id, fresh, mark)
            except BaseException:
                with contextlib.suppress(OSError):
                    fresh.unlink()
                raise
            after = _identity(os.stat(path, follow_symlinks=False))
            self._counts[run_id] = (after, len(events))
            self._written[run_id] = after
            return moved

    @contextlib.contextmanager
    def _held(self, run_id: str) -> Iterator[Callable[[], None]]:
        """The exclusive lock of the run's file, when it is one this store would open;
        yields what marks the file set aside (read-only) for writers waiting for the lock.
        """
        try:
            fd, _, st = _open_locked(self.path(run_id), os.O_RDONLY)
        except (FileNotFoundError, UnsafeLogFile):  # no file, or a link: moved all the same
            yield lambda: None
            return

        def mark() -> None:
            if hasattr(os, "fchmod"):  # pragma: no branch - not on Windows before 3.13
                with contextlib.suppress(OSError):  # a filesystem without modes: as before
                    os.fchmod(fd, SET_ASIDE_MODE)

        try:
            yield mark
        except BaseException:
            with contextlib.suppress(OSError, AttributeError):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))  # not set aside after all
            raise
        finally:
            os.close(fd)

    def _move_aside(
        self, run_id: str, replacement: Path | None, mark: Callable[[], None]
    ) -> str | None:
        moved = _move_aside(self.path(run_id), replacement, mark)
        if moved is not None:
            self._counts.pop(run_id, None)
            self._written.pop(run_id, None)
        return moved

    def retract(self, run_id: str, keep: int) -> str | None:
        """Move the run's events from position `keep` on into a side file; return its name.

        For events written ahead of the run's record that the record then did
        not keep (a workflow task whose worker was lost after mirroring): they
        are moved, never deleted, to `<id>.jsonl.unconfirmed-<UTC time>`.
        None when there was nothing past `keep`.
        """
        path = self.path(run_id)
        with self._locked(run_id) as f:
            f.seek(0)
            cut, seen, position = None, 0, 0
            # line by line: a long run's log (every request whole) may not fit in memory
            for line in f:
                if line.strip():
                    if seen == keep:
                        cut = position
                        break
                    seen += _readable(line)
                position += len(line)
            if cut is None:
                return None
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            side = path.with_name(f"{path.name}.unconfirmed-{stamp}-{time.time_ns() % 10**6}")
            try:
                with _open_safely(side, os.O_RDWR | os.O_CREAT | os.O_EXCL) as g:
                    f.seek(cut)
                    shutil.copyfileobj(f, g)
                    g.flush()
                    os.fsync(g.fileno())
            except OSError:
                # a full disk: the log keeps its events, and no half copy is left beside it
                with contextlib.suppress(OSError):
                    side.unlink()
                raise
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())
            self._counts.pop(run_id, None)
            self._written[run_id] = _identity(os.fstat(f.fileno()))
            return side.name

    def load(self, run_id: str) -> list[Event]:
        """Every readable event of the run, in order ([] for an unknown run).

        Raises:
            UnsafeLogFile: when the run's file is a link or not a regular file.
        """
        return list(self.iterate(run_id))

    def iterate(self, run_id: str) -> Iterator[Event]:
        """`load`'s events one at a time, read line by line.

        Never the whole file at once: a generation's line holds its whole
        request, so a long run's log grows with the square of its turns (500
        turns of 2 KB: 265 MB), and counting it after a worker restart held
        the file and every event in memory (890 MB), each time.
        """
        path = self.path(run_id)
        try:
            with _open_safely(path, os.O_RDONLY) as f:
                _check_encoding(f, path)
                for number, raw in enumerate(f, 1):
                    line = raw.strip()
                    if not line:
                        continue
                    try:
                        data = read_json(line)
                        if not isinstance(data, dict):
                            raise ValueError("not a JSON object")
                        event = Event.from_dict(with_readable_counts(data))
                    except UNREADABLE as exc:
                        # a torn final line is expected after a hard kill; anything
                        # that parsed before it is still the run's story
                        logger.warning("Skipping unreadable event at %s:%d (%s)", path, number, exc)
                        continue
                    yield event
        except FileNotFoundError:
            return

    def _read_count(self, run_id: str) -> int:
        """How many events `load` reads, holding one at a time."""
        return sum(1 for _ in self.iterate(run_id))

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
            identity = _identity(os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            return 0
        cached = self._counts.get(run_id)
        if cached is not None and cached[0] == identity:
            return cached[1]
        count = self._read_count(run_id)
        self._counts[run_id] = (identity, count)
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
        self._written.pop(run_id, None)


#: what reading one line may raise: bad JSON or fields (ValueError, TypeError),
#: nesting deeper than the parser recurses (a token count no int holds is read as 0:
#: `with_readable_counts`)
UNREADABLE = (ValueError, TypeError, RecursionError, OverflowError)


def _readable(line: bytes) -> int:
    """1 when `load` would read an event from this line, else 0."""
    try:
        data = read_json(line)
        if isinstance(data, dict):
            Event.from_dict(with_readable_counts(data))
            return 1
    except UNREADABLE:
        pass
    return 0
