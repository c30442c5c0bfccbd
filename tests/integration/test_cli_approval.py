"""The approval commands: `pending`, `approve`, `deny`, as real CLI processes."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import ledger_lines, wait_line
from integration.test_cli import _env, cli, cli_all, parsed

AGENT = "procs.cli_agents:treasurer"


def agent_env(model: ScriptedModelServer, task_queue: str, ledger: str) -> dict[str, str]:
    """What `procs.cli_agents:treasurer` reads: its model, task queue and ledger."""
    return {
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
    }


def pay_script() -> list[object]:
    return [
        CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
        Reply("Paid."),
        CallTool("transfer", {"amount": 9000, "to": "eve"}, id="call_eve"),
        Reply("Could not pay eve."),
    ]


def test_pending_approve_deny_and_resume(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A paused run shows in `pending`; approve/deny decide; resume finishes; mistakes exit 1/2."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()) as model:
        env = agent_env(model, task_queue, ledger)
        common = ["--temporal", temporal_address]

        started = cli("run", "--agent", AGENT, "Pay bob 5000", "--json", *common, env=env)
        assert started.returncode == 0, started.stderr
        paused = json.loads(started.stdout)
        assert paused["status"] == "awaiting_approval"
        run_id = paused["run_id"]

        # the listings and the refused decisions change nothing: side by side
        listed, table, unknown_call, unknown_run = cli_all(
            [
                ("pending", "--json", *common),
                ("pending", "--agent", "Treasurer", *common),
                ("approve", run_id, "call_nope", "--agent", AGENT, *common),
                ("approve", "no-such-run", "call_pay", *common),
            ],
            env=env,
        )
        # a usage error the parser answers: parsed here (a process costs ~3 s of CPU)
        no_reason_code, _, no_reason_stderr = parsed("deny", run_id, "call_pay", *common)
        assert listed.returncode == 0, listed.stderr
        mine = [row for row in json.loads(listed.stdout) if row["run_id"] == run_id]
        assert [(r["call_id"], r["tool"], r["args"], r["agent"]) for r in mine] == [
            ("call_pay", "transfer", {"amount": 5000, "to": "bob"}, "Treasurer")
        ]
        assert "transfer(amount=5000, to='bob')" in table.stdout

        assert unknown_call.returncode == 1
        assert "no tool call 'call_nope' waiting" in unknown_call.stderr
        assert "Traceback" not in unknown_call.stderr
        assert unknown_run.returncode == 1 and "no-such-run" in unknown_run.stderr
        assert no_reason_code == 2 and "--reason" in no_reason_stderr

        # a worker takes each decision as soon as it can: the wait is a deadline, and a loaded
        # machine's (this run's worker starting, the last one's sticky queue given up) took 30 s
        patience = ["--wait", "120"]
        approved = cli(
            "approve", run_id, "call_pay", "--by", "alice", "--agent", AGENT, *patience, *common,
            env=env, timeout=180,
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "approved call_pay" in approved.stdout
        again = cli(
            "deny", run_id, "call_pay", "--reason", "late", "--agent", AGENT, *patience, *common,
            env=env, timeout=180,
        )  # fmt: skip
        assert again.returncode == 1 and "already approved by alice" in again.stderr

        done = cli("resume", run_id, "--agent", AGENT, "--json", *common, env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["final_output"] == "Paid."
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]


def test_a_deny_reads_its_reason_from_stdin_and_resume_goes_on_without_the_call(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`deny ... --reason -` reads the reason from stdin; resume answers the call as denied.

    (Apart from the test above: eleven CLI processes in one test outran pytest's 180 s
    timeout on a loaded machine.)"""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()[2:]) as model:
        env = agent_env(model, task_queue, ledger)
        common = ["--temporal", temporal_address]
        second = json.loads(
            cli("run", "--agent", AGENT, "Pay eve 9000", "--json", *common, env=env).stdout
        )
        # a reason given as `-` is read from stdin, off the command line (`ps`)
        denied = forkserver.run(
            [sys.executable, "-m", "agentor_temporal", "deny", second["run_id"], "call_eve",
             "--reason", "-", "--agent", AGENT, "--wait", "120", *common],
            env=_env(**env),
            input="unknown payee\n",
            capture_output=True,
            text=True,
            timeout=180,
        )  # fmt: skip
        assert denied.returncode == 0, denied.stderr
        finished = json.loads(
            cli("resume", second["run_id"], "--agent", AGENT, "--json", *common, env=env).stdout
        )
    assert finished["final_output"] == "Could not pay eve."
    decision = next(e for e in finished["events"] if e["type"] == "approval_decision")
    assert decision["status"] == "denied" and decision["text"] == "unknown payee"
    assert ledger_lines(ledger) == []


def test_a_decision_no_worker_takes_is_told_plainly_and_applied_once_one_does(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """No worker serving the run: `approve` exits 1 saying so (no traceback); a worker that
    picks the run up later applies the decision Temporal held, and the transfer runs once."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()) as model:
        env = agent_env(model, task_queue, ledger)
        common = ["--temporal", temporal_address]
        # the run's process (and its embedded worker) has exited
        paused = json.loads(
            cli("run", "--agent", AGENT, "Pay bob 5000", "--json", *common, env=env).stdout
        )
        assert paused["status"] == "awaiting_approval"
        run_id = paused["run_id"]

        unserved = cli(
            "approve", run_id, "call_pay", "--by", "alice", "--wait", "2", *common, env=env
        )
        assert unserved.returncode == 1
        assert f"No worker took the decision on call_pay of run {run_id} within 2 s" in (
            unserved.stderr
        )
        assert "Traceback" not in unserved.stderr

        done = cli("resume", run_id, "--agent", AGENT, "--json", *common, env=env)
        assert done.returncode == 0, done.stderr
    finished = json.loads(done.stdout)
    assert finished["final_output"] == "Paid."
    decision = next(e for e in finished["events"] if e["type"] == "approval_decision")
    assert decision["status"] == "approved"
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]


async def test_an_interrupted_approve_says_its_decision_may_still_be_taken(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """Ctrl+C while `approve` waits for a worker: it says the decision may still be taken, as
    it is (Temporal held it): a worker that picks the run up applies it, the transfer once."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()) as model:
        env = agent_env(model, task_queue, ledger)
        common = ["--temporal", temporal_address]
        started = await asyncio.to_thread(
            cli, "run", "--agent", AGENT, "Pay bob 5000", "--json", *common, env=env
        )
        run_id = json.loads(started.stdout)["run_id"]
        handle = client.get_workflow_handle(run_id)
        assert not (await handle.describe()).raw_description.HasField("pending_workflow_task")
        approving = forkserver.ForkedPopen(
            [sys.executable, "-m", "agentor_temporal", "approve", run_id, "call_pay"]
            + ["--by", "alice", "--wait", "60", *common],
            env=_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # the decision reached Temporal: it holds a workflow task for it
            async with asyncio.timeout(60):
                while not (await handle.describe()).raw_description.HasField(
                    "pending_workflow_task"
                ):
                    await asyncio.sleep(0.05)
            approving.send_signal(signal.SIGINT)
            _, stderr = await asyncio.to_thread(approving.communicate, None, 60)
        finally:
            approving.kill()
        assert approving.returncode == 130, stderr
        assert "Traceback" not in stderr
        assert "interrupted before run" in stderr and "it may still be taken" in stderr, stderr

        done = await asyncio.to_thread(
            cli, "resume", run_id, "--agent", AGENT, "--json", *common, env=env
        )
        assert done.returncode == 0, done.stderr
    finished = json.loads(done.stdout)
    decision = next(e for e in finished["events"] if e["type"] == "approval_decision")
    assert (decision["status"], decision["result"]) == ("approved", "alice")
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]


# SIGHUP (the terminal closed) gets the very handler of SIGTERM and Ctrl+C: pinned in
# tests/unit/test_hangup_as_terminate.py, so one signal each here exercises the path
@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=["SIGTERM"])
async def test_a_terminated_resume_finishes_the_approved_call_it_runs(
    signum: int, client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """SIGTERM (`kill`) or SIGHUP (the terminal closed) to `resume` while its worker runs
    the approved transfer ends it as Ctrl+C does: the transfer finishes and is recorded,
    and the next `resume` does not run it again."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()) as model:
        env = {**agent_env(model, task_queue, ledger), "TRANSFER_SECONDS": "3"}
        common = ["--temporal", temporal_address]
        started = await asyncio.to_thread(
            cli, "run", "--agent", AGENT, "Pay bob 5000", "--json", *common, env=env
        )
        run_id = json.loads(started.stdout)["run_id"]
        # no worker: Temporal holds the decision for the `resume` below to apply
        held = await asyncio.to_thread(
            cli, "approve", run_id, "call_pay", "--wait", "1", *common, env=env
        )
        assert "No worker took the decision" in held.stderr, held.stderr
        resuming = forkserver.ForkedPopen(
            [sys.executable, "-m", "agentor_temporal", "resume", run_id, "--agent", AGENT, *common],
            env=_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            async with asyncio.timeout(60):
                while not ledger_lines(ledger):
                    await asyncio.sleep(0.02)
            resuming.send_signal(signum)
            _, stderr = await asyncio.to_thread(resuming.communicate, None, 60)
        finally:
            resuming.kill()
        done = await asyncio.to_thread(
            cli, "resume", run_id, "--agent", AGENT, "--json", *common, env=env
        )
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == "Paid."
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
    assert "interrupted: run" in stderr and "Traceback" not in stderr, stderr


# SIGHUP: the same handler (tests/unit/test_hangup_as_terminate.py)
@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])
async def test_an_approve_interrupted_while_its_worker_runs_the_call_finishes_it(
    signum: int, client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`approve` has printed its outcome and its worker runs the approved transfer as the
    command ends: one interrupt then (Ctrl+C, the terminal closed) waits for the transfer,
    which runs once; before, it cut the transfer off and the next worker ran it again."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(pay_script()) as model:
        env = {**agent_env(model, task_queue, ledger), "TRANSFER_SECONDS": "3"}
        common = ["--temporal", temporal_address]
        started = await asyncio.to_thread(
            cli, "run", "--agent", AGENT, "Pay bob 5000", "--json", *common, env=env
        )
        run_id = json.loads(started.stdout)["run_id"]
        approving = forkserver.ForkedPopen(
            [sys.executable, "-m", "agentor_temporal", "approve", run_id, "call_pay"]
            + ["--agent", AGENT, *common],
            env=_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # the command is done (its outcome printed) and its worker runs the transfer
            await asyncio.to_thread(wait_line, approving, "approved call_pay", 60)
            async with asyncio.timeout(60):
                while not ledger_lines(ledger):
                    await asyncio.sleep(0.02)
            approving.send_signal(signum)
            _, stderr = await asyncio.to_thread(approving.communicate, None, 60)
        finally:
            approving.kill()
        done = await asyncio.to_thread(
            cli, "resume", run_id, "--agent", AGENT, "--json", *common, env=env
        )
        assert done.returncode == 0, done.stderr
    assert approving.returncode == 0, stderr
    assert "interrupt again to abandon them" in stderr and "Traceback" not in stderr, stderr
    assert json.loads(done.stdout)["final_output"] == "Paid."
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
