"""The peer's workflow: the seed's weather agent on Temporal's OpenAI Agents integration.

Written the way the integration's quickstart runs an agent with one tool: an
`agents.Agent` whose tool is a Temporal activity (`activity_as_tool`), run by
`Runner.run` inside a workflow; the `OpenAIAgentsPlugin` turns each model call
into an `invoke_model_activity`. Kept apart from `peer.py` because the
workflow sandbox re-imports this module for every run, as it would a user's
workflow file: it imports only what the quickstart's workflow file does.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner
    from temporalio.openai_agents.workflow import activity_as_tool

INSTRUCTIONS = "You are a helpful weather assistant."


@activity.defn(name="peer_get_weather")
async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"The weather in {city} is sunny and 22C."


@workflow.defn(name="PeerWeatherAgent")
class PeerWeatherWorkflow:
    """One run of the weather agent: 2 model activities and 1 tool activity."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="Weather Agent",
            instructions=INSTRUCTIONS,
            model="gpt-4o-mini",
            # the quickstart's tool timeout
            tools=[activity_as_tool(get_weather, start_to_close_timeout=timedelta(seconds=10))],
        )
        result = await Runner.run(agent, prompt, run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output)
