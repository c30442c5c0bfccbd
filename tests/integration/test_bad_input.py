"""Bad input that needs a server: a differently built agent in another process, bad tool calls.

Other bad input is covered where its subject lives: unknown run ids, hostile
run ids (facade and workflow id), unknown agents and malformed workflow input
in `test_runs.py`; damaged JSONL in `test_crash_resume.py` and the unit tests;
oversized tool results in `test_payload_limits.py`; an unreachable Temporal in
`tests/unit/test_connection.py`.
"""

from __future__ import annotations

import signal
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import Agentor, function_tool
from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer

from helpers import (
    ANSWER,
    ledger_lines,
    scripted_agent,
    spawn,
    stop_process,
    wait_until,
    weather_tool,
)


@function_tool
def get_time(city: str) -> str:
    """Local time in a city."""
    return "noon"


@pytest.mark.slow
async def test_agent_built_differently_in_another_process_cannot_resume(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A run whose process died is refused by an agent built otherwise, taken by one built alike."""
    run_id = uuid.uuid4().hex
    env = {
        "TEMPORAL_ADDRESS": temporal_address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
        "TOOL_DELAY": "60",
    }
    first = spawn(["run", "--run-id", run_id], env)
    try:
        wait_until(lambda: ledger_lines(ledger), "the tool to start", timeout=60)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop_process(first)

    def built(**kwargs: Any) -> Agentor:
        return scripted_agent(model, client, task_queue, ledger=ledger, **kwargs)

    other_instructions = built(instructions="Be terse.")
    with pytest.raises(ValueError, match="built differently") as info:
        await other_instructions.aresume(run_id)
    assert "instructions differ" in str(info.value)
    other_tools = built(tools=[weather_tool(ledger), get_time])
    with pytest.raises(ValueError, match="tools not in the run: get_time"):
        await other_tools.aresume(run_id)
    assert len(ledger_lines(ledger)) == 1  # neither ran anything

    # the same build, in this other process, is recognised and finishes the run
    result = await built().aresume(run_id)
    assert result.status == "completed" and result.final_output == ANSWER
    assert len(ledger_lines(ledger)) == 2  # only the call in flight at the kill, again


def _news_tool(since: datetime) -> Any:
    """A tool whose default is computed when it is defined, as `datetime.now()` would be."""

    def get_news(city: str, since: datetime = since) -> str:
        """News for a city.

        Args:
            city: The city.
            since: From when.
        """
        return f"Quiet in {city} since {since:%Y}."

    return function_tool(get_news)


async def test_a_default_computed_at_import_leaves_the_run_resumable_anywhere(
    client: Client, task_queue: str
) -> None:
    """A default that differs in each process (a time, a UUID) is not how an agent is built."""
    with ScriptedModelServer([Fail(400, "the model refuses")]) as model:

        def built(since: datetime) -> Agentor:
            return scripted_agent(model, client, task_queue, tools=[_news_tool(since)])

        first = await built(datetime(2020, 1, 1)).arun("News from Oslo?")
        assert first.status == "failed"
        # the same code, imported by another process a moment later
        model.set_script([CallTool("get_news", {"city": "Oslo"}), Reply("done")])
        result = await built(datetime(2021, 1, 1)).aresume(first.run_id)

    assert result.status == "completed" and result.final_output == "done", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.result == "Quiet in Oslo since 2021."
    [tool] = model.requests[-1]["tools"]
    assert "default" not in tool["function"]["parameters"]["properties"]["since"]


async def test_bad_tool_calls_answer_the_model_and_run_nothing(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Invalid JSON, non-object or ill-typed arguments and unknown tools: the model reads why."""
    script = [
        [
            CallTool("get_weather", "{not json"),
            CallTool("get_weather", "[1, 2]"),
            CallTool("get_weather", {"city": {"name": "London"}}),
            CallTool("get_forecast", {"city": "London"}),
        ],
        Reply("I could not look it up."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, ledger=ledger, max_tool_failures=10)
        result = await agent.arun("What is the weather in London?")
        answers = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert result.status == "completed" and result.final_output == "I could not look it up."
    assert ledger_lines(ledger) == []
    assert answers[0].startswith("Error: arguments were not valid JSON (Expecting property name")
    assert answers[1] == "Error: arguments must be a JSON object."
    assert answers[2] == (
        "Error: ValueError: invalid arguments for get_weather: city: Input should be a valid string"
    )
    assert answers[3] == "Error: unknown tool 'get_forecast'. Available tools: get_weather."
