"""A run's JSON (`--json`, the HTTP routes) is written a piece at a time, in memory that
does not grow with the square of its turns, and is the same value as `to_dict()`."""

from __future__ import annotations

import argparse
import asyncio
import io
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


def test_a_long_runs_event_stream_encodes_each_message_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`GET /runs/{id}/events` from 0 of a long run: each generation's request is most of the
    one before, and its messages are copied and encoded once, not once per generation (44 s
    for a real 1,000-turn run, on serve's event loop), with the same frames."""
    from agentor_temporal.serve import _events
    from agentor_temporal.store import events as events_module

    result = long_result(100, 10)
    calls = 0
    canonical = events_module._canonical

    def counted(value: Any) -> Any:
        nonlocal calls
        calls += 1
        return canonical(value)

    monkeypatch.setattr(events_module, "_canonical", counted)

    class Agent:
        async def stream(self, run_id: str, *, after: int, text: bool) -> Any:
            for event in result.events[after:]:
                yield event

    async def frames() -> list[bytes]:
        return [f async for f in _events.run_frames(Agent(), "r1", 0, False)]  # type: ignore[arg-type]

    sent = asyncio.run(frames())
    encoded = calls
    data = [json.loads(f.split(b"data: ", 1)[1]) for f in sent[1:]]
    assert data == [e.to_dict() for e in result.events]
    assert [f.split(b"\n", 1)[0] for f in sent[1:]] == [
        f"id: {n}".encode() for n in range(1, len(result.events) + 1)
    ]
    # each message and its parts once (a tool call is ~10 values): not the square of turns
    assert encoded < 20 * len(result.messages), encoded


def test_a_long_runs_export_encodes_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`export` (and `show --jsonl`) of a long run: the same lines as `to_json()`, each
    shared message encoded once (a real 1,000-turn run's export took 22.8 s, now 4.2 s)."""
    from agentor_temporal import _cli_inspect
    from agentor_temporal.store import events as events_module

    result = long_result(100, 10)
    lines = [e.to_json() + "\n" for e in result.events]
    calls = 0
    canonical = events_module._canonical

    def counted(value: Any) -> Any:
        nonlocal calls
        calls += 1
        return canonical(value)

    monkeypatch.setattr(events_module, "_canonical", counted)
    out = io.StringIO()
    _cli_inspect._write_jsonl(out, result.events)
    assert out.getvalue() == "".join(lines)
    assert calls < 20 * len(result.messages), calls


def test_resume_of_a_finished_run_reads_no_history_for_its_progress() -> None:
    """`agentor-temporal resume` of a finished run narrates nothing of it, so it reads none
    of its history for that (a long run's latest execution is megabytes): describing it
    says the run finished, and which execution that was."""
    from temporalio.client import WorkflowExecutionStatus

    from agentor_temporal import _progress

    reads: list[int] = []

    class Described:
        run_id = "e1"
        history_length = 10
        status = WorkflowExecutionStatus.COMPLETED

    class Handle:
        async def describe(self) -> Described:
            return Described()

        async def fetch_history(self) -> None:
            reads.append(1)  # a failed read is a skipped beat: counted, not raised
            raise RuntimeError("history was read")

    class Client:
        def get_workflow_handle(self, run_id: str, **kwargs: Any) -> Handle:
            return Handle()

    async def go() -> str:
        client: Any = Client()
        skip = await _progress.finished_execution(client, "r1")
        assert skip == "e1"
        out = io.StringIO()

        async def work() -> str:
            await asyncio.sleep(0.3)
            return "done"

        result = await _progress.follow(client, "r1", work(), _progress.Progress(out, skip))
        assert out.getvalue() == "" and reads == []
        return result

    assert asyncio.run(go()) == "done"
