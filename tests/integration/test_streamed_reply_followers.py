"""Followers of a long streamed reply stop polling once its execution's history is long.

Each poll of a run's stream is an update (five events with its workflow
task), and a follower with `text=True` polls once per delta batch, all within
one generation that no continue-as-new can split: six followers of a 480 kB
reply streamed a word a chunk took its execution past 7,000 events and
Temporal's 2,000 updates, and once a workflow task timed out on the loaded
worker its replay (17 s) timed out on every attempt; the run never ended.
Past `policies.POLL_EVENTS_PER_EXECUTION` events new polls are refused and
the followers read history instead (lowered here, the same shape).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal.testing import Reply, ScriptedModelServer
from agentor_temporal.workflows import policies

from helpers import scripted_agent

pytestmark = pytest.mark.slow

#: short words streamed one a chunk (~100 kB), and its live followers
WORDS = 15_000
FOLLOWERS = 6
#: the events past which polls are refused, lowered for a short test
BOUND = 300
#: updates the task that crossed the bound may still accept (each poll adds
#: two events; six followers' polls in one task)
SLACK = 60


async def test_followers_of_a_long_streamed_reply_stop_polling_past_the_bound(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(policies, "POLL_EVENTS_PER_EXECUTION", BOUND, raising=False)
    text = " ".join(f"w{i}" for i in range(WORDS))
    with ScriptedModelServer([Reply(text)]) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = uuid.uuid4().hex
        await agent.astart("Write.", run_id=run_id, stream_text=True)

        async def follow() -> list[str]:
            return [e.type async for e in agent.stream(run_id, text=True)]

        seen = await asyncio.wait_for(asyncio.gather(*(follow() for _ in range(FOLLOWERS))), 240)
    result = await client.get_workflow_handle(run_id).result()
    assert result["status"] == "completed" and result["final_output"] == text
    assert all(types[-1] == "run_end" and "generation" in types for types in seen)
    history = await client.get_workflow_handle(run_id).fetch_history()
    accepted = [
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    # without the bound: polls accepted all through the generation (hundreds, past 1,000 events)
    assert accepted and max(accepted) < BOUND + SLACK, (
        f"{len(accepted)} polls accepted, the last at event {max(accepted)} "
        f"of {len(history.events)}"
    )
