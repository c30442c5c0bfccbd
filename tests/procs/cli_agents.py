"""Agents the CLI tests load by path: `procs.cli_agents:agent`.

Configured through the environment: MODEL_BASE_URL (the scripted model),
AGENT_TASK_QUEUE, AGENT_NAME, AGENT_STORE (a directory to mirror into),
AGENT_LEDGER, AGENT_GATE: a file the tool waits for, so a test can watch
a run while its tool is in flight, and TRANSFER_SECONDS: how long a transfer
takes after it is recorded in the ledger.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentor_temporal import FileStore, function_tool

from helpers import ledger_write, weather_agent

#: How long the gated tool waits for its gate before giving up.
GATE_TIMEOUT = 120.0


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    gate = os.environ.get("AGENT_GATE")
    if gate:
        deadline = time.monotonic() + GATE_TIMEOUT
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    ledger_write(os.environ.get("AGENT_LEDGER"), "get_weather", city)
    return f"The weather in {city} is sunny and 22C."


agent = weather_agent(
    base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    task_queue=os.environ.get("AGENT_TASK_QUEUE", "agentor"),
    name=os.environ.get("AGENT_NAME", "Weather Agent"),
    store=FileStore(os.environ["AGENT_STORE"]) if os.environ.get("AGENT_STORE") else None,
    tools=[get_weather],
)

#: Not an agent: loading it must fail as a usage error.
not_an_agent = {"name": "Weather Agent"}


@function_tool(requires_approval=True)
def transfer(amount: float, to: str) -> str:
    """Send money.

    Args:
        amount: How much.
        to: To whom.
    """
    ledger_write(os.environ.get("AGENT_LEDGER"), "transfer", f"{amount} {to}")
    time.sleep(float(os.environ.get("TRANSFER_SECONDS", "0")))
    return f"Sent {amount:g} to {to}."


#: An agent whose transfers wait for a person.
treasurer = weather_agent(
    base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
    task_queue=os.environ.get("AGENT_TASK_QUEUE", "agentor"),
    name="Treasurer",
    tools=[transfer, get_weather],
)
