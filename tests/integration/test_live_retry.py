"""A call the server timed out while its worker was alive is not made twice.

The worker's event loop is blocked by a tool for longer than the tool's
heartbeat timeout: the server gives up on the attempt and schedules another,
while the first attempt is still running in the (live) worker. The retry
must join it, so the tool runs once and the model is asked only what the
run needs.
"""

from __future__ import annotations

import time
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows.policies import TOOL_HEARTBEAT_TIMEOUT

from helpers import PROMPT, weather_agent

pytestmark = pytest.mark.slow


async def test_a_retry_of_a_live_tool_call_joins_it(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """Timed out on heartbeat while live: the tool runs once, the run completes, 2 model calls."""
    runs: list[float] = []

    @function_tool
    async def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        runs.append(time.time())
        # a starved event loop, as on an overloaded worker: no heartbeat goes out
        time.sleep(TOOL_HEARTBEAT_TIMEOUT.total_seconds() + 1.5)
        return f"The weather in {city} is sunny and 22C."

    agent = weather_agent(
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=client,
        tools=[get_weather],
        embedded_worker=False,
    )
    run_id = f"live-retry-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, [agent], task_queue=task_queue):
        result = await agent.arun(PROMPT, run_id=run_id)
    assert result.status == "completed", result.error
    history = await client.get_workflow_handle(run_id).fetch_history()
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert max(attempts) >= 2, "the server did not retry the tool: the test proved nothing"
    assert len(runs) == 1
    assert model.request_count == 2
