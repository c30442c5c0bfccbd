"""The CLI's own writes and removals on a disk that refuses them (full, read-only): each
command says in one line what it could not do and leaves nothing half done behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal.testing import ScriptedModelServer, tool_then_answer

from helpers import ROOT, scripted_agent
from integration.test_cli import cli
from integration.test_disk_full import fill, small_disk

pytestmark = pytest.mark.slow

FIXTURES = ROOT / "tests" / "fixtures"


def test_prune_on_a_read_only_disk_says_each_log_it_could_not_remove(tmp_path: Path) -> None:
    """A runs directory remounted read-only: prune ended at the first log it could not
    remove with the bare '[Errno 30] Read-only file system: <path>', no word of the
    other logs or of what it had removed already. Now each log it could not remove is
    kept saying why, the summary counts them, and the exit status is 1."""
    with small_disk(tmp_path / "disk") as disk:
        runs = disk / "runs"
        runs.mkdir()
        old = time.time() - 40 * 86400
        for run_id in ("done-a", "done-b"):
            path = runs / f"{run_id}.jsonl"
            shutil.copy(FIXTURES / "completed-weather-run.jsonl", path)
            os.utime(path, (old, old))
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        # Temporal unreachable: the logs alone decide (no server needed for this case)
        done = cli(
            "prune", "--store", str(runs), "--older-than", "30d", "--temporal", "127.0.0.1:1"
        )

    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    said = done.stdout.splitlines()
    for run_id in ("done-a", "done-b"):
        assert (
            f"kept         {run_id}  finished (completed), last written 40d ago, but could not "
            "be removed: Read-only file system"
        ) in said, said
    assert said[-1] == f"{runs}: 0 removed, 2 kept (2 could not be removed)", said


async def test_export_to_a_full_disk_leaves_nothing_and_says_so(
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    temporal_address: str,
    tmp_path: Path,
) -> None:
    """`export -o FILE` onto a full disk: it ended with the bare '[Errno 28] No space left on
    device' and left its empty '.FILE.partial' beside FILE. Now the partial file is
    removed, an existing FILE is left as it was, and the line says what was not written."""
    model.set_script(tool_then_answer)
    agent = scripted_agent(model, client, task_queue)
    result = await agent.arun("What is the weather in London?", run_id=uuid.uuid4().hex)
    assert result.status == "completed"
    with small_disk(tmp_path / "disk") as disk:
        target = disk / "out.jsonl"
        target.write_text("before\n")
        fill(disk)
        done = cli("export", result.run_id, "-o", str(target), "--temporal", temporal_address)
        left = sorted(p.name for p in disk.iterdir())
        kept = target.read_text()

    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert left == ["filler", "out.jsonl"], left
    assert kept == "before\n"
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: cannot write {target}: No space left on device; "
        f"the export of run {result.run_id} was not written ({target} is unchanged)"
    ), done.stderr
