"""Agents the HTTP server tests serve and run in separate processes.

`procs.serve_agents:weather` (the seed's agent) and `procs.serve_agents:treasurer`
(whose transfers wait for a person's approval), configured through the
environment: MODEL_BASE_URL, AGENT_TASK_QUEUE, AGENT_LEDGER, and SERVE_GATES:
a directory where a file named after a run id, or after a tool's target (the
city, the payee), holds that tool until the test removes the file, so a test
can act (kill the server, say) mid-run, also on runs whose id the server picks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentor_temporal import function_tool, tool_context

from helpers import ledger_write, weather_agent

#: How long a held tool waits for its gate to open before going on anyway.
GATE_TIMEOUT = 60.0


def _hold(target: str) -> None:
    gates = os.environ.get("SERVE_GATES")
    if not gates:
        return
    names = {tool_context().run_id, target}
    deadline = time.monotonic() + GATE_TIMEOUT
    while any((Path(gates) / n).exists() for n in names) and time.monotonic() < deadline:
        time.sleep(0.02)


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    _hold(city)
    ledger_write(os.environ.get("AGENT_LEDGER"), "get_weather", city)
    return f"The weather in {city} is sunny and 22C."


@function_tool(requires_approval=True)
def transfer(amount: float, to: str) -> str:
    """Send money.

    Args:
        amount: How much.
        to: To whom.
    """
    _hold(to)
    ledger_write(os.environ.get("AGENT_LEDGER"), "transfer", f"{amount} {to}")
    return f"Sent {amount:g} to {to}."


_MODEL = os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:9/v1")
_QUEUE = os.environ.get("AGENT_TASK_QUEUE", "agentor")

weather = weather_agent(base_url=_MODEL, task_queue=_QUEUE, tools=[get_weather])

#: The scripted model calls the first tool offered: here, a transfer.
treasurer = weather_agent(
    base_url=_MODEL,
    task_queue=_QUEUE,
    name="Treasurer",
    instructions="You move money when asked.",
    tools=[transfer, get_weather],
)
