"""A log another writer made, whose fields hold values of other kinds, is resumed and read.

A log written elsewhere or edited by hand may say a tool failed with
`"error": true`, end its run with `"error": {"code": ..., "message": ...}`, or
give its times as ISO text. Those lines loaded as they were, the run resumed
and even completed, but every reading of it met them as a `TypeError`: the
masking of each event's error as `resume` (or `run` with the id) built the
result, and `show`'s durations and call summaries. The run's outcome could
never be read again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import FileStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import ANSWER, ROOT, scripted_agent

FIXTURES = ROOT / "tests" / "fixtures"


def _foreign_log(path: Path) -> None:
    """Agentor's log of a run crashed after its tool, as another writer would put it."""
    lines = [
        json.loads(line)
        for line in (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()[:4]
    ]
    lines[1]["ended_at"] = "2026-11-29T20:20:03Z"
    lines[1]["reasoning"] = [{"type": "summary", "text": "look it up"}]
    lines[3]["error"] = False  # no error: the tool answered
    lines[3]["turn"] = "1"
    lines.append({"type": "run_end", "status": "failed", "error": {"code": 503, "message": "gone"}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


async def test_a_log_with_other_writers_values_resumes_and_its_result_reads(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    run_id = f"foreign-{task_queue}"
    runs = tmp_path / "runs"
    runs.mkdir()
    _foreign_log(runs / f"{run_id}.jsonl")
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))

    result = await agent.aresume(run_id)

    assert result.status == "completed" and result.final_output == ANSWER, result.error
    # the tool is not run again: its answer is in the log (its `false` error no error)
    assert model.request_count == 1
    shown = {e.type: e for e in result.events}
    assert shown["tool_result"].error is None and shown["tool_result"].turn is None
    assert [e.error for e in result.events if e.type == "run_end"][0] == (
        '{"code": 503, "message": "gone"}'
    )
    # and read again, once the run has completed: the same outcome, no model request
    again = await agent.aresume(run_id)
    assert again.status == "completed" and again.final_output == ANSWER
    assert model.request_count == 1


def test_show_reads_a_log_with_other_writers_values(tmp_path: Path) -> None:
    _foreign_log(tmp_path / "r.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    # what replay does not read: a call's arguments as an object, a tool_call's as a list
    lines[1]["calls"][0]["function"]["arguments"] = {"city": "London"}
    lines[2]["args"] = ["London"]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    shown = subprocess.run(
        [sys.executable, "-m", "agentor_temporal", "show", "r", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert 'failed: {"code": 503, "message": "gone"}' in shown.stdout
    assert "asks for get_weather(city='London')" in shown.stdout
    assert "get_weather(['London'])" in shown.stdout


async def test_a_calls_arguments_kept_as_an_object_are_replayed_as_json_text(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """A provider refuses arguments that are no text ("expected a string, but got an
    object"): replayed as another writer's log kept them, every resume failed so."""
    run_id = f"foreign-args-{task_queue}"
    runs = tmp_path / "runs"
    runs.mkdir()
    fixture = (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()[:4]
    lines = [json.loads(line) for line in fixture]
    lines[1]["calls"][0]["function"]["arguments"] = {"city": "London"}
    (runs / f"{run_id}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))

    result = await agent.aresume(run_id)

    assert result.status == "completed" and result.final_output == ANSWER, result.error
    assert model.request_count == 1
    asked = [m for m in model.requests[0]["messages"] if m.get("tool_calls")]
    assert [c["function"]["arguments"] for c in asked[0]["tool_calls"]] == ['{"city": "London"}']
