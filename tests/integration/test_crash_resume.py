"""The seed's worked example with real processes: SIGKILL mid-run, resume elsewhere."""

from __future__ import annotations

import json
import math
import shutil
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import forkserver
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import (
    ANSWER,
    ROOT,
    SEED_EVENT_TYPES,
    finish,
    ledger_lines,
    scripted_agent,
    spawn,
    wait_until,
)

FIXTURES = ROOT / "tests" / "fixtures"


def _env(
    address: str,
    model: ScriptedModelServer,
    task_queue: str,
    store: Path,
    ledger: str,
    **extra: str,
) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_STORE": str(store),
        "AGENT_LEDGER": ledger,
        **extra,
    }


async def test_killed_after_tool_result_is_resumed_by_another_process(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """Killed after the tool answered, another interpreter finishes: tool once, model once more."""
    runs, marker = tmp_path / "runs", tmp_path / "blocked"
    run_id = uuid.uuid4().hex
    env = _env(
        temporal_address,
        model,
        task_queue,
        runs,
        ledger,
        BLOCK_AFTER="tool_result",
        BLOCK_MARKER=str(marker),
    )
    child = spawn(["run", "--run-id", run_id], env)
    try:
        wait_until(marker.exists, "the tool_result to reach the JSONL file", timeout=60)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    assert [e.type for e in FileStore(runs).load(run_id)] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
    ]
    assert model.request_count == 1 and len(ledger_lines(ledger)) == 1

    resumed = finish(
        spawn(
            ["resume", "--run-id", run_id], _env(temporal_address, model, task_queue, runs, ledger)
        )
    )

    assert resumed["status"] == "completed" and resumed["final_output"] == ANSWER
    assert len(ledger_lines(ledger)) == 1, "the tool ran again"
    assert model.request_count == 2, "the model was not asked exactly once more"
    mirrored = FileStore(runs).load(run_id)
    assert [e.type for e in mirrored] == SEED_EVENT_TYPES
    projected = await TemporalStore(client).aload(run_id)
    assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in projected]
    assert resumed["events"] == [e.to_dict() for e in projected]


async def test_agentor_crashed_log_is_resumed_here(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A run Agentor 0.1.1 left torn after its tool is finished here: model once, no tool."""
    run_id = "agentor-crashed-" + task_queue
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(FIXTURES / "crashed-after-tool.jsonl", runs / f"{run_id}.jsonl")
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs), ledger=ledger)

    result = await agent.aresume(run_id)

    assert result.status == "completed" and result.final_output == ANSWER
    assert model.request_count == 1 and ledger_lines(ledger) == []
    request = model.requests[0]["messages"]
    assert request[-1] == {
        "role": "tool",
        "tool_call_id": "call_af45d8562340",
        "content": "The weather in London is sunny and 22C.",
    }
    events = FileStore(runs).load(run_id)
    assert [e.type for e in events] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
        "run_start",
        "generation",
        "message",
        "run_end",
    ]
    assert [e.to_dict() for e in events] == [e.to_dict() for e in result.events]
    # the torn fragment was cut before appending: every line parses
    import json

    for line in (runs / f"{run_id}.jsonl").read_text().splitlines():
        json.loads(line)


def _store_only_run(runs: Path, run_id: str, turns: int, result_bytes: int) -> None:
    """A run only the store holds: `turns` tool results of `result_bytes`, then a crash.

    Only the last generation carries its request (the conversation so far),
    which is all a replay reads.
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather?"}]
    start = {"type": "run_start", "agent": "Weather Agent", "model": "gpt-4o-mini"}
    lines: list[dict[str, Any]] = [{**start, "messages": list(messages)}]
    for turn in range(1, turns + 1):
        call = f"call_{turn}"
        function = {"name": "get_weather", "arguments": json.dumps({"city": f"City {turn}"})}
        calls = [{"id": call, "type": "function", "function": function}]
        result = "r" * result_bytes
        generation = {"type": "generation", "turn": turn, "model": "gpt-4o-mini", "calls": calls}
        if turn == turns:
            generation["messages"] = list(messages)
        lines += [
            generation,
            {"type": "tool_call", "name": "get_weather", "call_id": call, "turn": turn},
            {"type": "tool_result", "name": "get_weather", "call_id": call, "result": result},
        ]
        messages += [
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": call, "content": result},
        ]
    (runs / f"{run_id}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


async def test_a_store_only_run_too_large_to_send_whole_is_refused_clearly(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """History gone and 3 MB of conversation: a ValueError naming the size, not a raw RPCError.

    A long conversation goes by reference to the run's history; a run only the
    store holds has none, and sent whole it is over what one payload carries.
    """
    runs = tmp_path / "runs"
    runs.mkdir()
    big, small = f"big-{task_queue}", f"small-{task_queue}"
    _store_only_run(runs, big, turns=15, result_bytes=200_000)
    _store_only_run(runs, small, turns=3, result_bytes=200_000)
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))
    with pytest.raises(ValueError, match=r"cannot be continued: its conversation is 3\.0\d MB"):
        await agent.aresume(big)
    with pytest.raises(RPCError):  # nothing started
        await client.get_workflow_handle(big).describe()
    assert model.request_count == 0
    # 600 KB goes whole, as before
    result = await agent.aresume(small)
    assert result.status == "completed" and model.request_count == 1


async def test_a_store_only_run_nested_too_deep_is_refused_clearly(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """A log whose conversation nests 600 levels: a ValueError naming it, not a wedged run.

    Such a line parses, but the run copies its messages recursively: started,
    every workflow task failed on Python's recursion limit.
    """
    run_id = f"deep-{task_queue}"
    runs = tmp_path / "runs"
    runs.mkdir()
    log = (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()
    lines = [json.loads(line) for line in log[:4]]  # the fifth is torn
    nested: Any = "leaf"
    for _ in range(600):
        nested = [nested]
    lines[1]["messages"][1]["extra"] = nested
    (runs / f"{run_id}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))
    with pytest.raises(ValueError, match=r"cannot be continued: its conversation nests 602 levels"):
        await agent.aresume(run_id)
    with pytest.raises(RPCError):  # nothing started
        await client.get_workflow_handle(run_id).describe()
    assert model.request_count == 0


async def test_a_store_only_run_replaying_to_a_non_message_is_refused_clearly(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """A log whose request holds `{}` as a message: a ValueError naming it, nothing started.

    Before, each resume started a segment that failed at once as InvalidInput,
    the same way every time.
    """
    run_id = f"nonmessage-{task_queue}"
    runs = tmp_path / "runs"
    runs.mkdir()
    log = (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()
    lines = [json.loads(line) for line in log[:4]]  # the fifth is torn
    lines[1]["messages"].append({})
    (runs / f"{run_id}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))
    with pytest.raises(ValueError, match=r"replays to messages no run takes \(input\[2\]"):
        await agent.aresume(run_id)
    with pytest.raises(RPCError):  # nothing started
        await client.get_workflow_handle(run_id).describe()
    assert model.request_count == 0


#: written in the log as an integer of 5000 digits (json.dumps refuses to write one)
PAST_INT_LIMIT = "<an integer past Python's int-text limit>"


@pytest.mark.parametrize(
    "tokens",
    [10**30, -5, math.nan, math.inf, "many", [1], PAST_INT_LIMIT],
    ids=["huge", "negative", "nan", "inf", "text", "list", "past-int-limit"],
)
async def test_a_log_whose_token_counts_no_run_can_carry_is_still_resumed(
    tokens: Any,
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """A log's count no run can carry is clamped (or 0), as a provider's is, not refused for
    good, and never costs the generation it counts.

    The run refuses such counts in its input (AgentTokens is a 64-bit search
    attribute): every resume of the log failed at its start, the same way. A
    count Python writes but no int holds (NaN, Infinity: Agentor's json.dumps
    writes them) or that is no number made the store skip the whole
    generation: resume lost the turn's answer and the tool call in it. So did
    an integer of more digits than Python reads (standard JSON, 4300+).
    """
    run_id = f"tokens-{task_queue}"
    runs = tmp_path / "runs"
    runs.mkdir()
    log = (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()
    lines = [json.loads(line) for line in log[:4]]  # the fifth is torn
    lines[1]["usage"]["total_tokens"] = tokens
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (runs / f"{run_id}.jsonl").write_text(text.replace(f'"{PAST_INT_LIMIT}"', "9" * 5000))
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs), ledger=ledger)

    result = await agent.aresume(run_id)

    assert result.status == "completed" and result.final_output == ANSWER, result.error
    assert model.request_count == 1 and ledger_lines(ledger) == []
    assert [e.type for e in result.events][:4] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
    ]


async def test_damaged_log_is_resumed_from_what_is_readable(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Unknown fields load; garbage, wrong-typed and torn lines are skipped; resume finishes."""
    import json

    run_id = "agentor-damaged-" + task_queue
    runs = tmp_path / "runs"
    runs.mkdir()
    lines = (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["written_by"] = "a newer writer"  # unknown field
    damaged = [
        json.dumps(first),
        lines[1].replace('"total_tokens": 15', '"total_tokens": 15, "cached_tokens": 2'),
        "not json at all",
        lines[2],
        lines[3],
        json.dumps({"type": "generation", "turn": 2, "messages": "lost in a bad write"}),
        lines[4],  # the torn final line Agentor left
    ]
    (runs / f"{run_id}.jsonl").write_text("\n".join(damaged))
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs), ledger=ledger)

    result = await agent.aresume(run_id)

    assert result.status == "completed" and result.final_output == ANSWER
    assert model.request_count == 1 and ledger_lines(ledger) == []
    assert model.requests[0]["messages"][-1]["role"] == "tool"
    assert [e.type for e in result.events][:4] == [
        "run_start",
        "generation",
        "tool_call",
        "tool_result",
    ]


def test_sync_run_many_times_in_one_process(
    tmp_path: Path, temporal_address: str, task_queue: str
) -> None:
    """Sync run()/resume() work repeatedly in one plain script (Agentor 0.1.1 fails the second)."""
    script = f"""
import json
import math
from agentor_temporal.testing import ScriptedModelServer
from helpers import weather_agent, PROMPT
with ScriptedModelServer() as model:
    agent = weather_agent(
        base_url=model.base_url, task_queue={task_queue!r}, temporal={temporal_address!r}
    )
    results = [agent.run(PROMPT) for _ in range(4)]
    again = agent.resume(results[0].run_id)
    print(json.dumps([r.status for r in results + [again]] + [model.request_count]))
"""
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    import os

    out = forkserver.run(
        [sys.executable, "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        out.stdout.strip().splitlines()[-1]
        == '["completed", "completed", "completed", "completed", "completed", 8]'
    )


async def test_a_log_holding_nan_is_continued_with_standard_json_in_history(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """Numbers JSON has no word for (NaN, Infinity: Agentor's json.dumps writes them in a
    call's arguments or a message) are null in the continued run's history, as in the
    JSONL and the model's requests: before, its input carried the tokens `NaN` and
    `Infinity`, which no other SDK, the UI or the temporal CLI decodes."""
    run_id = f"nan-{task_queue}"
    runs = tmp_path / "runs"
    runs.mkdir()
    log = (FIXTURES / "crashed-after-tool.jsonl").read_text().splitlines()
    lines = [json.loads(line) for line in log[:4]]  # the fifth is torn
    lines[1]["messages"][1]["weight"] = math.nan
    lines[2]["args"]["margin"] = math.inf
    lines[3]["args"]["margin"] = -math.inf
    (runs / f"{run_id}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs), ledger=ledger)

    result = await agent.aresume(run_id)

    assert result.status == "completed" and result.final_output == ANSWER, result.error
    assert model.request_count == 1 and ledger_lines(ledger) == []
    history = await client.get_workflow_handle(run_id).fetch_history()
    for event in history.events:
        for payload in _payloads(event):
            json.loads(payload, parse_constant=_refuse)  # standard JSON only


def _refuse(token: str) -> Any:
    raise AssertionError(f"{token} in history")


def _payloads(event: Any) -> list[bytes]:
    """The JSON payloads an event's input or result carries."""
    kind = event.WhichOneof("attributes")
    attrs = getattr(event, kind)
    found: list[bytes] = []
    for name in ("input", "result"):
        if name in attrs.DESCRIPTOR.fields_by_name and attrs.HasField(name):
            found += [p.data for p in getattr(attrs, name).payloads]
    return found
