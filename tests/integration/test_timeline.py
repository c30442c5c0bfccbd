"""`agentor-temporal show RUN_ID --timeline run.png`: a run drawn from its history.

The run has everything the picture shows: two tool calls in one turn whose
worker is SIGKILLed mid-call (a worker change, two retried calls), a model
request retried after a 503, and a transfer that waits for a person. The
PNG is checked for its size, the counts it was drawn from (written into it),
and the colours of each kind of bar. `UPDATE_DOCS=1` also copies it to
docs/timeline.png, the picture in the README.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from PIL import Image
from temporalio.client import Client

from agentor_temporal._runs import send_decision
from agentor_temporal._timeline import COLORS
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer
from agentor_temporal.workflows import Decision

from helpers import ROOT, ledger_lines, spawn, stop_process, wait_until
from integration.test_cli import cli

pytestmark = pytest.mark.slow

SCRIPT = [
    [
        CallTool("get_weather", {"city": "London"}, id="call_london"),
        CallTool("get_weather", {"city": "Paris"}, id="call_paris"),
    ],
    Fail(503, "overloaded"),
    CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_bob"),
    Reply("Sunny in both; sent 5 to bob."),
]


def _pixels_like(image: Image.Image, color: str, tolerance: int = 40) -> int:
    """How many pixels are within `tolerance` of `color` (#rrggbb) on every channel."""
    target = tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))
    count = 0
    for pixels, rgb in image.convert("RGB").getcolors(maxcolors=1 << 24) or []:
        if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True)):
            count += pixels
    return count


async def test_timeline_of_a_run_with_a_crash_retries_and_an_approval(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """The picture has a lane per parallel call, the retries, the wait and both workers."""
    ledger = str(tmp_path / "ledger")
    run_id = uuid.uuid4().hex
    with ScriptedModelServer(SCRIPT) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "MODEL_BASE_URL": model.base_url,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_LEDGER": ledger,
            "APPROVAL": "1",
        }
        first = spawn(["run", "--run-id", run_id], {**env, "TOOL_DELAY": "60"})
        second: subprocess.Popen[str] | None = None
        try:
            wait_until(lambda: len(ledger_lines(ledger)) == 2, "both tool calls to start")
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=10)
            second = spawn(["worker"], env)
            handle = client.get_workflow_handle(run_id)
            await wait_for_pause(client, run_id)
            if os.environ.get("UPDATE_DOCS"):
                await asyncio.sleep(2)  # a wait long enough to see in the README's picture
            await send_decision(client, run_id, Decision("call_bob", True, "fine", "dana"))
            outcome = await handle.result()
        finally:
            stop_process(first)
            stop_process(second)
    assert outcome["status"] == "completed"

    picture = tmp_path / "run.png"
    shown = cli("show", run_id, "--timeline", str(picture), "--temporal", temporal_address)
    assert shown.returncode == 0, shown.stderr
    assert f"drew run {run_id} to {picture}" in shown.stdout
    image = Image.open(picture)
    assert image.format == "PNG"
    assert image.size[0] >= 1200 and image.size[1] >= 400
    assert picture.stat().st_size > 20_000
    assert image.text["Title"] == f"agentor-temporal run {run_id}"
    assert json.loads(image.text["Description"]) == {
        "segments": 1,
        "generations": 3,
        "tool_calls": 3,
        "approvals": 1,
        "retried": 3,  # two calls lost with the worker, one 503
        "workers": 2,
        "worker_changes": 1,
    }
    for kind in ("generation", "tool", "approval", "retry"):
        assert _pixels_like(image, COLORS[kind]) > 200, kind
    if os.environ.get("UPDATE_DOCS"):
        shutil.copy(picture, ROOT / "docs" / "timeline.png")


async def wait_for_pause(client: Client, run_id: str, timeout: float = 60.0) -> None:
    """Until the run waits for a person (the `wait_paused` update returns)."""
    handle = client.get_workflow_handle(run_id)
    state = await asyncio.wait_for(handle.execute_update("wait_paused", result_type=dict), timeout)
    assert state["status"] == "awaiting_approval", state
