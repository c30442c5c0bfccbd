"""The FileStore's disk full (ENOSPC on a small tmpfs) while a run writes its mirror."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import ledger_lines, scripted_agent

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at `where` (root only: skipped elsewhere)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte; return the filler's path."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


async def test_a_full_disk_tears_no_line_and_the_mirror_catches_up(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Writes that hit ENOSPC part-way (a line half written) leave no torn line in the
    middle of the log: once space is back, the mirror holds each event once, as Temporal."""
    with small_disk(tmp_path / "disk") as disk:
        runs = disk / "runs"
        filler: list[Path] = []
        seen: list[bytes] = []

        @function_tool
        def read_big(n: int) -> str:
            """Read part n."""
            with open(ledger, "a") as f:
                f.write(f"read_big {n}\n")
            if n == 1:
                filler.append(fill(disk))  # the disk is full from here
            else:
                # the mirror's write failed part-way meanwhile: the log is whole lines still
                logs = list(runs.glob("*.jsonl"))
                seen.extend(path.read_bytes()[-1:] for path in logs)
                filler[0].unlink()  # and has room again
            return f"part {n}: " + "y" * 9000

        def respond(request: dict[str, Any]) -> Any:
            done = sum(1 for m in request.get("messages") or [] if m.get("role") == "tool")
            return CallTool("read_big", {"n": done + 1}) if done < 2 else Reply("Read both.")

        model.set_script(respond)
        store = FileStore(runs)
        agent = scripted_agent(model, client, task_queue, store=store, tools=[read_big])
        with caplog.at_level(logging.WARNING):
            result = await agent.arun("Read two parts.", run_id=uuid.uuid4().hex)

        assert result.status == "completed" and result.final_output == "Read both."
        assert ledger_lines(ledger) == ["read_big 1", "read_big 2"]
        projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
        lines = (runs / f"{result.run_id}.jsonl").read_bytes().split(b"\n")
        assert lines[-1] == b"" and all(line.startswith(b"{") for line in lines[:-1]), lines
        assert [e.to_dict() for e in store.load(result.run_id)] == projected
        assert seen == [b"\n"], seen
        said = [r.getMessage() for r in caplog.records]
        assert any("No space left on device" in m for m in said), said
        assert not [m for m in said if "torn" in m or "unreadable" in m or "aside" in m], said


async def test_a_store_directory_gone_mid_run_is_made_again_and_written_whole(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The runs directory removed under a running worker (a volume remounted empty): the
    mirror makes it again, says so once, and ends holding the whole run. Before, every step
    failed with FileNotFoundError (warnings with tracebacks) and the mirror ended empty."""
    runs = tmp_path / "runs"

    @function_tool
    def step(n: int) -> str:
        """Take step n."""
        if n == 1:
            shutil.rmtree(runs)
        return f"step {n} done"

    def respond(request: dict[str, Any]) -> Any:
        done = sum(1 for m in request.get("messages") or [] if m.get("role") == "tool")
        return CallTool("step", {"n": done + 1}) if done < 2 else Reply("Done.")

    model.set_script(respond)
    store = FileStore(runs)
    agent = scripted_agent(model, client, task_queue, store=store, tools=[step])
    with caplog.at_level(logging.WARNING):
        result = await agent.arun("Take two steps.", run_id=uuid.uuid4().hex)

    assert result.status == "completed" and result.final_output == "Done."
    projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
    assert [e.to_dict() for e in store.load(result.run_id)] == projected
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "is gone; making it again" in m] == [
        f"The store's directory {runs} is gone; making it again"
    ], said
    assert not [m for m in said if "Completing activity as failed" in m], said
