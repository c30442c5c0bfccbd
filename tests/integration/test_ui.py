"""Runs read well in the Temporal UI, seen by a real browser, and are findable by agent.

The browser tests start their own dev server with the UI on free ports, run
the weather agent, and open the UI's pages in headless Chromium (Debian's
`chromium`): the rendered DOM must carry the run's summary, each activity's
summary, the live current details and the `events` query's answer.
Screenshots are kept under `test-artifacts/`. Only these tests skip, and only
when Chromium is not installed; search attributes are checked regardless.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agentor_temporal import Agentor, function_tool
from agentor_temporal.connection import temporal_binary
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.worker import build_worker, ensure_search_attributes

from browser import Page, find_chromium
from conftest import SEARCH_ATTRIBUTE_ARGS
from helpers import ANSWER, PROMPT, ROOT, scripted_agent, wait_until, weather_agent

ARTIFACTS = ROOT / "test-artifacts"
SUMMARY = "Weather Agent: What is the weather in London?"
TOOL_SUMMARY = "get_weather(city='London')"

needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="Chromium is not installed (Debian: apt-get install chromium; scripts/test does it "
    "when run as root), so the Temporal UI cannot be rendered",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _workflows_listed(address: str, query: str) -> list[str]:
    """Workflow ids `temporal workflow list --query` prints (as JSON)."""
    out = subprocess.run(
        [
            temporal_binary(),
            "workflow",
            "list",
            "--address",
            address,
            "--query",
            query,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    return [row["execution"]["workflowId"] for row in rows]


class UiServer:
    """A dev server with its web UI, for one module."""

    def __init__(self, env: WorkflowEnvironment, ui_port: int) -> None:
        self.env = env
        self.client: Client = env.client
        self.ui = f"http://localhost:{ui_port}"

    async def page_url(self, run_id: str, tab: str) -> str:
        """The UI page of a run's latest execution: `.../workflows/ID/EXECUTION/<tab>`."""
        described = await self.client.get_workflow_handle(run_id).describe()
        return f"{self.ui}/namespaces/default/workflows/{run_id}/{described.run_id}/{tab}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def ui_server() -> AsyncIterator[UiServer]:
    ui_port = _free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=[*SEARCH_ATTRIBUTE_ARGS, "--log-level", "error"],
        ui=True,
        ui_port=ui_port,
    )
    try:
        yield UiServer(env, ui_port)
    finally:
        await env.shutdown()


async def until_listed(client: Client, query: str, run_id: str, timeout: float = 60) -> None:
    """Wait until the visibility store lists `run_id` for `query`."""
    deadline = time.monotonic() + timeout
    while not [w async for w in client.list_workflows(query) if w.id == run_id]:
        assert time.monotonic() < deadline, f"{query} never listed run {run_id}"
        await asyncio.sleep(0.2)


async def _worker(client: Client, agent: Agentor, task_queue: str) -> Worker:
    """A worker for `agent` whose runs set AgentName/AgentModel (as `worker.py`'s do)."""
    worker = build_worker(client, [agent], task_queue=task_queue)
    assert await ensure_search_attributes(client)
    return worker


def _rendered(html: str) -> list[str]:
    """Markdown the UI renders in frames (summary, details, current details), decoded."""
    import re

    return [
        urllib.parse.unquote(m.split("&")[0])
        for m in re.findall(r'src="/render\?content=([^"]*)"', html)
    ]


# -- search attributes (no browser) ------------------------------------------------


async def test_temporal_cli_finds_runs_by_agent_name(
    client: Client, temporal_address: str, model: ScriptedModelServer, task_queue: str
) -> None:
    """`temporal workflow list --query "AgentName='Weather Agent'"` returns a finished run."""
    agent = scripted_agent(model, client, task_queue)
    result = await agent.arun(PROMPT)

    def listed() -> bool:
        ids = _workflows_listed(
            temporal_address, f"AgentName='Weather Agent' AND TaskQueue='{task_queue}'"
        )
        return ids == [result.run_id]

    await asyncio.to_thread(wait_until, listed, "the run to be listed by AgentName", 60)
    by_model = _workflows_listed(
        temporal_address, f"AgentModel='gpt-4o-mini' AND TaskQueue='{task_queue}'"
    )
    assert by_model == [result.run_id]


async def test_worker_registers_missing_search_attributes() -> None:
    """On a cluster without AgentName/AgentModel a worker registers them and runs set them."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), dev_server_extra_args=["--log-level", "error"]
    )
    try:
        address = env.client.service_client.config.target_host
        listing = subprocess.run(
            [temporal_binary(), "operator", "search-attribute", "list", "--address", address],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "AgentName" not in listing.stdout
        task_queue = f"tq-{uuid.uuid4().hex[:10]}"
        with ScriptedModelServer() as model:
            agent = weather_agent(
                base_url=model.base_url,
                task_queue=task_queue,
                temporal=env.client,
                embedded_worker=False,
            )
            async with await _worker(env.client, agent, task_queue):
                result = await agent.arun(PROMPT)
        assert result.status == "completed"
        await asyncio.to_thread(
            wait_until,
            lambda: _workflows_listed(address, "AgentName='Weather Agent'") == [result.run_id],
            "the run to be listed by AgentName on the fresh cluster",
            60,
        )
    finally:
        await env.shutdown()


# -- the UI in a real browser ----------------------------------------------------------


@needs_chromium
@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_model_calls"])
async def test_finished_run_page_shows_its_summary_and_activity_summaries(
    local: bool, ui_server: UiServer, tmp_path: Path
) -> None:
    """A finished run's UI page shows its summary and each activity's summary; the list finds it.

    Local model requests show as markers, with the same summaries.
    """
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    with ScriptedModelServer() as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=ui_server.client,
            embedded_worker=False,
            local_model_calls=local,
        )
        # a worker stays up while the pages load: the UI asks one for the
        # current details (without one, that page waits out a query timeout)
        async with await _worker(ui_server.client, agent, task_queue):
            result = await agent.arun(PROMPT)
            assert result.final_output == ANSWER

            history = await ui_server.page_url(result.run_id, "history")
            metadata = await ui_server.page_url(result.run_id, "user-metadata")
            query = urllib.parse.quote(f'AgentName="Weather Agent" AND TaskQueue="{task_queue}"')
            listing = f"{ui_server.ui}/namespaces/default/workflows?query={query}"
            timeline = await ui_server.page_url(result.run_id, "timeline")
            shot = ARTIFACTS / ("ui-run-local.png" if local else "ui-run.png")
            finished = "Finished: completed after 2 turns · 30 tokens · history "
            about = "**Agent** Weather Agent  \n**Model** gpt-4o-mini  \n**Tools** get_weather"

            def look() -> tuple[str, list[str]]:
                # one browser for the four pages, each read once what the test
                # expects is there (a missing summary fails at its deadline)
                with Page(tmp_path / "profile") as page:

                    def go(url: str) -> None:
                        """Open `url`, and wait until the tab shows it (not the page before)."""
                        page.open(url)
                        path = urllib.parse.urlsplit(url).path
                        deadline = time.monotonic() + 30
                        while page.settled("location.pathname") != path:
                            assert time.monotonic() < deadline, f"the tab never opened {url}"
                            time.sleep(0.05)

                    go(history)
                    dom = page.wait_for_text(
                        result.run_id,
                        SUMMARY,
                        TOOL_SUMMARY,
                        "gpt-4o-mini, turn 1",
                        "gpt-4o-mini, turn 2",
                    )
                    go(metadata)
                    rendered = _rendered(
                        page.wait_for(
                            lambda html: (
                                SUMMARY in (shown := _rendered(html))
                                and about in shown
                                and any(line.startswith(finished) for line in shown)
                            ),
                            "the finished run's current details",
                        )
                    )
                    # the list is read from the visibility store, a moment behind (waited
                    # for below); a page loaded under load can take longer than 5 s
                    deadline = time.monotonic() + 90
                    while True:
                        go(listing)
                        try:
                            page.wait_for_text(result.run_id, timeout=20)
                            break
                        except AssertionError:
                            if time.monotonic() > deadline:
                                raise AssertionError(
                                    "the UI's AgentName filter never listed the run"
                                ) from None
                    go(timeline)
                    page.wait_for_text(TOOL_SUMMARY)
                    page.screenshot(shot)
                return dom, rendered

            # the visibility store lists the run (the UI's list reads it) before the
            # browser asks for it
            listed = f'AgentName="Weather Agent" AND TaskQueue="{task_queue}"'
            await until_listed(ui_server.client, listed, result.run_id)
            dom, rendered = await asyncio.to_thread(look)
            assert result.run_id in dom
            assert SUMMARY in dom, "the workflow summary is not on the run's page"
            assert TOOL_SUMMARY in dom, "the tool activity's summary is not on the run's page"
            assert "gpt-4o-mini, turn 1" in dom and "gpt-4o-mini, turn 2" in dom
            assert SUMMARY in rendered
            assert about in rendered
            assert any(line.startswith(finished) for line in rendered), rendered
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@needs_chromium
async def test_running_run_shows_live_progress_in_current_details(
    ui_server: UiServer, tmp_path: Path
) -> None:
    """While a tool is in flight the UI's current details name the turn, the call and the tokens."""
    entered, gate = threading.Event(), threading.Event()

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        entered.set()
        gate.wait(120)
        return f"The weather in {city} is sunny and 22C."

    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    live = "Turn 1 of 20: running get_weather(city='London') · 15 tokens so far"
    with ScriptedModelServer() as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=ui_server.client,
            tools=[get_weather],
        )
        run_id = uuid.uuid4().hex
        running = asyncio.ensure_future(agent.arun(PROMPT, run_id=run_id))
        try:
            assert await asyncio.to_thread(entered.wait, 60), "the tool never started"
            url = await ui_server.page_url(run_id, "user-metadata")

            def look() -> list[str]:
                with Page(tmp_path / "profile") as page:
                    page.open(url)
                    html = page.wait_for(
                        lambda html: live in _rendered(html), "the live current details"
                    )
                    page.screenshot(ARTIFACTS / "ui-live.png")
                    return _rendered(html)

            rendered = await asyncio.to_thread(look)
            assert SUMMARY in rendered
        finally:
            gate.set()
            result = await running
    assert result.final_output == ANSWER


@needs_chromium
async def test_events_query_answers_in_the_queries_tab(ui_server: UiServer, tmp_path: Path) -> None:
    """The UI's Queries tab offers the `events` query and shows the run's events when run."""
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    with ScriptedModelServer() as model:
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=ui_server.client,
            embedded_worker=False,
        )
        # a query of a closed workflow is answered by a worker replaying it
        async with await _worker(ui_server.client, agent, task_queue):
            result = await agent.arun(PROMPT)
            url = await ui_server.page_url(result.run_id, "query")

            def ask() -> str:
                with Page(tmp_path / "query-profile") as page:
                    page.open(url)
                    page.wait_for_text("events", "Run Query", timeout=30)
                    clicked = page.evaluate(
                        "(() => { const b = [...document.querySelectorAll('button')]"
                        ".find(b => b.textContent.trim() === 'Run Query');"
                        " if (!b) return false; b.click(); return true; })()"
                    )
                    assert clicked, "no Run Query button"
                    # the answer is shown in a code view that renders only its
                    # visible lines: the run's first events
                    html = page.wait_for_text("run_start", "get_weather", timeout=30)
                    page.screenshot(ARTIFACTS / "ui-events-query.png")
                    return html

            html = await asyncio.to_thread(ask)
    assert "What is the weather in London?" in html and "gpt-4o-mini" in html
