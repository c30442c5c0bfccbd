"""`prune` while runs are resumed: a log is never removed while its run runs again."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import FileStore
from agentor_temporal._prune import apply, plan

from helpers import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
DAY = 86400.0


async def test_a_run_resumed_between_prunes_decision_and_removal_keeps_its_log(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`plan` asks Temporal about every log first (seconds for many), then `apply` removes:
    a run resumed meanwhile, its worker not yet writing to its log (busy, or down), had its
    log removed as finished while it ran again. Now Temporal is asked again before removing."""
    store = FileStore(tmp_path)
    run_id = f"resumed-{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{run_id}.jsonl"
    shutil.copy(FIXTURES / "completed-weather-run.jsonl", path)
    old = time.time() - 40 * DAY
    os.utime(path, (old, old))
    verdicts = await plan(store, 30 * DAY, client)
    assert [(v.run_id, v.remove) for v in verdicts] == [(run_id, True)]
    # resumed now: its execution runs, on a queue no worker serves yet
    handle = await client.start_workflow(
        "AgentRun",
        {"agent": "Weather Agent", "input": "Weather in Paris?"},
        id=run_id,
        task_queue=f"{task_queue}-unserved",
    )
    try:
        await apply(store, verdicts, client)
    finally:
        await handle.terminate("test over")
    assert path.exists()
    assert [v.reason for v in verdicts] == ["resumed while pruning: running in Temporal again"]
