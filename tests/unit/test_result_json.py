"""A run's JSON (`--json`, the HTTP routes) is written a piece at a time, in memory that
does not grow with the square of its turns, and is the same value as `to_dict()`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tracemalloc
from typing import Any

import pytest

from agentor_temporal import Agentor
from agentor_temporal.cli import _report
from agentor_temporal.serve._state import result_response
from agentor_temporal.store import Event, PendingApproval, RunResult, Usage


def long_result(turns: int, size: int) -> RunResult:
    """A finished run as `resume` returns it: each generation's request holds every
    message before it, the message objects shared (as history's projection shares them)."""
    messages: list[dict[str, Any]] = [{"content": "go", "role": "user"}]
    events = [Event(type="run_start", messages=list(messages))]
    for turn in range(1, turns + 1):
        call = {
            "function": {"arguments": "{}", "name": "read"},
            "id": f"c{turn}",
            "type": "function",
        }
        events.append(
            Event(
                type="generation",
                turn=turn,
                messages=list(messages),
                calls=[call],
                usage=Usage(1, 1, 2),
            )
        )
        result = f"{turn} " + "x" * size
        events.append(
            Event(type="tool_result", turn=turn, name="read", call_id=f"c{turn}", result=result)
        )
        messages.append({"content": None, "role": "assistant", "tool_calls": [call]})
        messages.append({"content": result, "role": "tool", "tool_call_id": f"c{turn}"})
    events.append(Event(type="run_end", status="completed"))
    return RunResult("done", run_id="r1", events=events, messages=messages)


def test_the_pieces_make_the_same_json_as_to_dict() -> None:
    """Key order, standard JSON values (NaN, lone surrogates) and `extra` as `to_dict()`."""
    result = long_result(3, 10)
    result.events.insert(1, Event(type="generation", turn=1, messages=[], text="\ud800"))
    result.events.append(Event(type="tool_call", args={"x": float("nan")}, name="t"))
    result.final_output = "x\udcff"
    result.pending_approvals = [PendingApproval("c1", "read", {"n": 1}, 1, "e1")]
    text = "".join(result.json_chunks({"agent": "A"}))
    expected = {**result.to_dict(), "agent": "A"}
    # the same keys in the same order, all the way down
    assert json.dumps(json.loads(text)) == json.dumps(expected)


def test_a_long_runs_json_is_written_in_memory_of_one_event() -> None:
    """300 turns whose JSON is ~100x its largest event: the CLI's `--json` never holds it whole
    (it built the whole dict and string, indented: 3 GB and 92 s for a real 1,000-turn run)."""
    result = long_result(300, 1_000)
    written = 0

    class Sink:
        def write(self, text: str) -> int:
            nonlocal written
            written += len(text)
            return len(text)

        def writelines(self, lines: Any) -> None:
            for line in lines:
                self.write(line)

        def flush(self) -> None:
            pass

    args = argparse.Namespace(json=True, agent="m:a")
    tracemalloc.start()
    stdout, sys.stdout = sys.stdout, Sink()  # type: ignore[assignment]
    try:
        assert _report(result, args) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        sys.stdout = stdout
        tracemalloc.stop()
    last = len(json.dumps(result.events[-3].to_dict()))  # the largest event
    assert written > 50 * last, (written, last)  # the output is quadratic...
    assert peak < 10 * last, (peak, last)  # ...what is held is not


@pytest.mark.parametrize("turns", [0, 40])
def test_serve_answers_a_run_as_pieces_of_the_same_json(turns: int) -> None:
    """`GET /runs/{id}` and a resume answer with the run's JSON plus its agent's name."""
    result = long_result(turns, 100)
    agent = Agentor(name="A", model="m", instructions="i", embedded_worker=False)
    response = result_response(result, agent)

    async def body() -> str:
        return "".join(
            [c if isinstance(c, str) else bytes(c).decode() async for c in response.body_iterator]
        )

    text = asyncio.run(body())
    assert response.media_type == "application/json"
    assert json.loads(text) == {**result.to_dict(), "agent": "A"}
