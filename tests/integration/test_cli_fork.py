"""`agentor-temporal fork`, as real CLI processes: its output, and its error cases.

Exit status as every command: 0 the fork completed, 1 it failed or could not
be made (unknown parent, id in use, an event position the parent lacks), 2 a
usage error (bad arguments, run ids or agent path); never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, ledger_lines
from integration.test_cli import AGENT, cli, cli_all, parsed

PARIS_ANSWER = "Answer based on tool: The weather in Paris is sunny and 22C."


def _env(model: ScriptedModelServer, task_queue: str, ledger: str) -> dict[str, str]:
    return {
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
    }


def _parent(temporal_address: str, env: dict[str, str]) -> Any:
    out = cli("run", "--agent", AGENT, "--temporal", temporal_address, "--json", PROMPT, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_fork_prints_its_id_its_parent_progress_and_the_answer(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """`fork RUN --input TEXT` continues the parent's conversation and prints the fork's answer."""
    env = _env(model, task_queue, ledger)
    parent = _parent(temporal_address, env)

    out = cli(
        "fork",
        parent["run_id"],
        "--agent",
        AGENT,
        "--temporal",
        temporal_address,
        "--input",
        "Now do the same for Paris.",
        env=env,
    )

    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("run_id: ") and lines[0] != f"run_id: {parent['run_id']}"
    assert lines[1:] == [f"forked_from: {parent['run_id']}", PARIS_ANSWER]
    assert "  turn 1: calling get_weather(city='Paris')" in out.stderr.splitlines()
    assert "completed, 60 tokens" in out.stderr
    fork_id = lines[0].split()[1]
    shown = cli("show", fork_id, "--temporal", temporal_address)
    assert shown.returncode == 0, shown.stderr
    assert f"fork         forked from {parent['run_id']}" in shown.stdout
    assert "usage    4 turns, 60 tokens (40 in, 20 out)" in shown.stdout
    jsonl = cli("show", fork_id, "--temporal", temporal_address, "--jsonl")
    events = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert [e["type"] for e in events] == [*SEED_EVENT_TYPES, "fork", *SEED_EVENT_TYPES]
    assert events[:7] == parent["events"]


def test_fork_at_n_with_a_chosen_id_and_json(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """`--at 4 --fork-id ID --json`: the fork keeps 4 events, answers, prints its RunResult."""
    env = _env(model, task_queue, ledger)
    parent = _parent(temporal_address, env)
    fork_id = f"cli-fork-{task_queue}"

    out = cli(
        "fork",
        parent["run_id"],
        "--at",
        "4",
        "--fork-id",
        fork_id,
        "--agent",
        AGENT,
        "--temporal",
        temporal_address,
        "--json",
        env=env,
    )

    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["run_id"] == fork_id and result["final_output"] == ANSWER
    assert result["events"][:4] == parent["events"][:4]
    assert result["events"][4] == {
        "type": "fork",
        "forked_from": parent["run_id"],
        "started_at": result["events"][4]["started_at"],
        "ended_at": result["events"][4]["started_at"],
    }
    assert out.stderr.splitlines()[:2] == [f"run_id: {fork_id}", f"forked_from: {parent['run_id']}"]
    assert len(ledger_lines(ledger)) == 1


def test_fork_of_a_finished_run_without_input_prints_the_snapshot(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """Without --input a finished parent is copied: its answer, no model request."""
    env = _env(model, task_queue, ledger)
    parent = _parent(temporal_address, env)
    requests = model.request_count

    out = cli("fork", parent["run_id"], "--agent", AGENT, "--temporal", temporal_address, env=env)

    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1:] == [f"forked_from: {parent['run_id']}", ANSWER]
    assert model.request_count == requests


def test_fork_errors_exit_1_or_2_with_one_line(
    temporal_address: str, model: ScriptedModelServer, task_queue: str, ledger: str
) -> None:
    """Unknown parent, id in use and a position past the log exit 1; bad arguments exit 2."""
    env = _env(model, task_queue, ledger)
    parent = _parent(temporal_address, env)
    common = ["--agent", AGENT, "--temporal", temporal_address]

    bad = [
        ((parent["run_id"], "--input", " ", *common), "the input is empty"),
        (("../etc", *common), "Invalid run id"),
        ((parent["run_id"], "--fork-id", "a/b", *common), "Invalid run id"),
        ((parent["run_id"], "--agent", "procs.cli_agents:not_an_agent"), "not an agent"),
    ]
    # the parser's own refusals, parsed here (a process each costs ~3 s of CPU)
    for args, needle in [
        ((parent["run_id"], "--at", "0", *common), "--at"),
        ((parent["run_id"], "--temporal", temporal_address), "--agent"),
    ]:
        code, _, stderr = parsed("fork", *args)
        assert code == 2 and needle in stderr and "Traceback" not in stderr, (args, stderr)
    # none of them forks anything: they run side by side
    unknown, in_use, past, *refused = cli_all(
        [
            ("fork", f"no-such-{task_queue}", *common),
            ("fork", parent["run_id"], "--fork-id", parent["run_id"], *common),
            ("fork", parent["run_id"], "--at", "99", *common),
            *(("fork", *args) for args, _ in bad),
        ],
        env=env,
    )
    for out in (unknown, in_use, past, *refused):
        assert "Traceback" not in out.stderr, out.stderr
    assert unknown.returncode == 1
    assert f"error: No persisted run with id 'no-such-{task_queue}'" in unknown.stderr
    assert in_use.returncode == 1
    assert f"error: Run {parent['run_id']!r} already exists; choose an unused id." in in_use.stderr
    assert f"follow it with resume({parent['run_id']!r})" in in_use.stderr
    assert past.returncode == 1 and "its log has 7 events, so at is 1 to 7" in past.stderr
    for (args, needle), out in zip(bad, refused, strict=True):
        assert out.returncode == 2, (args, out.stderr)
        assert needle in out.stderr
    assert model.request_count == 2


def test_a_failed_fork_exits_1_and_names_itself_for_resume(
    temporal_address: str, task_queue: str, ledger: str
) -> None:
    """A fork whose continuation fails exits 1; its error names the fork, which resume finishes."""
    script = [CallTool("get_weather", {"city": "London"}), Reply(ANSWER), Fail(400, "refused")]
    with ScriptedModelServer(script) as model:
        env = _env(model, task_queue, ledger)
        parent = _parent(temporal_address, env)
        common = ["--agent", AGENT, "--temporal", temporal_address]
        fork_id = f"cli-failing-{task_queue}"
        failed = cli(
            "fork",
            parent["run_id"],
            "--input",
            "And Paris?",
            "--fork-id",
            fork_id,
            *common,
            env=env,
        )
        assert failed.returncode == 1
        assert f"error: run {fork_id} ended failed:" in failed.stderr and "refused" in failed.stderr
        assert f"Forked run persisted as '{fork_id}'; resume it to retry." in failed.stderr

        resumed = cli("resume", fork_id, *common, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == [f"run_id: {fork_id}", PARIS_ANSWER]
