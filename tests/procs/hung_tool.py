"""An agent whose sync tool never returns (it times out after 1 s).

`python hung_tool.py` is a user's plain script: it runs the agent once,
prints one JSON line (the run's status and the tool's answer) and ends as
scripts end, with the tool's thread still blocked. `worker.py --agents
hung_tool:agent` serves the same agent. Configured through the environment:
TEMPORAL_ADDRESS, MODEL_BASE_URL, AGENT_TASK_QUEUE, AGENT_LEDGER.
"""

from __future__ import annotations

import json
import os
import threading

from agentor_temporal import Agentor, function_tool

from helpers import ledger_write

#: never set: the tool's thread stays blocked until the process ends
never = threading.Event()


@function_tool(timeout=1)
def stuck() -> str:
    """Never returns."""
    ledger_write(os.environ.get("AGENT_LEDGER"), "stuck")
    never.wait()
    return "unreachable"


agent = Agentor(
    name="Stuck",
    model="m",
    tools=[stuck],
    base_url=os.environ["MODEL_BASE_URL"],
    api_key="k",
    temporal=os.environ["TEMPORAL_ADDRESS"],
    task_queue=os.environ["AGENT_TASK_QUEUE"],
    max_tool_failures=10,
)

if __name__ == "__main__":
    result = agent.run("go")
    answers = [e.result for e in result.events if e.type == "tool_result"]
    print(json.dumps({"status": result.status, "answers": answers}), flush=True)
