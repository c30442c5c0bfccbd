"""Files that hold runs in the clear are created readable by their owner only."""

from __future__ import annotations

import os
from pathlib import Path

SECRET = "What is the weather in Quixotica?"


def test_store_logs_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    """FileStore creates its directory 0700 and each run's log 0600, whatever the umask."""
    from agentor_temporal import Event, FileStore

    old = os.umask(0o022)
    try:
        store = FileStore(tmp_path / "runs")
        store.append("r1", Event(type="run_start", messages=[{"role": "user", "content": SECRET}]))
    finally:
        os.umask(old)
    assert (tmp_path / "runs").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "runs" / "r1.jsonl").stat().st_mode & 0o777 == 0o600
    assert SECRET in (tmp_path / "runs" / "r1.jsonl").read_text()  # the mirror stays plain
