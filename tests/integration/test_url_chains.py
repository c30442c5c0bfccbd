"""A tool's error quoting thousands of `://` in a row is answered once, not run again.

Masking the error's URL credentials called itself once for each `://` whose run held no
scheme (`0://0://...`, a hex dump or a log line's separators): past Python's recursion
limit the call, which had run, was never answered, and it ran on each start (three).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import Agentor, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker


async def test_a_tool_error_quoting_a_chain_of_schemeless_urls_runs_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"

    @function_tool
    def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: The page.
        """
        with open(ledger, "a", encoding="utf-8") as f:
            f.write("ran\n")
        raise ValueError("bad links: " + "0://" * 3000)

    script = [CallTool("fetch", {"url": "u"}), Reply("done")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Fetcher",
            model="gpt-4o-mini",
            instructions="Fetch.",
            tools=[fetch],
            base_url=model.base_url,
            api_key="sk-test",
            task_queue=task_queue,
            temporal=client,
            embedded_worker=False,
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.arun("Fetch u."), 90)
        requests = model.request_count
    assert ledger.read_text().count("ran") == 1
    assert result.status == "completed", result.error
    assert requests == 2
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.error is not None and answer.error.startswith("ValueError: bad links: 0://0://")
