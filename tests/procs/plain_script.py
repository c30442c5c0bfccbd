"""A user's plain script, ending as scripts end: `plain_script.py run|approve|deny|...`.

Unlike `agent_proc.py`, it does nothing special at exit (no `os._exit`, no
explicit shutdown): the interpreter tears down with the embedded worker as it
stands, which is the case the exit tests are about. Configured through the
environment like `agent_proc.py` (TEMPORAL_ADDRESS, AGENT_TASK_QUEUE,
MODEL_BASE_URL, AGENT_STORE, AGENT_LEDGER). Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from helpers import plain_agent

agent = plain_agent()
command, run_id = sys.argv[1], sys.argv[2]
if command == "run":
    prompt = sys.argv[3] if len(sys.argv) > 3 else "Send 5 to bob"
    result = agent.run(prompt, run_id=run_id)
    print(
        json.dumps(
            {"status": result.status, "pending": [p.call_id for p in result.pending_approvals]}
        )
    )
elif command in ("approve", "deny"):
    decided = getattr(agent, command)(run_id, sys.argv[3], by="script")
    print(json.dumps({"decided": decided["call_id"]}))
elif command == "resume":
    print(json.dumps({"status": agent.resume(run_id).status}))
elif command == "stream":

    async def follow() -> list[str]:
        return [
            e.type async for e in agent.stream_chat("What is the weather in Paris?", run_id=run_id)
        ]

    print(json.dumps({"events": asyncio.run(follow())}))
else:
    raise SystemExit(f"unknown command {command!r}")
sys.stdout.flush()
