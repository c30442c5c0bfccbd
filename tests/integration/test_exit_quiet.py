"""Plain scripts end, and end quietly: under Python's development mode, and with threads.

Python's development mode (`python -X dev`) turns on asyncio's debug mode,
which reports every step that holds an event loop past 100 ms ("Executing
<Task ...> took 1.6 seconds"), and shows the warnings Python hides by default
(ResourceWarning, a coroutine never awaited). The embedded worker runs on the
runtime's loop, beside every other call of the script, so what it does there
must not hold that loop: a script run so exits 0 with nothing on stderr. A
script whose background thread made a call and works on until the main thread
ends exits too. Real processes (`procs/plain_script.py`) against the session's
dev server and a scripted model.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentor_temporal.testing import ScriptedModelServer

from helpers import PROCS, ROOT, weather_or_transfer

pytestmark = pytest.mark.slow

#: asyncio's report of a slow step (debug mode's `slow_callback_duration`, 100 ms)
SLOW_STEP = re.compile(r"^Executing <.*> took (\d+\.\d+) seconds$")
#: Slow steps shorter than this are the machine's load, not ours: on a 2-core
#: machine at load 11 (this suite beside others) steps of a workflow activation
#: or a client's call took up to 0.4 s. The embedded worker's build on the loop
#: took 1.3-1.9 s on an idle machine.
LOAD_NOISE = 1.0


def dev_mode_script(
    address: str, model: ScriptedModelServer, queue: str, tmp_path: Path, *args: str
) -> dict[str, Any]:
    """Run `plain_script.py` under `python -X dev` (120 s at most: 28 s seen at load 9 on 2
    cores, where a 30 s limit was near); fail naming what it said on stderr."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_STORE": str(tmp_path / "runs"),
        "AGENT_LEDGER": str(tmp_path / "ledger"),
        # this checkout's package, not the one installed (a worktree's differs)
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-X", "dev", str(PROCS / "plain_script.py"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr or b""
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        pytest.fail(f"{args[0]} still running after 120 s; its stderr:\n{stderr[-3000:]}")
    said = [
        line
        for line in proc.stderr.splitlines()
        if not ((m := SLOW_STEP.match(line)) and float(m.group(1)) < LOAD_NOISE)
    ]
    assert proc.returncode == 0 and not said, (
        f"{args[0]} exited {proc.returncode} with stderr:\n{proc.stderr[-3000:]}"
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


async def test_a_script_under_dev_mode_exits_quietly(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A run under `python -X dev` (its embedded worker built meanwhile) says nothing on stderr.

    Before, the worker was built on the runtime's loop: "Executing <Task ... start_run()
    ...> took 1.6 seconds" at every first call (and every call after the worker's linger)."""
    with ScriptedModelServer(weather_or_transfer) as model:
        outcome = dev_mode_script(
            temporal_address,
            model,
            task_queue,
            tmp_path,
            "run",
            uuid.uuid4().hex,
            "What is the weather in Paris?",
        )
    assert outcome["status"] == "completed", outcome


async def test_an_async_tool_returning_a_coroutine_answers_with_its_value(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """An `async def` tool whose `await` was forgotten answers with what its coroutine gives.

    Before, the model read "<coroutine object lookup at 0x...>" and the script ended with
    "RuntimeWarning: coroutine 'lookup' was never awaited" on stderr."""
    with ScriptedModelServer(weather_or_transfer) as model:
        outcome = dev_mode_script(
            temporal_address, model, task_queue, tmp_path, "forgot_await", uuid.uuid4().hex
        )
    assert outcome == {"status": "completed", "answers": ["Sunny in Paris"]}, outcome


async def test_a_thread_calling_on_after_the_main_thread_returned_keeps_working(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A non-daemon thread making calls with pauses of seconds between them, not joined.

    Python lets such a thread finish its work, and so does the exit hook. With a wait of
    2 s past a thread's last call (tried), its second call (3 s after the first, the main
    thread returned) was refused: "an agent call while the interpreter exits ... cannot
    run", a traceback on stderr, the run never made."""
    with ScriptedModelServer(weather_or_transfer) as model:
        outcome = dev_mode_script(
            temporal_address, model, task_queue, tmp_path, "producer", uuid.uuid4().hex
        )
    assert outcome == {"status": "completed"}, outcome
