"""Forks of long runs: a parent that continued as new, a fork that does, and encrypted runs.

A lowered history budget (`AGENTOR_HISTORY_BUDGET`, as in
`test_long_runs.py`) makes a run of a few dozen turns continue as new several
times. The fork must read such a parent's whole log across its executions,
send the parent's long conversation by reference (its base is a parent event
in the parent's history), and keep its own parent reference and `ForkedFrom`
when it continues as new itself.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentor_temporal import Event, FileStore, TemporalStore
from agentor_temporal._fork import fork_input, fork_point, start_fork
from agentor_temporal.activities.conversations import CACHE
from agentor_temporal.codec import EncryptionKeyError
from agentor_temporal.connection import connect
from agentor_temporal.store import replay_messages, total_usage
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows.segment import FORKED_FROM
from agentor_temporal.workflows.status import AGENT_STATUS, AGENT_TOKENS

from helpers import (
    chunk_reader,
    chunk_tool,
    coder,
    ledger_lines,
    scripted_agent,
    tool_results,
    wait_until,
    weather_agent,
)
from integration.test_fork import PARIS, PARIS_ANSWER, _listed
from private import SECRET_ANSWER, SECRET_PROMPT, history_json, keys_of, leaks, make_keys

#: Small enough that 24 turns of 2 KB results continue as new 3+ times (about every
#: five or six turns).
BUDGET = 60_000
MORE = "Read ten more."


def _dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


def _calls(ledger: str, run_id: str) -> Counter[str]:
    return Counter(line.split()[1] for line in ledger_lines(ledger) if line.split()[0] == run_id)


async def _attributes(client: Client, run_id: str) -> Any:
    return (await client.get_workflow_handle(run_id).describe()).typed_search_attributes


async def test_a_parent_that_continued_as_new_is_forked_whole(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fork holds every event of every execution; its conversation goes by reference."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    turns, ledger, runs = 24, str(tmp_path / "ledger"), tmp_path / "runs"
    with ScriptedModelServer(chunk_reader(turns, MORE)) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 2000)])
        async with build_worker(
            client, [agent], task_queue=task_queue, store=FileStore(runs), max_cached_workflows=0
        ):
            parent = await agent.arun("Read the repository.", max_turns=turns + 1)
            assert parent.run_id is not None
            parent_segments = await TemporalStore(client).segments(parent.run_id)
            assert len(parent_segments) >= 3  # it continued as new
            sent = len(model.requests)
            fork = await agent.afork(parent.run_id, MORE, max_turns=20)
            fork_request = model.requests[sent]["messages"]
    assert fork.status == "completed" and fork.final_output == f"Read {turns + 10} chunks."
    assert fork.run_id is not None
    n = len(parent.events)
    # the parent's whole log, across its executions, then the marker, then the fork's own
    assert _dicts(fork.events[:n]) == _dicts(parent.events)
    assert fork.events[n].type == "fork" and fork.events[n].forked_from == parent.run_id
    assert fork.events[n + 1].type == "run_start"
    # the model heard the parent's whole conversation, then the new message
    assert fork_request == [*parent.messages, {"role": "user", "content": MORE}]
    assert fork.messages == replay_messages(fork.events)
    # which did not travel whole: the fork's input names a parent event as its base
    first = (await TemporalStore(client).segments(fork.run_id))[0]
    assert first.input["input"] == [] and first.input["conversation"]["base"]["position"] < n
    assert first.fork is not None and first.fork.execution == parent_segments[-1].execution_run_id
    # one log everywhere: the result, the mirror, the projection
    projected = await TemporalStore(client).aload(fork.run_id)
    assert _dicts(fork.events) == _dicts(FileStore(runs).load(fork.run_id)) == _dicts(projected)
    # every tool ran once: the parent's forty, the fork's ten more
    assert set(_calls(ledger, parent.run_id).values()) == {1}
    assert sorted(_calls(ledger, fork.run_id)) == sorted(
        f"call_{k}" for k in range(turns + 1, turns + 11)
    )
    # usage and AgentTokens count the forked history plus the continuation
    assert fork.usage == total_usage(fork.events) == parent.usage + total_usage(fork.events[n:])
    attributes = await _attributes(client, fork.run_id)
    assert attributes.get(AGENT_STATUS) == "completed"
    assert attributes.get(AGENT_TOKENS) == fork.usage.total_tokens
    assert attributes.get(FORKED_FROM) == parent.run_id
    # the parent is untouched
    assert _dicts(await TemporalStore(client).aload(parent.run_id)) == _dicts(parent.events)


async def test_a_fork_that_continues_as_new_keeps_its_parent(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fork's later executions read as the parent's events plus its own; ForkedFrom stays."""
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", str(BUDGET))
    ledger, runs = str(tmp_path / "ledger"), tmp_path / "runs"
    with ScriptedModelServer(chunk_reader(2, MORE)) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 2000)])
        async with build_worker(
            client, [agent], task_queue=task_queue, store=FileStore(runs), max_cached_workflows=0
        ):
            parent = await agent.arun("Read the repository.")
            assert parent.run_id is not None
            # three times MORE: thirty more chunks, enough to continue as new 3+ times
            fork = await agent.afork(
                parent.run_id,
                [{"role": "user", "content": MORE} for _ in range(3)],
                max_turns=40,
            )
            assert fork.run_id is not None
            resumed = await agent.aresume(fork.run_id)
    assert fork.status == "completed" and fork.final_output == "Read 32 chunks."
    segments = await TemporalStore(client).segments(fork.run_id)
    assert len(segments) >= 3
    assert [s.status for s in segments[:-1]] == ["continued_as_new"] * (len(segments) - 1)
    # the first execution holds the parent reference; the log reads whole from any reader
    assert segments[0].fork is not None and segments[0].fork.run_id == parent.run_id
    n = len(parent.events)
    projected = await TemporalStore(client).aload(fork.run_id)
    assert _dicts(projected[:n]) == _dicts(parent.events)
    assert projected[n].type == "fork" and projected[n].forked_from == parent.run_id
    assert _dicts(projected) == _dicts(fork.events) == _dicts(FileStore(runs).load(fork.run_id))
    assert _dicts(resumed.events) == _dicts(fork.events)  # resume returns it as it is
    assert sorted(_calls(ledger, fork.run_id)) == sorted(f"call_{k}" for k in range(3, 33))
    # the last execution still has ForkedFrom, and tokens count the whole fork
    attributes = await _attributes(client, fork.run_id)
    assert attributes.get(FORKED_FROM) == parent.run_id
    assert attributes.get(AGENT_TOKENS) == fork.usage.total_tokens == 15 * (3 + 31)
    latest = segments[-1].execution_run_id

    def listed() -> bool:
        return fork.run_id in _listed(
            temporal_address, f"ForkedFrom='{parent.run_id}' AND RunId='{latest}'"
        )

    await asyncio.to_thread(wait_until, listed, "the fork's last execution by ForkedFrom", 60)


async def test_an_encrypted_run_is_forked_given_the_key(
    client: Client,
    temporal_address: str,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
    ledger: str,
) -> None:
    """The fork is encrypted like its parent; a client without the key is told which it needs."""
    keys = make_keys("F")
    runs = tmp_path / "runs"
    agent = scripted_agent(
        model,
        client,
        task_queue,
        store=FileStore(runs),
        ledger=ledger,
        encryption_keys=keys_of(keys["F"]),
    )
    parent = await agent.arun(SECRET_PROMPT)
    assert parent.run_id is not None and parent.final_output == SECRET_ANSWER

    fork = await agent.afork(parent.run_id, PARIS, fork_id=f"private-fork-{uuid.uuid4().hex}")

    assert fork.status == "completed" and fork.final_output == PARIS_ANSWER
    assert fork.run_id is not None
    assert _dicts(fork.events[: len(parent.events)]) == _dicts(parent.events)
    # the parent's conversation is in the fork's input: encrypted there too
    history = history_json(temporal_address, fork.run_id)
    assert "binary/encrypted" in " ".join(leaks(history, ["binary/encrypted"]))
    assert leaks(history) == []
    readable = await connect(client, encryption_keys=keys_of(keys["F"]))
    assert _dicts(await TemporalStore(readable).aload(fork.run_id)) == _dicts(fork.events)
    assert _dicts(FileStore(runs).load(fork.run_id)) == _dicts(fork.events)
    # without the key (a client connect() made, with no keys), forking names it, makes nothing
    keyless = weather_agent(
        base_url=model.base_url, task_queue=f"{task_queue}-keyless", temporal=temporal_address
    )
    with pytest.raises(EncryptionKeyError, match="key 'F'"):
        await keyless.afork(parent.run_id, PARIS, fork_id="never-made")
    assert FileStore(runs).load("never-made") == []


SUMMARISE = "Now summarise."


def reader(request: dict[str, Any]) -> Any:
    """The model: read one more chunk a turn, until asked to summarise."""
    messages = request.get("messages") or []
    done = tool_results(request)
    if messages and messages[-1].get("content") == SUMMARISE:
        return Reply(f"Read {done} chunks.")
    return CallTool("read_chunk", {"n": done + 1}, id=f"call_{done + 1}")


async def _within(step: Any, client: Client, run_id: str, what: str) -> Any:
    """`step`'s result, or a failure naming the wedged run (terminated) after a deadline."""
    try:
        return await asyncio.wait_for(step, 60)
    except asyncio.TimeoutError:
        handle = client.get_workflow_handle(run_id)
        await handle.terminate(reason=f"test deadline: {what} never finished")
        pytest.fail(f"{what} ({run_id}) did not finish within 60 s")


async def _sent_by_reference(client: Client, run_id: str) -> bool:
    """Whether the run's latest execution began with its conversation by reference."""
    latest = (await TemporalStore(client).segments(run_id))[-1].input
    return bool(latest["input"] == [] and latest.get("conversation"))


async def test_a_long_run_forks_and_resumes_on_a_worker_that_never_saw_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A request sent by reference is rebuilt from history alone: no store, nothing cached."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(reader) as model:
        first = coder(model, client, task_queue, tools=[chunk_tool(ledger, 4000)])
        async with build_worker(client, [first], task_queue=task_queue):
            # ten 4 KB results: past INLINE_CONVERSATION_BYTES, so requests go by reference
            parent = await first.arun("Read the repository.", max_turns=10)
        assert parent.status == "max_turns" and parent.run_id is not None
        # another agent's worker, with no store and an empty conversation cache
        other = f"{task_queue}-other"
        second = coder(model, client, other, tools=[chunk_tool(ledger, 4000)])
        async with build_worker(client, [second], task_queue=other):
            CACHE.clear()
            summary_id = f"{parent.run_id}-summary"
            summary = await _within(
                second.afork(parent.run_id, SUMMARISE, fork_id=summary_id),
                client,
                summary_id,
                "a fork with input of a long parent",
            )
            assert summary.status == "completed" and summary.final_output == "Read 10 chunks."
            assert model.requests[-1]["messages"] == [
                *parent.messages,
                {"role": "user", "content": SUMMARISE},
            ]
            CACHE.clear()
            more_id = f"{parent.run_id}-more"
            more = await _within(
                second.afork(parent.run_id, fork_id=more_id, max_turns=2),
                client,
                more_id,
                "a fork without input of a long parent that ended at max_turns",
            )
            assert more.status == "max_turns"
            assert _calls(ledger, more_id) == Counter({"call_11": 1, "call_12": 1})
            CACHE.clear()
            nested_id = f"{more_id}-summary"
            nested = await _within(
                second.afork(more_id, SUMMARISE, fork_id=nested_id),
                client,
                nested_id,
                "a fork of a fork",
            )
            assert nested.status == "completed" and nested.final_output == "Read 12 chunks."
            CACHE.clear()
            resumed = await _within(
                second.aresume(more_id, max_turns=1), client, more_id, "a resumed long fork"
            )
            assert resumed.status == "max_turns"
            CACHE.clear()
            again = await _within(
                second.aresume(parent.run_id, max_turns=1),
                client,
                parent.run_id,
                "a resumed long run",
            )
            assert again.status == "max_turns"
    # each began with the conversation by reference, which the other worker rebuilt
    for run_id in (summary_id, nested_id, more_id, parent.run_id):
        assert await _sent_by_reference(client, run_id), run_id
    # every tool ran once: the parent's ten and its resumed one, the fork's two and its resumed one
    assert _calls(ledger, parent.run_id) == Counter(f"call_{k}" for k in range(1, 12))
    assert _calls(ledger, more_id) == Counter(f"call_{k}" for k in range(11, 14))
    assert not _calls(ledger, summary_id) and not _calls(ledger, nested_id)


async def test_a_base_its_history_lacks_fails_the_run_instead_of_retrying(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A reference to messages history does not hold fails the request for good, saying so."""
    ledger = str(tmp_path / "ledger")
    with ScriptedModelServer(reader) as model:
        agent = coder(model, client, task_queue, tools=[chunk_tool(ledger, 4000)])
        async with build_worker(client, [agent], task_queue=task_queue):
            parent = await agent.arun("Read the repository.", max_turns=10)
            assert parent.run_id is not None
            point = await fork_point(client, parent.run_id, None, None)
            inp = fork_input(agent.name, point, SUMMARISE, None)
            # a hand-made input naming one message more than its base event has
            assert inp.conversation is not None
            inp.conversation["base"]["count"] += 1
            fork_id = f"{parent.run_id}-bad"
            CACHE.clear()
            await start_fork(client, agent.definition, task_queue, fork_id, inp, None, SUMMARISE)
            handle = client.get_workflow_handle(fork_id)
            outcome = await _within(handle.result(), client, fork_id, "a fork with a bad base")
    assert outcome["status"] == "failed"
    assert "ConversationBaseMissing" in outcome["error"]
    assert "cannot be rebuilt" in outcome["error"] and "retrying cannot change" in outcome["error"]
    assert len(model.requests) == 10  # the parent's: the fork never reached the model
