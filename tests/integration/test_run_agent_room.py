"""`run_agent` near Temporal's limits on the caller's history (50 MB, 51,200 events).

Each run's start keeps its input in the calling workflow's history, and
Temporal terminates a workflow whose history passes its limit, cancelling
every agent run it has pending: a parent gathering forty runs of 1.3 MB
prompts ended so, none of its runs finished. `run_agent` starts no run whose
start would take the history past `RUN_AGENT_HISTORY_BYTES` (or events): it
comes back "failed" saying so, and the caller continues as new. The test's
server has a 2 MB limit, so a few 600 KB prompts reach it.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer, Worker

import agentor_temporal.workflow as run_agent_module
from agentor_temporal import AgentorPlugin
from agentor_temporal.testing import Reply, ScriptedModelServer
from agentor_temporal.workflow import _counts_outcomes as counts_outcomes
from agentor_temporal.workflow import run_agent

from conftest import dev_server
from integration.test_plugin import support

#: the test server's history size limit (Temporal's default: 50 MB)
LIMIT = 2_000_000
#: agent runs the parent starts side by side, and each one's prompt
RUNS, PROMPT = 5, 600_000


@workflow.defn(sandboxed=False)
class AskBig:
    @workflow.run
    async def run(self, count: int) -> list[str]:
        outcomes = await asyncio.gather(
            *(run_agent("Support Agent", f"{n}" + "x" * PROMPT) for n in range(count))
        )
        return [o.final_output or o.error or o.status for o in outcomes]


async def test_runs_past_the_history_limit_are_refused_not_the_parent_terminated(
    task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_HISTORY_BYTES", LIMIT * 3 // 4)
    async with dev_server(
        f"limit.historySize.error={LIMIT}", f"limit.historySize.warn={LIMIT // 4}"
    ) as client:
        with ScriptedModelServer([Reply(f"Answer {n}.") for n in range(RUNS)]) as model:
            plugin = AgentorPlugin(agents=[support(model)])
            async with Worker(client, task_queue=task_queue, workflows=[AskBig], plugins=[plugin]):
                handle = await client.start_workflow(
                    AskBig.run, RUNS, id=uuid.uuid4().hex, task_queue=task_queue
                )
                # before: "Workflow history size exceeds limit." (terminated, its runs cancelled)
                answers = await asyncio.wait_for(handle.result(), 60)
                history = await handle.fetch_history()
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    done = [a for a in answers if a.startswith("Answer ")]
    refused = [a for a in answers if "Continue your workflow as new" in a]
    assert done and refused and len(done) + len(refused) == RUNS, answers
    assert "was not started" in refused[0] and "50 MB" in refused[0]
    await Replayer(workflows=[AskBig], plugins=[AgentorPlugin()]).replay_workflow(history)


async def test_a_parent_recorded_before_the_history_room_check_replays(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history whose runs started past today's room, for their inputs or their outcomes
    (recorded before it), replays as it was."""
    runs = 3
    # recorded as before the outcome room: its patch never asked
    monkeypatch.setattr(run_agent_module, "_counts_outcomes", lambda: False)
    with ScriptedModelServer([Reply(f"Answer {n}.") for n in range(runs)]) as model:
        plugin = AgentorPlugin(agents=[support(model)])
        async with Worker(client, task_queue=task_queue, workflows=[AskBig], plugins=[plugin]):
            handle = await client.start_workflow(
                AskBig.run, runs, id=uuid.uuid4().hex, task_queue=task_queue
            )
            assert all(a.startswith("Answer ") for a in await handle.result())
            history = await handle.fetch_history()
    monkeypatch.setattr(run_agent_module, "_counts_outcomes", counts_outcomes)
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_HISTORY_BYTES", PROMPT)
    await Replayer(workflows=[AskBig], plugins=[AgentorPlugin()]).replay_workflow(history)
    # and past today's room for the outcomes of the runs pending
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_HISTORY_BYTES", 40_000_000)
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_OUTCOME_BYTES", 40_000_000)
    await Replayer(workflows=[AskBig], plugins=[AgentorPlugin()]).replay_workflow(history)


#: the test server's history length limit (Temporal's default: 51,200 events)
EVENTS = 100


@workflow.defn(sandboxed=False)
class AskInTurn:
    @workflow.run
    async def run(self, count: int) -> list[str]:
        answers = []
        for n in range(count):
            outcome = await run_agent("Support Agent", f"Refund order A-{n}?")
            answers.append(outcome.final_output or outcome.error or outcome.status)
        return answers


async def test_runs_one_after_another_past_the_event_limit_are_refused(
    task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small runs, thousands one after another: the history's length, not its size."""
    runs = 20
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_HISTORY_EVENTS", EVENTS * 7 // 10)
    async with dev_server(
        f"limit.historyCount.error={EVENTS}", f"limit.historyCount.warn={EVENTS // 4}"
    ) as client:
        with ScriptedModelServer([Reply(f"Answer {n}.") for n in range(runs)]) as model:
            plugin = AgentorPlugin(agents=[support(model)])
            async with Worker(
                client, task_queue=task_queue, workflows=[AskInTurn], plugins=[plugin]
            ):
                handle = await client.start_workflow(
                    AskInTurn.run, runs, id=uuid.uuid4().hex, task_queue=task_queue
                )
                # before: "Workflow history count exceeds limit." at the eleventh run or so
                answers = await asyncio.wait_for(handle.result(), 60)
                history = await handle.fetch_history()
    done = [a for a in answers if a.startswith("Answer ")]
    refused = [a for a in answers if "Continue your workflow as new" in a]
    assert done and refused and len(done) + len(refused) == runs, answers
    assert answers[: len(done)] == done
    await Replayer(workflows=[AskInTurn], plugins=[AgentorPlugin()]).replay_workflow(history)


#: agent runs gathered side by side with short prompts, and each one's answer
ANSWERED, ANSWER = 8, 300_000


@workflow.defn(sandboxed=False)
class AskMany:
    @workflow.run
    async def run(self, count: int) -> list[str]:
        outcomes = await asyncio.gather(
            *(run_agent("Support Agent", f"Write report {n}.") for n in range(count))
        )
        return [(o.final_output or "")[:20] or o.error or o.status for o in outcomes]


async def test_runs_gathered_whose_answers_would_pass_the_history_limit_wait_their_turn(
    task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short prompts, long answers: each outcome lands in the caller's history, so runs wait
    while the outcomes of those pending could take it past the limit, never the parent
    terminated (before: eight 300 KB answers under a 2 MB limit terminated it)."""
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_HISTORY_BYTES", LIMIT * 3 // 4)
    monkeypatch.setattr(run_agent_module, "RUN_AGENT_OUTCOME_BYTES", ANSWER + 10_000)
    async with dev_server(
        f"limit.historySize.error={LIMIT}", f"limit.historySize.warn={LIMIT // 4}"
    ) as client:
        with ScriptedModelServer([Reply(f"{n}" * ANSWER) for n in range(ANSWERED)]) as model:
            plugin = AgentorPlugin(agents=[support(model)])
            async with Worker(client, task_queue=task_queue, workflows=[AskMany], plugins=[plugin]):
                handle = await client.start_workflow(
                    AskMany.run, ANSWERED, id=uuid.uuid4().hex, task_queue=task_queue
                )
                answers = await asyncio.wait_for(handle.result(), 60)
                history = await handle.fetch_history()
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    done = [a for a in answers if len(a) == 20]
    refused = [a for a in answers if "Continue your workflow as new" in a]
    assert done and len(done) + len(refused) == ANSWERED, answers
    await Replayer(workflows=[AskMany], plugins=[AgentorPlugin()]).replay_workflow(history)
