"""The low-level file operations of `FileStore`: safe opens, whole-line appends.

A run's file is opened without following links out of the store's
directory, and refused if it is not a plain regular file; lines are
appended through the descriptor and fsynced, or, if a write fails part-way
(a full disk), cut back off so the log stays whole lines.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from agentor_temporal.store.events import Event

try:  # POSIX: lets two worker processes share one runs directory safely
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

# the store's own logger name: the worker's redaction filter knows it
logger = logging.getLogger("agentor_temporal.store.file")

#: Opened without following a symbolic link in the last component (where the
#: platform can), and without blocking on a FIFO planted under a run's name.
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafeLogFile(OSError):
    """A run's file is a link or not a regular file: the store refuses to use it."""


#: Bytes of lines joined into one write: many events are written at once
#: (a fork's parent's events up to the fork, a set-aside copy's replacement).
_PART_BYTES = 1 << 20


def _parts(events: list[Event]) -> Iterator[bytes]:
    """The events' JSONL lines, joined into writes of about `_PART_BYTES` (a longer line alone).

    Never all at once: a generation's line holds its whole request, so a long
    run's log grows with the square of its turns, and writing a fork's first
    events (its parent's up to the fork) joined all of their text in memory.
    """
    batch: list[bytes] = []
    size = 0
    for event in events:
        line = (event.to_json() + "\n").encode("utf-8")
        if batch and size + len(line) > _PART_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
        batch.append(line)
        size += len(line)
    if batch:
        yield b"".join(batch)


def _append_whole(fd: int, size: int, events: list[Event]) -> None:
    """Write the events' lines at the end of the file (`size` bytes now) and fsync them,
    or, if a write fails part-way (ENOSPC, EIO, a quota), cut the file back to `size`.

    A full disk takes the part of a line that fits, then refuses the rest: left
    there, readers met a torn line ("Skipping unreadable event") until the next
    append cut it. Truncating needs no free space.
    """
    try:
        for data in _parts(events):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        # fsync: a crash is the case this store exists for
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _after_last_newline(f: BinaryIO, size: int, block: int = 1 << 20) -> int:
    """The offset just past the file's last newline (0 without one), read from the end."""
    end = size
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _last_byte(fd: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, 1, size - 1)
    os.lseek(fd, size - 1, os.SEEK_SET)  # Windows: no pread (appends still go to the end)
    return os.read(fd, 1)


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def _open_safely(path: Path, flags: int) -> Iterator[BinaryIO]:
    """Open a run's file without following a link out of the store's directory.

    Raises:
        UnsafeLogFile: for a symbolic link, a hard link (the same file also
            lives elsewhere), or anything but a regular file.
        FileNotFoundError: when it does not exist (and `flags` do not create it).
    """
    fd = _open_fd(path, flags)
    try:
        mode = "rb" if flags & (os.O_WRONLY | os.O_RDWR) == 0 else "rb+"
        f = cast(BinaryIO, os.fdopen(fd, mode))
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def _open_fd(path: Path, flags: int, *, linked: bool = True) -> int:
    """Open a run's file without following a link out of the store's directory.

    Raises:
        UnsafeLogFile: for a symbolic link, a hard link (the same file also
            lives elsewhere), or anything but a regular file.
        FileNotFoundError: when it does not exist (and `flags` do not create it).
    """
    if not _NO_FOLLOW & getattr(os, "O_NOFOLLOW", 0) and path.is_symlink():
        raise UnsafeLogFile(errno.ELOOP, _refusal(path, "it is a symbolic link"))
    try:
        # owner only: the logs hold prompts and tool results in the clear
        fd = os.open(path, flags | _NO_FOLLOW | _CLOEXEC, 0o600)
    except FileNotFoundError:
        if not flags & os.O_CREAT or os.path.lexists(path.parent):  # a link or file there: refused
            raise
        # the store's directory went away under a running worker (a volume
        # remounted empty, removed by hand): made again, as the store made it
        # at start, so the mirror writes the runs again from Temporal's record
        logger.warning("The store's directory %s is gone; making it again", path.parent)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return _open_fd(path, flags, linked=linked)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and path.is_symlink()):
            raise UnsafeLogFile(errno.ELOOP, _refusal(path, "it is a symbolic link")) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise UnsafeLogFile(exc.errno, _refusal(path, "it is not a regular file")) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeLogFile(errno.EINVAL, _refusal(path, "it is not a regular file"))
        again = st.st_nlink > 1 and _linked_for_a_moment(fd, path, linked)
        if st.st_nlink > 1 and not again:
            raise UnsafeLogFile(
                errno.EMLINK,
                _refusal(path, f"it has {st.st_nlink} hard links (writes would land elsewhere)"),
            )
        # regular files ignore O_NONBLOCK; cleared anyway so writes block as usual
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if again:
        os.close(fd)
        return _open_fd(path, flags, linked=False)
    return fd


def _linked_for_a_moment(fd: int, path: Path, first: bool) -> bool:
    """Whether a second name of the file may be a rewrite's, gone once its lock is let go.

    `FileStore.replace_log` links the old log beside itself, then puts the new
    one in its place, holding the old one's lock: a file opened in between
    has two names for that moment. It is waited for (a shared lock), then
    opened again; a file with two names after that is a hard link, refused.
    """
    if not first or fcntl is None:
        return False
    # polled, not blocked on: this process may itself hold the file's exclusive lock
    # (a rewrite reading the log it set aside), and would wait on itself for good
    deadline = time.monotonic() + _LINK_PATIENCE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False  # a hard link after all: refused
            time.sleep(0.005)
    _undo_interrupted_set_aside(fd, path)
    return True


#: How long an open waits for a rewrite holding a log with two names (seconds).
_LINK_PATIENCE = 10.0


def _undo_interrupted_set_aside(fd: int, path: Path) -> None:
    """Remove a side name of the log left by a set-aside killed before it replaced the log.

    Killed between its link and its rename, a rewrite left the log with two
    names, its own and `<id>.jsonl.damaged-<time>`: refused as a hard link by
    every later step, the run's mirror was dead until a person moved it. The
    side name goes (nothing is lost: it is the same file, still at `path`),
    and the next step that finds the log wrong sets it aside again. Called
    holding the file's shared lock: no set-aside of it is under way.
    """
    here = os.fstat(fd)
    for side in path.parent.glob(f"{glob.escape(path.name)}.damaged-*"):
        try:
            there = os.stat(side, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
            logger.warning(
                "Removing %s, a second name of %s left by a set-aside that was interrupted",
                side.name,
                path,
            )
            with contextlib.suppress(FileNotFoundError):
                side.unlink()
            if not here.st_mode & stat.S_IWUSR:  # marked set aside: the run's log again
                os.fchmod(fd, stat.S_IMODE(here.st_mode) | stat.S_IWUSR)


#: The mode a log set aside is given while its lock is held: no longer the run's log.
SET_ASIDE_MODE = 0o400


def _open_locked(path: Path, flags: int) -> tuple[int, bool, os.stat_result]:
    """Open a run's file and hold its exclusive lock: (descriptor, whether it was made, its stat).

    Locked, the file must still be the one at `path`: a writer that opened a
    log just before another process set it aside (renamed, and put a new log
    in its place) took the lock after, and wrote into the copy set aside. It
    opens the file at `path` again instead. A file is set aside holding this
    lock and made read-only first, so a writable file is still the run's
    without looking its name up again (the mirror's usual step stats nothing
    by name). O_EXCL in `flags` asks to know whether the file was made here
    (then made, or opened if it was there).
    """
    for _ in range(100):
        created = False
        if flags & os.O_EXCL:
            try:
                fd = _open_fd(path, flags)
                created = True
            except FileExistsError:
                fd = _open_fd(path, flags & ~(os.O_EXCL | os.O_CREAT))
        else:
            fd = _open_fd(path, flags)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if fcntl is None or st.st_mode & stat.S_IWUSR or _same_file(st, path):
                return fd, created, st
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{path} kept being replaced while it was opened")


def _same_file(here: os.stat_result, path: Path) -> bool:
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _check_encoding(f: BinaryIO, path: Path) -> None:
    """Refuse a log in UTF-16 or UTF-32 (a Windows tool re-saved it); leaves `f` at its start.

    Read line by line as UTF-8, such a log gave its first event alone, every
    other line skipped as unreadable: resumed, the run started over, asking
    the model again and running its tools again. A UTF-8 BOM is read past.

    Raises:
        UnsafeLogFile: naming the file and what it holds.
    """
    f.seek(0)
    head = f.read(4)
    f.seek(0)
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        found = "UTF-32 text"
    elif head.startswith((b"\xff\xfe", b"\xfe\xff")):
        found = "UTF-16 text"
    elif len(head) >= 2 and (head[0] == 0) != (head[1] == 0):
        found = "UTF-16 or UTF-32 text"  # no BOM: every other byte of `{"` is NUL
    else:
        return
    raise UnsafeLogFile(
        errno.EILSEQ,
        f"Refusing to use {path}: it is {found}, not UTF-8 (a Windows tool may have "
        "re-saved it); convert it to UTF-8 (one JSON event per line) to continue.",
    )


def _refusal(path: Path, why: str) -> str:
    return (
        f"Refusing to use {path}: {why}. A FileStore reads and writes only regular "
        "files inside its own directory; move it away to continue."
    )


def _make_directory(directory: Path) -> None:
    """Make the store's directory (owner only), or say why the path cannot be one."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:  # there, and no directory: "File exists" said nothing of it
        if directory.is_symlink():
            gone = not directory.exists()
            what = f"a symbolic link to {os.readlink(directory)!r}, which " + (
                "does not exist" if gone else "is not a directory"
            )
        else:
            what = "a file, not a directory"
        raise FileExistsError(errno.EEXIST, f"{directory} is {what}") from None


def _move_aside(
    path: Path, replacement: Path | None, mark: Callable[[], None] = lambda: None
) -> str | None:
    """Give the file a free side name, then put `replacement` (or nothing) at its own.

    Linked to the side name, then replaced (or unlinked): never replaces a
    file that appeared at the side name meanwhile, and never leaves the run
    without a log between the old one and the new one. Returns the side
    name; None when there was no file (then `replacement` is the log).
    `mark` marks the old log set aside, once it has its side name.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for n in range(1000):
        target = path.with_name(f"{path.name}.damaged-{stamp}{f'-{n}' if n else ''}")
        if target.exists() or target.is_symlink():
            continue
        try:
            os.link(path, target, follow_symlinks=False)
        except FileNotFoundError:  # no file (any more): the new log is all there is
            if replacement is not None:
                os.rename(replacement, path)
            return None
        except FileExistsError:
            continue
        except OSError as exc:  # no hard links here (some FUSE, FAT)
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            mark()
            os.rename(path, target)
            if replacement is not None:
                os.rename(replacement, path)
        else:
            try:
                mark()
                if replacement is not None:
                    os.replace(replacement, path)
                else:
                    os.unlink(path)
            except BaseException:
                with contextlib.suppress(OSError):
                    target.unlink()  # the old log keeps its one name
                raise
        return target.name
    raise OSError(errno.EEXIST, f"no free name to set {path} aside")
