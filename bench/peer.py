"""The peer floor: Temporal's OpenAI Agents integration running the seed's weather agent.

Set up as the integration's quickstart does: the `OpenAIAgentsPlugin` on the
client (its data converter and interceptors) and a worker built from that
client in the same process, with the SDK's default worker options. The model
is the same scripted chat-completions server as every other scenario, reached
through the chat-completions model (`use_responses=False`) with the openai
client's own retries off (as the plugin's default provider has them) and
tracing off, so neither side pays for trace export.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from peer_workflow import PeerWeatherWorkflow, get_weather
from scenarios import PROMPT, Scenario

NAME = "Temporal OpenAI Agents integration"
LOCAL_NAME = "Temporal OpenAI Agents integration, local model activities"


class Peer(Scenario):
    """One run = `client.execute_workflow(PeerWeatherWorkflow.run, prompt)`."""

    name = NAME

    def __init__(self, address: str, model_url: str, local: bool = False) -> None:
        self.address = address
        self.model_url = model_url
        #: the integration's own opt-in (`use_local_activity`): model calls as
        #: local activities, the counterpart of our `local_model_calls`
        self.local = local
        if local:
            self.name = LOCAL_NAME
        self.queue = f"bench-peer-{uuid.uuid4().hex[:6]}"

    async def __aenter__(self) -> Peer:
        from agents import set_tracing_disabled
        from agents.models.openai_provider import OpenAIProvider
        from openai import AsyncOpenAI
        from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

        set_tracing_disabled(True)
        plugin = OpenAIAgentsPlugin(
            # the quickstart's model timeout
            model_params=ModelActivityParameters(
                start_to_close_timeout=timedelta(seconds=30), use_local_activity=self.local
            ),
            model_provider=OpenAIProvider(
                openai_client=AsyncOpenAI(base_url=self.model_url, api_key="bench", max_retries=0),
                use_responses=False,
            ),
            add_temporal_spans=False,
        )
        self.client = await Client.connect(self.address, plugins=[plugin])
        self.worker = Worker(
            self.client,
            task_queue=self.queue,
            workflows=[PeerWeatherWorkflow],
            activities=[get_weather],
        )
        await self.worker.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.__aexit__(None, None, None)

    async def one(self, i: int) -> None:
        output = await self.client.execute_workflow(
            PeerWeatherWorkflow.run,
            PROMPT,
            id=f"peer-{uuid.uuid4().hex}",
            task_queue=self.queue,
        )
        if "sunny" not in output:
            raise RuntimeError(f"peer run answered {output!r}")
