"""A long run's executions stay short enough for a fresh worker to replay, whatever the server.

A worker that does not hold a run in its cache (restarted, or the run evicted
under load) replays the execution's whole history in one workflow task. On a
server that suggests continue-as-new later than Temporal's default 4,096
events (or never), a long run's executions grew to 20,000 events, which took
16-28 s to replay against the 5 s workflow task timeout: after a restart no
worker could take the run again. From behaviour level 28 an execution also
continues as new past `policies.REPLAYABLE_EVENTS_BUDGET` events
(`HistoryGauge.due`); here lowered, on a server whose suggestion never comes.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections import Counter

import pytest
from late_results import executions, replayer

from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies

from conftest import dev_server
from helpers import chunk_reader, chunk_tool, coder

#: turns of one small tool call each
TURNS = 30
#: events an execution may pass its budget by: the turn that crossed it (generation,
#: call, result, and their workflow tasks) and the continue-as-new's own step
ONE_TURN = 40


async def test_executions_continue_as_new_at_the_replayable_budget_without_a_suggestion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget = 60
    monkeypatch.setattr(policies, "REPLAYABLE_EVENTS_BUDGET", budget)
    ledger = os.path.join(tempfile.mkdtemp(), "ledger")
    async with dev_server(
        # the server's own suggestion out of the way: only our budget can continue the run
        "limit.historyCount.suggestContinueAsNew=1000000",
        "limit.historySize.suggestContinueAsNew=100000000",
    ) as client:
        queue = f"replayable-{uuid.uuid4().hex[:8]}"
        with ScriptedModelServer(chunk_reader(TURNS), keep_requests=1) as model:
            agent = coder(model, client, queue, tools=[chunk_tool(ledger, 10)], store=None)
            async with build_worker(client, [agent], task_queue=queue):
                result = await agent.arun("Read.", max_turns=TURNS + 1)
            assert result.status == "completed", result.error
            assert result.final_output == f"Read {TURNS} chunks."
            assert model.request_count == TURNS + 1  # no request asked twice
        histories = await executions(client, result.run_id)

    calls = Counter(line.split()[1] for line in open(ledger, encoding="utf-8"))
    assert len(calls) == TURNS and set(calls.values()) == {1}, calls
    sizes = [len(h.events) for h in histories]
    # continued as new by the budget, each execution near it (the last one may be shorter)
    assert len(histories) >= 3, sizes
    assert all(size <= budget + ONE_TURN for size in sizes), sizes
    # and each replays as recorded
    for history in histories:
        replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
