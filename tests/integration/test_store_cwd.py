"""A run's JSONL log stays where its store was opened, whatever a tool does to the working
directory.

A worker's working directory is the process's, shared by every thread, and a
coding agent's tools change it (a `cd` tool, `os.chdir` into a checkout before
running git). `FileStore("runs")`, the README's and the examples' store, named
its directory relative to it: from the tool's call on, the mirror wrote the
run's events under the tool's directory (making a `runs` there), and the log
where the run began kept only its first events, though the run completed. Once
Temporal no longer holds the run (retention, a dev server restarted), `resume`
reads that cut log and runs the agent again from there: its model requests
paid again, its tools run again; and in a script (its embedded worker shares
the process), `resume`, `show` and `list` read the tool's directory instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import scripted_agent, weather_tool


async def test_a_tool_changing_the_working_directory_leaves_the_log_whole_where_it_began(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool moves the process into a checkout mid-run; the run's whole log is in the
    store's directory, and none is written under the checkout. Before: 3 of its 10 events
    where it began, all 10 in a `runs` made inside the checkout."""
    home, checkout = tmp_path / "home", tmp_path / "checkout"
    home.mkdir()
    checkout.mkdir()
    monkeypatch.chdir(home)  # and back to the test's own at its end

    @function_tool
    def enter_repo(path: str) -> str:
        """Work inside a repository from now on.

        Args:
            path: The repository's directory.
        """
        os.chdir(path)
        return f"Now in {os.getcwd()}."

    script = [
        CallTool("enter_repo", {"path": str(checkout)}),
        CallTool("get_weather", {"city": "Oslo"}),
        Reply("Done."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            store=FileStore("runs"),
            tools=[enter_repo, weather_tool()],
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = uuid.uuid4().hex
            result = await asyncio.wait_for(agent.arun("Check the repo.", run_id=run_id), 60)
    assert result.status == "completed", result.error
    assert Path.cwd() == checkout  # the tool did move the process
    recorded = [e.to_dict() for e in await TemporalStore(client).aload(run_id)]
    log = home / "runs" / f"{run_id}.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [e["type"] for e in lines] == [e["type"] for e in recorded]
    assert not (checkout / "runs").exists()
