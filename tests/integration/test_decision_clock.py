"""A decision command's own worker is given the time it takes to start.

`approve`/`deny --agent` serve the run from the command's process while it
takes the decision, and `--wait` bounds how long a worker takes to take it.
The bound ran from before that process's own worker started: on a loaded
machine its start (imports, the workflow's sandbox check, the model client:
20 s at load 12) used up the 30 s default, and the command said "No worker
took the decision ... within 30 s" while its own worker was about to take it.
The bound now runs once the command's worker polls. And a `--wait` past the
facade's own bound (`DECISION_PATIENCE`, 60 s) was cut to it, still saying
"within" the `--wait` given: it is now the bound.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import transfer_tool, weather_agent
from integration.test_cli import cli
from integration.test_cli_approval import agent_env

#: how long the command's own worker takes to start, past the `--wait` it is given
START, WAIT = 10, 8
#: the facade's own bound in the command's process, as 60 s is to a `--wait 120`
PATIENCE = 0.01


async def test_a_decision_waits_for_the_commands_own_worker_to_start(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    ledger = str(tmp_path / "ledger")
    script = [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
        CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_eve"),
        Reply("Paid."),
    ]
    with ScriptedModelServer(script) as model:
        # paused on a worker of this process (a command's own costs ~3 s of imports), gone then
        here = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            name="Treasurer",
            tools=[transfer_tool(ledger)],
            embedded_worker=False,
        )
        async with build_worker(client, [here], task_queue=task_queue):
            paused = await asyncio.wait_for(here.arun("Pay bob 5000"), 60)
            other = await asyncio.wait_for(here.arun("Pay eve 9000"), 60)
        assert [paused.status, other.status] == ["awaiting_approval"] * 2
        env = {**agent_env(model, task_queue, ledger), "WORKER_START_SECONDS": str(START)}
        env["DECISION_PATIENCE_SECONDS"] = str(PATIENCE)
        common = ["--wait", str(WAIT), "--temporal", temporal_address]
        # and one served on another task queue than its run's: no worker can take it
        elsewhere = {**agent_env(model, f"{task_queue}-other", ledger), "WORKER_START_SECONDS": "0"}
        approved, unserved = await asyncio.gather(
            asyncio.to_thread(
                cli,
                "approve", paused.run_id, "call_pay", "--by", "alice",
                "--agent", "procs.slow_start_agents:treasurer", *common,
                env=env,
            ),
            asyncio.to_thread(
                cli,
                "deny", other.run_id, "call_eve", "--reason", "no",
                "--agent", "procs.slow_start_agents:treasurer", *common,
                env=elsewhere,
            ),
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "approved call_pay (turn 1)" in approved.stdout
        assert "Traceback" not in approved.stderr
    # one line, naming what was waited for and what to check (not to pass the --agent given)
    assert unserved.returncode == 1, unserved.stderr
    [line] = unserved.stderr.strip().splitlines()
    assert f"No worker took the decision on call_eve of run {other.run_id} within {WAIT} s" in line
    assert "Pass --agent" not in line and "procs.slow_start_agents:treasurer" in line, line
