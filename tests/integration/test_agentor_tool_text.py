"""A tool's return value is the same text here as under Agentor 0.1.1: to the model, in the JSONL.

An Agentor user's tools that return a `date`, a dataclass, a set or a
pydantic model answered their model differently here: a value JSON cannot
hold as a JSON string of its `str()` (`"2026-01-01"`, with its quotes), a
pydantic model as pydantic's JSON (no spaces, `T` in its datetimes). The
`tool_result` lines of the log differed from the ones Agentor writes for the
same tool, and so did the conversation a resume sent.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

import pydantic
from temporalio.client import Client

from agentor_temporal import FileStore, function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

import agentor_ref
from helpers import scripted_agent


@dataclasses.dataclass
class Forecast:
    city: str
    high: int


class Reading(pydantic.BaseModel):
    city: str
    when: datetime.datetime


VALUES: dict[str, Any] = {
    "forecast": Forecast("Oslo", 4),
    "reading": Reading(city="Oslo", when=datetime.datetime(2026, 1, 1, 9)),
    "day": datetime.date(2026, 1, 1),
    "cities": {"Oslo"},
}
#: what Agentor 0.1.1 gives the model for each (`agentor.engine.tools.stringify`)
AGENTORS = {
    "forecast": "Forecast(city='Oslo', high=4)",
    "reading": '{"city": "Oslo", "when": "2026-01-01 09:00:00"}',
    "day": "2026-01-01",
    "cities": "{'Oslo'}",
}


def _tool(name: str) -> Any:
    def returns() -> Any:
        """Returns a value of a type of its own."""
        return VALUES[name]

    returns.__name__ = name
    return function_tool(returns)


async def test_tool_answers_read_as_agentor_writes_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    theirs = agentor_ref.tools()
    if theirs is not None:  # the table is Agentor's own text
        assert {k: theirs.stringify(v) for k, v in VALUES.items()} == AGENTORS
    script = [[CallTool(name, id=f"call_{name}") for name in VALUES], Reply("Noted.")]
    with ScriptedModelServer(script) as model:
        tools = [_tool(name) for name in VALUES]
        agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path), tools=tools)
        result = await agent.arun("Look it all up.")
        sent = model.requests[-1]["messages"]
    assert result.status == "completed" and result.final_output == "Noted.", result.error
    # the model read Agentor's text
    assert {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"} == {
        f"call_{name}": text for name, text in AGENTORS.items()
    }
    # and the log says it, line for line as Agentor writes a tool_result
    lines = [
        json.loads(line) for line in (tmp_path / f"{result.run_id}.jsonl").read_text().splitlines()
    ]
    assert {
        line["name"]: line["result"] for line in lines if line["type"] == "tool_result"
    } == AGENTORS
    store = agentor_ref.load()
    if store is not None:
        events = store.FileStore(tmp_path).load(result.run_id)
        assert store.replay_messages(events) == result.messages
        assert [m for m in result.messages if m["role"] == "tool"] == [
            m for m in sent if m["role"] == "tool"
        ]
