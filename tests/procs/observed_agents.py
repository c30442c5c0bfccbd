"""An agent the telemetry tests serve from a worker process: `procs.observed_agents:agent`.

Its weather tool raises for "Nowhere" (a tool failure) and its transfers wait
for a person. Configured by MODEL_BASE_URL, AGENT_TASK_QUEUE and AGENT_NAME.
"""

from __future__ import annotations

import os

from agentor_temporal import function_tool

from helpers import weather_agent


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    if city == "Nowhere":
        raise LookupError(f"no such city: {city}")
    return f"The weather in {city} is sunny and 22C."


@function_tool(requires_approval=True)
def transfer(amount: float, to: str) -> str:
    """Send money.

    Args:
        amount: How much.
        to: To whom.
    """
    return f"Sent {amount:g} to {to}."


agent = weather_agent(
    base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    task_queue=os.environ.get("AGENT_TASK_QUEUE", "agentor"),
    name=os.environ.get("AGENT_NAME", "Observed"),
    tools=[get_weather, transfer],
)
