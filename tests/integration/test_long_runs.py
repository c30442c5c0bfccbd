"""Long runs: continue-as-new between turns, conversations by reference, bounded history.

Small versions of the benchmark's runs (`bench/long_runs.py`): a lowered
history budget (`AGENTOR_HISTORY_BUDGET`, recorded in each segment's spec)
makes a run of a few dozen turns cross several continuations, so the suite
covers what a 1,000-turn run does in a few seconds per test.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import tracemalloc
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.service import RPCError
from temporalio.worker import Replayer

from agentor_temporal import (
    Agentor,
    Event,
    FileStore,
    MemoryStore,
    TemporalStore,
    function_tool,
)
from agentor_temporal.cli import execute
from agentor_temporal.streaming import follow
from agentor_temporal.testing import CallTool, Fail, Hang, Raw, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import AgentRunWorkflow, policies
from agentor_temporal.workflows.policies import HISTORY_LIMIT_BYTES, MAX_REQUEST_BYTES

import agentor_ref
from helpers import (
    CODER_NAME,
    chunk_reader,
    chunk_tool,
    coder,
    ledger_lines,
    stop_process,
    tool_results,
    transfer_tool,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent.parent
GOLDEN = Path(__file__).parent / "golden" / "limit_terminated_history.json.gz"
#: Small enough that a run of 2 KB results continues as new every five or six turns: 24
#: turns make four executions or more (40 made eight, where the tests need three).
BUDGET = 60_000
#: turns of 2 KB results a run makes to cross BUDGET several times
TURNS = 24


def bare(event: Event) -> dict[str, Any]:
    """An event without the request messages (streamed generations sent by reference omit them)."""
    data = event.to_dict()
    if data["type"] == "generation":
        data.pop("messages", None)
    return data


async def history_sizes(client: Client, run_id: str) -> list[int]:
    sizes = []
    for segment in await TemporalStore(client).segments(run_id):
        handle = client.get_workflow_handle(run_id, run_id=segment.execution_run_id)
        info = (await handle.describe()).raw_description.workflow_execution_info
        sizes.append(int(info.history_size_bytes))
    return sizes


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_model_calls"])
async def test_a_long_run_continues_as_new_and_reads_as_one_run(
    local: bool,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Across several continuations: one log, every tool once, turns and positions keep counting.

    With local model requests, the conversation also goes by reference (a
    small inline limit), so its requests are read back from the markers.
    """
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    if local:
        monkeypatch.setenv("AGENTOR_INLINE_CONVERSATION_BYTES", "8000")
    turns, ledger, address = TURNS, str(tmp_path / "ledger"), temporal_address
    runs = tmp_path / "runs"
    with ScriptedModelServer(chunk_reader(turns)) as model:
        agent = coder(
            model, client, task_queue, tools=[chunk_tool(ledger, 2000)], local_model_calls=local
        )
        run_id = uuid.uuid4().hex
        # every workflow task replays from history: continuations must be deterministic
        async with build_worker(
            client, [agent], task_queue=task_queue, store=FileStore(runs), max_cached_workflows=0
        ):
            result = await agent.arun("Read the repository.", run_id=run_id, max_turns=turns + 1)
            last_request = model.requests[-1]["messages"]
            handle = client.get_workflow_handle(run_id)
            metadata = await handle.query(
                "__temporal_workflow_metadata", result_type=WorkflowMetadata
            )
            state = await handle.query("state")
    assert result.status == "completed" and result.final_output == f"Read {turns} chunks."
    # the run's current details and state say how big its history is
    assert re.search(r" · history [\d.]+ [kM]B, [\d,]+ events$", metadata.current_details)
    assert state["execution"] >= 3 and 0 < state["history_bytes"] < BUDGET + 60_000
    # the CLI's `show`, in this process (a process of its own only added its imports)
    capsys.readouterr()
    assert (
        await asyncio.wait_for(
            asyncio.to_thread(execute, ["show", run_id, "--temporal", address]), 60
        )
        == 0
    )
    shown = capsys.readouterr().out
    history_line = next(line for line in shown.splitlines() if line.startswith("history"))
    assert re.search(r"MB, [\d,]+ events in the latest of \d+ executions \(largest", history_line)
    segments = await TemporalStore(client).segments(run_id)
    assert len(segments) >= 3
    assert [s.status for s in segments] == ["continued_as_new"] * (len(segments) - 1) + [
        "completed"
    ]
    sizes = await history_sizes(client, run_id)
    assert max(sizes) < BUDGET + 60_000, sizes  # the budget, plus at most one turn past it
    # every tool ran once, every turn once, and the model saw the whole conversation
    calls = Counter(line.split()[1] for line in ledger_lines(ledger))
    assert sorted(calls) == sorted(f"call_{n}" for n in range(1, turns + 1))
    assert set(calls.values()) == {1}
    events = result.events
    assert [e.turn for e in events if e.type == "generation"] == list(range(1, turns + 2))
    assert [e.type for e in events].count("run_start") == 1
    assert [e.type for e in events].count("run_end") == 1
    assert result.usage.total_tokens == 15 * (turns + 1)
    # the search attributes of the last execution count the whole run
    attributes = (await client.get_workflow_handle(run_id).describe()).typed_search_attributes
    from agentor_temporal.workflows.status import AGENT_STATUS, AGENT_TOKENS

    assert attributes.get(AGENT_STATUS) == "completed"
    assert attributes.get(AGENT_TOKENS) == result.usage.total_tokens
    assert sum(1 for m in last_request if m["role"] == "tool") == turns
    assert result.messages[: len(last_request)] == last_request
    # every generation's request is whole in the log, as the model received it
    requests = [e.messages for e in events if e.type == "generation"]
    assert requests == [r["messages"] for r in model.requests]
    # the JSONL mirror is one log, equal to history, and Agentor 0.1.1 replays it the same
    mirrored = FileStore(runs).load(run_id)
    assert [e.to_dict() for e in mirrored] == [e.to_dict() for e in events]
    ref = agentor_ref.load()
    if ref is not None:
        theirs = ref.FileStore(runs).load(run_id)
        assert len(theirs) == len(events)
        assert ref.replay_messages(theirs) == result.messages
    # each execution's history replays with the current code
    by_reference = 0
    for index, segment in enumerate(segments):
        history = await client.get_workflow_handle(
            run_id, run_id=segment.execution_run_id
        ).fetch_history()
        await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
        by_reference += sum(1 for r in _local_requests(history) if r.get("conversation"))
        # goldens: the first execution (it continues as new) and the last (it carries on)
        name = {0: "continued_first", len(segments) - 1: "continued_last"}.get(index)
        name = None if local else name
        if os.environ.get("UPDATE_GOLDEN") and name:
            golden = GOLDEN.parent / f"{name}_history.json.gz"
            golden.write_bytes(gzip.compress(history.to_json().encode(), 9))
    # with local requests, those sent by reference are in their markers' results
    assert (by_reference > 0) == local


def _local_requests(history: WorkflowHistory) -> list[dict[str, Any]]:
    """The requests that local `generate` activities' markers carry."""
    found = []
    for event in history.events:
        details = event.marker_recorded_event_attributes.details
        if "data" in details and b'"generate"' in details["data"].payloads[0].data:
            if not details["result"].payloads:
                continue  # a request that failed (timed out on a loaded machine): no answer
            found.append(json.loads(details["result"].payloads[0].data)["request"])
    return found


async def test_a_follower_gets_every_event_once_across_continuations(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One follower keeps up, one falls behind over two continuations: both get each event once."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    turns, ledger = TURNS, str(tmp_path / "ledger")
    with ScriptedModelServer(chunk_reader(turns)) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 2000)])
        run_id = uuid.uuid4().hex
        store = TemporalStore(client)

        async def history(segments: Any) -> list[Event]:
            return [e for s in segments for e in s.events]

        async def keep_up() -> list[Event]:
            return [e async for e in follow(client, run_id, history_events=history)]

        async def fall_behind() -> list[Event]:
            got: list[Event] = []
            async for event in follow(client, run_id, after=3, history_events=history):
                got.append(event)
                if len(got) == 1:
                    # stop reading until the run has continued as new twice
                    for _ in range(600):
                        if len(await store.segments(run_id)) >= 3:
                            break
                        await asyncio.sleep(0.05)
                    else:
                        raise AssertionError("the run did not continue as new twice")
            return got

        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                "AgentRun",
                {"agent": CODER_NAME, "input": "Read the repository.", "max_turns": turns + 1},
                id=run_id,
                task_queue=task_queue,
            )
            fast, slow = await asyncio.gather(keep_up(), fall_behind())
            outcome = await handle.result()
    assert outcome["status"] == "completed"
    recorded = await store.aload(run_id)
    assert len(await store.segments(run_id)) >= 3
    assert [bare(e) for e in fast] == [bare(e) for e in recorded]
    assert [bare(e) for e in slow] == [bare(e) for e in recorded[3:]]


async def test_large_tool_results_past_the_old_request_guard(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A conversation well past the 1.5 MB that runs used to stop at completes.

    Its export, whose JSONL records every request whole (by design: ~28 MB
    here), is written as it is read: the CLI held the whole text, twice, and
    a long run's export took gigabytes of memory (500 turns of 2 KB: 915 MB).
    """
    turns, ledger = 16, str(tmp_path / "ledger")
    with ScriptedModelServer(chunk_reader(turns), keep_requests=1) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 200_000)])
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await agent.arun("Read the repository.", max_turns=turns + 1)
            last_request = model.requests[-1]["messages"]
    assert result.status == "completed", result.error
    assert len(json.dumps(last_request)) > 2 * MAX_REQUEST_BYTES
    calls = Counter(line.split()[1] for line in ledger_lines(ledger))
    assert calls == Counter(f"call_{n}" for n in range(1, turns + 1))
    assert max(await history_sizes(client, result.run_id)) < HISTORY_LIMIT_BYTES
    assert result.run_id is not None
    shown, _ = _peak_memory(["show", result.run_id, "--temporal", temporal_address])
    exported, written = _peak_memory(["export", result.run_id, "--temporal", temporal_address])
    assert written > 25_000_000
    # reading the run costs what `show` costs; writing it, no more than a part of it
    assert exported - shown < written / 4, (shown, exported, written)


async def test_a_long_store_seeded_run_is_read_in_memory_in_proportion_to_the_run(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run resumed from its store's log alone (the server lost it) is read whole, for its
    result, the mirror's check at a worker's first step and `show`, without holding each
    of the log's requests whole.

    A generation's line holds its whole request, so a long run's log grows
    with the square of its turns; the events before the first execution were
    read with `store.load` and every request held apart (500 turns of 2 KB
    results: a 260 MB log, held parsed, at every such read).
    """
    # a conversation a resume from the log may send whole (under 1.5 MB)
    turns, ledger, runs = 50, str(tmp_path / "ledger"), tmp_path / "runs"
    # the log is compared whole below: a mirror write of this 25 MB log that passed the
    # store's 20 s patience on a loaded machine left its tail to a later catch-up
    monkeypatch.setattr(policies, "STORE_PATIENCE", timedelta(seconds=100))
    monkeypatch.setattr(policies, "LOCAL_START_TO_CLOSE", timedelta(seconds=120))
    with ScriptedModelServer(chunk_reader(turns), keep_requests=1) as model:
        agent = coder(
            model, client, task_queue, tools=[chunk_tool(ledger, 24_000)], store=FileStore(runs)
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            first = await agent.arun("Read the repository.", max_turns=turns + 1)
            assert first.status == "completed", first.error
            # the server came back without the run: its log alone, cut before its end
            seeded = f"seeded-{uuid.uuid4().hex}"
            lines = (runs / f"{first.run_id}.jsonl").read_bytes().splitlines(keepends=True)
            (runs / f"{seeded}.jsonl").write_bytes(b"".join(lines[:-1]))
            again = await agent.aresume(seeded)
    assert again.status == "completed" and again.final_output == f"Read {turns} chunks."
    size = (runs / f"{seeded}.jsonl").stat().st_size
    tracemalloc.start()
    try:
        events, missing = await TemporalStore(client).whole(seeded, store=FileStore(runs))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert missing == 0 and len(lines) - 1 < len(events)
    assert [e.to_dict() for e in events] == [e.to_dict() for e in FileStore(runs).load(seeded)]
    assert size > 25_000_000
    assert peak < size / 2, f"{peak:,} bytes held reading a log of {size:,}"


def _peak_memory(args: list[str]) -> tuple[int, int]:
    """The CLI's peak RSS running `args` (bytes), and how many bytes it wrote to stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentor_temporal", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    written = 0
    while chunk := proc.stdout.read(1 << 20):
        written += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, args
    return usage.ru_maxrss * 1024, written


def _worker(address: str, task_queue: str, model: ScriptedModelServer, env: dict[str, str]) -> Any:
    full = {
        **os.environ,
        **env,
        "TEMPORAL_ADDRESS": address,
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "worker.py"),
            "--agents",
            "long_agents:coder",
            "--task-queue",
            task_queue,
            "--store",
            env["RUNS_DIR"],
            "--log-level",
            "ERROR",
        ],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _long_coder(model: ScriptedModelServer, client: Client, task_queue: str, runs: Path) -> Any:
    """`bench/long_agents.py`'s coder (what `_worker` serves), in this process, on `model`."""
    spec = importlib.util.spec_from_file_location("long_agents", ROOT / "bench" / "long_agents.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    served = module.coder
    return Agentor(
        name=served.name,
        model=served.model,
        instructions=served.instructions,
        tools=served.tools,
        store=FileStore(runs),
        base_url=model.base_url,
        api_key="test-key",
        temporal=client,
        task_queue=task_queue,
        embedded_worker=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
async def test_worker_killed_around_a_continue_as_new(
    when: str,
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker SIGKILLed as the run continues as new: another finishes it, no event lost."""
    # one continue-as-new to be killed around, and turns after it on the next worker
    turns, ledger, runs = 16, str(tmp_path / "ledger"), tmp_path / "runs"
    env = {
        "AGENTOR_HISTORY_BUDGET": str(BUDGET),
        "LONG_RUN_RESULT_BYTES": "2000",
        "LONG_RUN_LEDGER": ledger,
        "RUNS_DIR": str(runs),
    }
    run_id = uuid.uuid4().hex
    with ScriptedModelServer(chunk_reader(turns)) as model:
        first = _worker(temporal_address, task_queue, model, env)
        try:
            handle = await client.start_workflow(
                "AgentRun",
                {"agent": CODER_NAME, "input": "Read the repository.", "max_turns": turns + 1},
                id=run_id,
                task_queue=task_queue,
            )
            started = (await handle.describe()).run_id

            async def there() -> bool:
                described = await handle.describe()
                if when == "after":
                    return described.run_id != started
                # the first execution's history is about to pass the budget
                info = described.raw_description.workflow_execution_info
                return described.run_id != started or info.history_size_bytes > BUDGET - 8_000

            for _ in range(1200):
                if await there():
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError(f"the run never got {when} its continue-as-new")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            # another worker (this process's: a process more only added its imports) on the
            # same queue and store, with the agent the first one served
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            async with build_worker(
                client, [_long_coder(model, client, task_queue, runs)], task_queue=task_queue
            ):
                outcome = await asyncio.wait_for(handle.result(), 240)
        finally:
            stop_process(first)
    assert outcome["status"] == "completed"
    events = await TemporalStore(client).aload(run_id)
    assert [e.turn for e in events if e.type == "generation"] == list(range(1, turns + 2))
    results = [e.call_id for e in events if e.type == "tool_result"]
    assert sorted(results) == sorted(f"call_{n}" for n in range(1, turns + 1))
    # a tool in flight when the worker died runs again (same call id); no other twice
    runs_of = Counter(line.split()[1] for line in ledger_lines(ledger))
    assert set(runs_of) == set(results) and sum(runs_of.values()) <= turns + 1
    wait_until(lambda: len(FileStore(runs).load(run_id)) == len(events), "the mirror", 30)
    assert [e.to_dict() for e in FileStore(runs).load(run_id)] == [e.to_dict() for e in events]


async def test_a_run_the_old_50mb_limit_terminated_replays_and_resumes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The golden history (recorded before continue-as-new) replays, and its run resumes."""
    history = WorkflowHistory.from_json(
        "limit-terminated", json.loads(gzip.decompress(GOLDEN.read_bytes()))
    )
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
    segment = await TemporalStore(client).parse(history)
    assert segment.status == "terminated"
    recorded = segment.events
    assert len(recorded) > 290 and recorded[-1].type == "tool_result"
    # Temporal's copy is gone (another server); the store has the log: resume continues it
    run_id = uuid.uuid4().hex
    store = MemoryStore()
    for event in recorded:
        store.append(run_id, event)
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer([Reply("Done reading.")], keep_requests=1) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 10_000)], store=store)
        async with build_worker(client, [agent], task_queue=task_queue):
            result = await agent.aresume(run_id)
            request = model.requests[-1]["messages"]
    assert result.status == "completed" and result.final_output == "Done reading."
    assert ledger_lines(ledger) == []  # no tool ran again
    tools = [e for e in recorded if e.type == "tool_result"]
    assert sum(1 for m in request if m["role"] == "tool") == len(tools)
    assert result.events[: len(recorded)] == recorded
    assert [e.type for e in result.events[len(recorded) :]] == [
        "run_start",
        "generation",
        "message",
        "run_end",
    ]


async def test_resuming_a_conversation_too_large_to_send_whole(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A failed run whose conversation is past the 2 MB payload limit resumes by reference."""
    # ten results just under the one-result cut (MAX_TOOL_RESULT_BYTES): 2.4 MB in fewer
    # turns than 100 KB ones took (22), each turn's request carrying the conversation
    turns, ledger, runs = 10, str(tmp_path / "ledger"), tmp_path / "runs"
    refused: list[int] = []

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        if done < turns:
            return CallTool("read_chunk", {"n": done + 1}, id=f"call_{done + 1}")
        if not refused:
            refused.append(done)
            return Fail(400, "context too long today")
        return Reply(f"Read {done} chunks.")

    with ScriptedModelServer(respond, keep_requests=1) as model:
        agent = coder(
            model,
            client,
            task_queue,
            tools=[chunk_tool(ledger, 240_000)],
            store=FileStore(runs),
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            failed = await agent.arun("Read the repository.", max_turns=turns + 5)
            assert failed.status == "failed" and "context too long" in (failed.error or "")
            result = await agent.aresume(failed.run_id)
            last_request = model.requests[-1]["messages"]
    assert result.status == "completed" and result.final_output == f"Read {turns} chunks."
    assert len(json.dumps(last_request)) > 2_200_000
    assert len(ledger_lines(ledger)) == turns  # no tool ran again
    starts = [e for e in result.events if e.type == "run_start"]
    assert len(starts) == 2 and starts[1].messages == last_request
    assert [e.to_dict() for e in FileStore(runs).load(failed.run_id)] == [
        e.to_dict() for e in result.events
    ]
    ref = agentor_ref.load()
    if ref is not None:
        assert ref.replay_messages(ref.FileStore(runs).load(failed.run_id)) == result.messages


async def test_an_approval_after_several_continuations_pauses_the_run(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run() returns the pause of a later execution, and the decision reaches that execution."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    turns, ledger = TURNS, str(tmp_path / "ledger")

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        if done < turns:
            return CallTool("read_chunk", {"n": done + 1}, id=f"call_{done + 1}")
        if done == turns:
            return CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay")
        return Reply("Paid bob.")

    with ScriptedModelServer(respond) as model:
        agent = coder(
            model,
            client,
            task_queue,
            tools=[chunk_tool(ledger, 2000), transfer_tool(ledger)],
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await agent.arun("Read, then pay bob.", max_turns=turns + 5)
            assert paused.status == "awaiting_approval"
            assert [p.call_id for p in paused.pending_approvals] == ["call_pay"]
            assert len(await TemporalStore(client).segments(paused.run_id)) >= 3
            await agent.aapprove(paused.run_id, "call_pay", by="carol")
            result = await agent.aresume(paused.run_id)
    assert result.status == "completed" and result.final_output == "Paid bob."
    assert sum(1 for line in ledger_lines(ledger) if line.startswith("transfer ")) == 1
    decision = next(e for e in result.events if e.type == "approval_decision")
    assert decision.status == "approved" and decision.result == "carol"


#: a history budget the results of the paused turn alone pass
PAUSE_BUDGET = 20_000


async def test_a_pause_past_the_history_budget_continues_as_new_after_the_decision(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """History past its budget while a call waits: the run waits in that execution, then
    continues as new after the decision; every call runs once."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(PAUSE_BUDGET))
    ledger = str(tmp_path / "ledger")

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        if done == 4:
            # four 8 KB results in the paused turn: its execution passes the budget
            return [
                *(CallTool("read_chunk", {"n": n}, id=f"call_{n}") for n in range(5, 9)),
                CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
            ]
        if done < 12:
            return CallTool("read_chunk", {"n": done + 1}, id=f"call_{done + 1}")
        return Reply("Read and paid.")

    with ScriptedModelServer(respond) as model:
        agent = coder(
            model, client, task_queue, tools=[chunk_tool(ledger, 8000), transfer_tool(ledger)]
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Read and pay.", max_turns=40), 120)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            state = await client.get_workflow_handle(run_id).query("state", result_type=dict)
            before = len(await TemporalStore(client).segments(run_id))
            await agent.aapprove(run_id, "call_pay", by="carol")
            result = await asyncio.wait_for(agent.aresume(run_id), 120)
    # the pause came with history past its budget, in the execution that made the request
    assert state["status"] == "awaiting_approval" and state["history_bytes"] > PAUSE_BUDGET, state
    assert result.status == "completed" and result.final_output == "Read and paid."
    after = len(await TemporalStore(client).segments(run_id))
    assert after > before
    lines = ledger_lines(ledger)
    assert sum(1 for line in lines if line.startswith("transfer")) == 1
    reads = Counter(line for line in lines if not line.startswith("transfer"))
    assert len(reads) == 11 and set(reads.values()) == {1}


async def test_text_deltas_stream_when_the_conversation_goes_by_reference(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A streamed answer to a conversation sent by reference arrives as deltas and whole."""
    turns, ledger = 3, str(tmp_path / "ledger")
    with ScriptedModelServer(chunk_reader(turns), keep_requests=1) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 50_000)])
        async with build_worker(client, [agent], task_queue=task_queue):
            received = [
                e async for e in agent.stream_chat("Read.", stream_text=True, max_turns=turns + 1)
            ]
            last_request = model.requests[-1]["messages"]
    deltas = [e for e in received if e.type == "text_delta"]
    assert "".join(e.text or "" for e in deltas) == f"Read {turns} chunks."
    assert received[-1].type == "run_end" and received[-1].status == "completed"
    assert sum(1 for m in last_request if m["role"] == "tool") == turns


@pytest.mark.parametrize("flood", ["events", "bytes"])
async def test_a_paused_run_flooded_with_signals_stops_resumable_before_temporals_limit(
    flood: str,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A waiting run whose history nears Temporal's limits (signals sent to it) ends failed,
    keeping its turn, and resume goes on after it: never terminated by the server."""
    ledger = str(tmp_path / "ledger")

    def respond(request: dict[str, Any]) -> Any:
        answers = [m for m in request["messages"] if m["role"] == "tool"]
        if not answers:
            return [
                CallTool("read_chunk", {"n": 1}, id="call_read"),
                CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"),
            ]
        if len(answers) == 2:
            # told the transfer did not run: asks for it again
            return CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay_2")
        return Reply("Read and paid.")

    with ScriptedModelServer(respond) as model:
        agent = coder(
            model, client, task_queue, tools=[chunk_tool(ledger, 100), transfer_tool(ledger)]
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Read and pay.", max_turns=10), 60)
            assert paused.status == "awaiting_approval", paused.error
            run_id = paused.run_id
            assert run_id is not None
            handle = client.get_workflow_handle(run_id)
            state = await handle.query("state", result_type=dict)
            if flood == "events":
                limit = state["history_events"] + 100
                monkeypatch.setattr(policies, "PAUSED_HISTORY_EVENTS", limit)
                junk: Any = {"request_id": "again", "decision": "junk"}
            else:
                limit = state["history_bytes"] + 1_000_000
                monkeypatch.setattr(policies, "PAUSED_HISTORY_BYTES", limit)
                junk = "x" * 300_000
            # a client's retry loop: more signals than the limit allows (each
            # adds an event; 3 of these past the limit's megabyte)...
            enough = 120 if flood == "events" else 8
            for _ in range(enough):
                try:
                    await handle.signal("decide_signal", junk)
                except RPCError:
                    break  # the run closed: Temporal refuses signals to it
            # ...which a loaded worker may take in one task, long after the last
            deadline = asyncio.get_running_loop().time() + 60
            while (description := await handle.describe()).status == (
                WorkflowExecutionStatus.RUNNING
            ):
                if asyncio.get_running_loop().time() > deadline:
                    pytest.fail(f"the run still waits 60 s after {enough} signals")
                await asyncio.sleep(0.1)
            stopped = await asyncio.wait_for(agent.aresume(run_id), 60)
            assert stopped.status == "awaiting_approval", stopped.error
            await agent.aapprove(run_id, "call_pay_2", by="carol")
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    # closed by the run itself, short of the limit, not terminated by the server
    assert description.status == WorkflowExecutionStatus.COMPLETED
    info = description.raw_description.workflow_execution_info
    grown = info.history_length if flood == "events" else info.history_size_bytes
    # stopped once past the limit, far short of Temporal's 51,200 events or 50 MB (the
    # signals the worker had not yet taken are recorded too)
    assert limit < grown < (limit + 200 if flood == "events" else HISTORY_LIMIT_BYTES)
    assert result.status == "completed" and result.final_output == "Read and paid."
    ends = [e for e in result.events if e.type == "run_end"]
    assert ends[0].status == "failed" and "stopped while waiting" in (ends[0].error or "")
    answers = {e.call_id: e for e in result.events if e.type == "tool_result"}
    assert answers["call_pay"].error == "run failed" and answers["call_read"].error is None
    # the chunk was read once, and the transfer ran once: the second call's
    lines = ledger_lines(ledger)
    assert sum(1 for line in lines if line.startswith("transfer")) == 1
    assert sum(1 for line in lines if line.endswith("call_read")) == 1


async def test_a_run_flooded_with_signals_while_a_tool_runs_stops_resumable_before_the_limit(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mid-turn (a tool running for long, nobody asked to approve) a run cannot continue as
    new either: one whose history nears Temporal's limits stops itself, failed, keeping its
    finished call and answering the running one as stopped; resume goes on after it."""
    ledger = str(tmp_path / "ledger")
    started = asyncio.Event()
    slow_calls = 0

    @function_tool
    async def crawl(site: str) -> str:
        """Crawl a site (takes long; a cancel stops it).

        Args:
            site: Which site.
        """
        nonlocal slow_calls
        slow_calls += 1
        if slow_calls == 1:
            started.set()
            await asyncio.sleep(60)
        return f"crawled {site}"

    def respond(request: dict[str, Any]) -> Any:
        answers = [m for m in request["messages"] if m["role"] == "tool"]
        if not answers:
            return [
                CallTool("read_chunk", {"n": 1}, id="call_read"),
                CallTool("crawl", {"site": "a.example"}, id="call_crawl"),
            ]
        if len(answers) == 2:
            # told the crawl was stopped: asks for it again
            return CallTool("crawl", {"site": "a.example"}, id="call_crawl_2")
        return Reply("Read and crawled.")

    with ScriptedModelServer(respond) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 100), crawl])
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Read and crawl.", max_turns=10)
            await asyncio.wait_for(started.wait(), 30)
            handle = client.get_workflow_handle(run_id)
            # the read's result reached the run: it has a call to keep
            async with asyncio.timeout(30):
                while not any(
                    b"chunk 1: " in e.activity_task_completed_event_attributes.SerializeToString()
                    for e in (await handle.fetch_history()).events
                ):
                    await asyncio.sleep(0.05)
            state = await handle.query("state", result_type=dict)
            limit = state["history_bytes"] + 1_000_000
            monkeypatch.setattr(policies, "PAUSED_HISTORY_BYTES", limit)
            # junk signals while the crawl runs, 3 MB a second: each one in history. The
            # crawl hears of its stop with its next heartbeat's answer, seconds later
            for _ in range(100):
                try:
                    await handle.signal("decide_signal", "x" * 300_000)
                except RPCError:
                    break  # the run closed: Temporal refuses signals to it
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the run still runs after 100 signals of 300 kB")
            description = await handle.describe()
            outcome = await asyncio.wait_for(handle.result(), 60)
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    # closed by the run itself, short of the limit, not terminated by the server
    assert description.status == WorkflowExecutionStatus.COMPLETED
    info = description.raw_description.workflow_execution_info
    assert limit < info.history_size_bytes < limit + 20_000_000
    assert outcome["status"] == "failed" and "stopped mid-turn" in outcome["error"]
    assert "resume(run_id)" in outcome["error"]
    assert result.status == "completed" and result.final_output == "Read and crawled."
    answers = {e.call_id: e for e in result.events if e.type == "tool_result"}
    assert answers["call_read"].error is None and answers["call_read"].result
    assert "history" in (answers["call_crawl"].result or ""), answers["call_crawl"]
    assert answers["call_crawl_2"].result == "crawled a.example"
    # the chunk was read once
    assert len(ledger_lines(ledger)) == 1


async def _task_completed_after_the_signals(handle: Any, timeout: float = 20.0) -> None:
    """Wait until a workflow task completed after the run's last signal: it saw them all."""
    from temporalio.api.enums.v1 import EventType

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = (await handle.fetch_history()).events
        signalled = [
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        ]
        done = [
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ]
        if signalled and done and done[-1] > signalled[-1]:
            return
        assert asyncio.get_running_loop().time() < deadline, "no workflow task saw the signals"
        await asyncio.sleep(0.1)


async def test_a_run_flooded_with_signals_while_its_model_request_is_in_flight_keeps_the_answer(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its model request in flight, a run whose history nears Temporal's limits stops as a
    cancel would: the answer that comes is recorded, and resume goes on from it unasked."""
    ledger = str(tmp_path / "ledger")
    # the model answers once the run has stopped (a fixed delay raced the signals
    # on a loaded machine: the answer came first, and nothing was in flight)
    stopped = threading.Event()

    def answer_once_stopped(request: dict[str, Any]) -> Any:
        if stopped.is_set():
            return CallTool("read_chunk", {"n": 1}, id="call_read")
        return Hang(0.1, answer_once_stopped)

    script = [answer_once_stopped, Reply("Read.")]
    with ScriptedModelServer(script) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 100)])
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Read.", max_turns=10)
            await asyncio.to_thread(model.wait_for_requests, 1)
            handle = client.get_workflow_handle(run_id)
            state = await handle.query("state", result_type=dict)
            monkeypatch.setattr(
                policies, "PAUSED_HISTORY_BYTES", state["history_bytes"] + 1_000_000
            )
            for _ in range(6):  # 1.8 MB of junk, while the model thinks
                await handle.signal("decide_signal", "x" * 300_000)
            await _task_completed_after_the_signals(handle)
            stopped.set()
            outcome = await asyncio.wait_for(handle.result(), 60)
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert outcome["status"] == "failed" and "stopped mid-turn" in outcome["error"], outcome
    # the stop is seen in the task that took the signals, though the server's figures
    # for a task started as the one before completes leave them out (SIGNALS_SIZED)
    assert "model answer came after the stop" in outcome["error"], outcome
    assert result.status == "completed" and result.final_output == "Read."
    assert model.request_count == 2  # the kept answer was not asked for again
    assert len(ledger_lines(ledger)) == 1


async def test_a_run_its_models_answer_takes_past_the_stop_goes_on_from_that_answer(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model's answer itself takes the history past the stop: the turn's call is started
    and stopped in the workflow task the answer came in, its activity never scheduled, yet
    the answer and the call are recorded, and resume runs the call without asking the model
    again (`policies.PATCH_LOST_FOLD`, `_history_answers.unstarted_answer`)."""
    ledger = str(tmp_path / "ledger")
    call = {"name": "read_chunk", "arguments": json.dumps({"n": 1})}
    body = {  # 0.4 MB of thinking aloud beside the call (a run records a reply to 0.5 MB)
        "id": "chatcmpl-big",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "x" * 400_000,
                    "tool_calls": [{"id": "call_read", "type": "function", "function": call}],
                },
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }
    lowered = threading.Event()

    def answer_once_lowered(request: dict[str, Any]) -> Any:
        return Raw(body) if lowered.is_set() else Hang(0.1, answer_once_lowered)

    with ScriptedModelServer([answer_once_lowered, Reply("Read.")]) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 100)])
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Read.", max_turns=10)
            await asyncio.to_thread(model.wait_for_requests, 1)
            handle = client.get_workflow_handle(run_id)
            state = await handle.query("state", result_type=dict)
            monkeypatch.setattr(policies, "PAUSED_HISTORY_BYTES", state["history_bytes"] + 300_000)
            lowered.set()
            outcome = await asyncio.wait_for(handle.result(), 60)
            stopped = await TemporalStore(client).aload(run_id)
            monkeypatch.undo()  # the next segment carries that answer: its own stop is far
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert outcome["status"] == "failed" and "stopped mid-turn" in outcome["error"], outcome
    assert [e.type for e in stopped][-3:] == ["generation", "tool_call", "run_end"], [
        (e.type, e.error) for e in stopped
    ]
    assert result.status == "completed" and result.final_output == "Read."
    assert model.request_count == 2  # the recorded answer was not asked for again
    assert len(ledger_lines(ledger)) == 1


async def test_a_run_still_flooded_while_its_model_answer_is_awaited_closes_short_of_the_limit(
    client: Client,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stopped by its history while its model request is in flight, a run waits for the
    answer (ANSWER_GRACE) only short of the last line: signals going on meanwhile, it stops
    the request there and closes, saying the request was cut off, before the server's limit."""
    script = [Hang(20, CallTool("read_chunk", {"n": 1}, id="call_read")), Reply("Read.")]
    with ScriptedModelServer(script) as model:
        agent = coder(model, client, task_queue, tools=[])
        async with build_worker(client, [agent], task_queue=task_queue):
            run_id = await agent.astart("Read.", max_turns=10)
            await asyncio.to_thread(model.wait_for_requests, 1)
            handle = client.get_workflow_handle(run_id)
            state = await handle.query("state", result_type=dict)
            stop = state["history_bytes"] + 1_000_000
            last = state["history_bytes"] + 4_000_000
            monkeypatch.setattr(policies, "PAUSED_HISTORY_BYTES", stop)
            monkeypatch.setattr(policies, "LAST_HISTORY_BYTES", last, raising=False)
            for _ in range(100):  # 3 MB a second, on after the stop
                try:
                    await handle.signal("decide_signal", "x" * 300_000)
                except RPCError:
                    break  # the run closed: Temporal refuses signals to it
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the run still waits for its model's answer after 30 MB of signals")
            description = await handle.describe()
            outcome = await asyncio.wait_for(handle.result(), 60)
            result = await asyncio.wait_for(agent.aresume(run_id), 60)
    assert description.status == WorkflowExecutionStatus.COMPLETED
    info = description.raw_description.workflow_execution_info
    assert stop < info.history_size_bytes < last + 3_000_000
    assert outcome["status"] == "failed" and "stopped mid-turn" in outcome["error"], outcome
    assert "model request was cut off unanswered" in outcome["error"], outcome
    assert result.status == "completed" and result.final_output == "Read."


@pytest.mark.parametrize("waiting", ["beside_a_pause", "sync_tool"])
async def test_a_run_still_flooded_while_it_stops_closes_short_of_the_limit(
    waiting: str,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that stopped for its history still waits for the calls running: one beside the
    call whose wait for a person the flood stopped (an hour's crawl), or a sync tool a stop
    cannot end (CANCEL_GRACE). Past a last line short of Temporal's limits it waits no more:
    it asks them to stop, answers them as cut off (they may have run) and closes, before the
    flood that goes on takes it to the server's limit."""
    ledger = str(tmp_path / "ledger")
    started = threading.Event()
    release = threading.Event()
    crawls = 0

    @function_tool(name="crawl")
    async def crawl_async(site: str) -> str:
        """Crawl a site (takes an hour; a cancel stops it).

        Args:
            site: Which site.
        """
        nonlocal crawls
        crawls += 1
        started.set()
        await asyncio.sleep(3600)
        return f"crawled {site}"

    @function_tool(name="crawl")
    def crawl_sync(site: str) -> str:
        """Crawl a site (a thread a cancel cannot stop).

        Args:
            site: Which site.
        """
        nonlocal crawls
        crawls += 1
        started.set()
        release.wait(120)
        return f"crawled {site}"

    paying = waiting == "beside_a_pause"

    def respond(request: dict[str, Any]) -> Any:
        if not [m for m in request["messages"] if m["role"] == "tool"]:
            crawling = CallTool("crawl", {"site": "a.example"}, id="call_crawl")
            if not paying:
                return crawling
            return [CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay"), crawling]
        return Reply("Stopped.")

    tools = [transfer_tool(ledger), crawl_async] if paying else [crawl_sync]
    with ScriptedModelServer(respond) as model:
        agent = coder(model, client, task_queue, tools=tools)
        try:
            async with build_worker(client, [agent], task_queue=task_queue):
                run_id = await agent.astart("Crawl.", max_turns=10)
                assert await asyncio.to_thread(started.wait, 30)
                handle = client.get_workflow_handle(run_id)
                async with asyncio.timeout(30):  # the transfer waits for a person
                    while (
                        paying
                        and (await handle.query("state", result_type=dict))["status"]
                        != "awaiting_approval"
                    ):
                        await asyncio.sleep(0.05)
                state = await handle.query("state", result_type=dict)
                stop = state["history_bytes"] + 1_000_000
                last = state["history_bytes"] + 4_000_000
                monkeypatch.setattr(policies, "PAUSED_HISTORY_BYTES", stop)
                monkeypatch.setattr(policies, "LAST_HISTORY_BYTES", last, raising=False)
                # 3 MB a second, on after the stop: the crawl would be waited for
                for _ in range(100):
                    try:
                        await handle.signal("decide_signal", "x" * 300_000)
                    except RPCError:
                        break  # the run closed: Temporal refuses signals to it
                    await asyncio.sleep(0.1)
                else:
                    pytest.fail("the run still waits for its crawl after 30 MB of signals")
                description = await handle.describe()
                outcome = await asyncio.wait_for(handle.result(), 60)
                release.set()
                result = await asyncio.wait_for(agent.aresume(run_id), 60)
        finally:
            release.set()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    info = description.raw_description.workflow_execution_info
    assert stop < info.history_size_bytes < last + 3_000_000
    assert outcome["status"] == "failed", outcome
    stopped = "stopped while waiting" if paying else "stopped mid-turn"
    assert stopped in outcome["error"], outcome
    answers = {e.call_id: e for e in result.events if e.type == "tool_result"}
    if paying:
        assert answers["call_pay"].error == "run failed"
    crawled = answers["call_crawl"]
    assert crawled.error == "cut off" and "may or may not have run" in str(crawled.result)
    assert result.status == "completed" and result.final_output == "Stopped."
    assert crawls == 1 and ledger_lines(ledger) == []
