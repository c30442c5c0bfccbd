"""A run's last local model answer is kept for the task that runs again after its close was lost.

A run whose last answer came from a local model request (`local_model_calls`)
closes in the workflow task that took the answer; the worker then forgets the
run's finished calls (`AgentActivities.execution_ended`), before the server
has accepted that task's completion. A completion that reaches the server
after the workflow task timed out (a worker slow to send it) is refused, and
the task the server runs again replays the run up to its last request, which
must join the answer the worker holds, not ask the model again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import PayloadCodec

from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.workflows import policies

from helpers import ANSWER, PROMPT, weather_agent


class SlowCloseOnce(PayloadCodec):
    """Holds the encoding of the run's result (its last workflow task's completion) past the
    workflow task timeout, once: the server refuses that completion and runs the task again."""

    def __init__(self) -> None:
        self.held = False

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        closing = not activity.in_activity() and any(ANSWER.encode() in p.data for p in payloads)
        if closing and not self.held:
            self.held = True
            await asyncio.sleep(policies.WORKFLOW_TASK_TIMEOUT.total_seconds() + 2)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


async def test_a_run_s_last_local_answer_is_not_asked_again_when_its_close_is_refused(
    client: Client, model: ScriptedModelServer, task_queue: str
) -> None:
    """Two model requests for the seed's two turns, though its closing task ran twice.

    Without the fix: 3 requests, the last asked again by the task run again.
    """
    codec = SlowCloseOnce()
    config = client.config()
    config["data_converter"] = replace(client.data_converter, payload_codec=codec)
    slow = Client(**config)
    agent = weather_agent(
        base_url=model.base_url, task_queue=task_queue, temporal=slow, local_model_calls=True
    )
    result = await asyncio.wait_for(agent.arun(PROMPT), 90)
    assert result.status == "completed" and result.final_output == ANSWER
    assert codec.held, "the close was never held: proved nothing"
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT in kinds, "no task lost: proved nothing"
    assert model.request_count == 2, "the run's last answer was asked for again"
