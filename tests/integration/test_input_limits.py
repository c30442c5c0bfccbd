"""A plain client's input that the run cannot record fails the run at once, never wedges it.

Any Temporal client can start `AgentRun` with JSON the facade never checked.
Temporal accepting a start (under 2 MB) does not mean the run can record
what it asks for: its messages follow the agent's instructions in the
`run_start` journal step, a fork's copied events go into the same step, a
fork's parent names the ForkedFrom search attribute (2 KB at most), token
counts go into AgentTokens (64-bit), and an unknown agent's name was quoted
whole in the failure. Each of these made every workflow task fail, for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import failure_message

from helpers import pad, scripted_agent, unwedged_history

#: Agent instructions of 200 KB: the facade counts them, a plain client does not.
LONG_INSTRUCTIONS = "i" * 200_000

#: The first turn: a call returning 300 KB.
CALL_PAD = CallTool("pad", {"data": "x", "n": 300_000})


def _nested(depth: int) -> Any:
    """A JSON value `depth` lists deep."""
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


#: name -> (workflow input besides "agent", agent options, what the failure says)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # 1.95 MB of prompt after 200 KB of instructions: a 2.15 MB run_start
    "prompt": (
        {"input": "x" * 1_950_000},
        {"instructions": LONG_INSTRUCTIONS},
        "The input is too large: the run's first model request would be 2.15 MB",
    ),
    "messages": (
        {"input": [{"role": "user", "content": "y" * 1000} for _ in range(1900)]},
        {"instructions": LONG_INSTRUCTIONS},
        "The input is too large",
    ),
    # the copied events and the prompt go into one journal step
    "fork_events": (
        {
            "input": "x" * 900_000,
            "fork": {
                "run_id": "parent",
                "at": 0,
                "events": [{"type": "tool_result", "result": "r" * 1_000_000}],
            },
        },
        {"instructions": LONG_INSTRUCTIONS},
        "The input is too large",
    ),
    "fork_parent": (
        {"input": "hi", "fork": {"run_id": "p" * 5000, "at": 0}},
        {},
        '"fork"."run_id" is not a run id',
    ),
    "prior_usage": (
        {"input": "hi", "prior_usage": {"total_tokens": 10**20}},
        {},
        '"prior_usage".total_tokens is 100000000000000000000',
    ),
    # a stopped segment's answer, set by resume: counted into AgentTokens
    "answer_usage": (
        {"input": "hi", "answer": {"text": "hi", "usage": {"total_tokens": 10**20}}},
        {},
        '"answer.usage".total_tokens is 100000000000000000000',
    ),
    # read in the run's first task, which raised on it
    "prior_usage_text": (
        {"input": "hi", "prior_usage": {"total_tokens": "many"}},
        {},
        '"prior_usage" must be an object of token counts',
    ),
    # carried over continue-as-new with the turn's 300 KB result: over 2 MB
    "call_uses": (
        {"input": "hi", "call_uses": {f"call_{n:06}_{'z' * 20}": 1 for n in range(52_000)}},
        {},
        "The input is too large",
    ),
    # copied recursively by the run_start step: past Python's recursion limit
    "deep_messages": (
        {"input": [{"role": "user", "content": "hi", "extra": _nested(600)}]},
        {},
        "The input nests 602 levels deep, over the 100 a run takes",
    ),
    # event times no float holds, raised on as the run recorded the events
    "recovered_time": (
        {"input": "hi", "recovered": [{"type": "tool_result", "started_at": 10**400}]},
        {},
        "\"recovered\"[0] is not an event: field 'started_at' must be a time",
    ),
    "fork_time": (
        {
            "input": "hi",
            "fork": {"run_id": "parent", "at": 1, "events": [{"type": "x", "ended_at": 10**400}]},
            "event_offset": 1,
        },
        {},
        '"fork"."events"[0] is not an event: field \'ended_at\' must be a time',
    ),
    # quoted whole, twice in one task completion: over gRPC's 4 MB
    "agent_name": ({"input": "hi", "agent": "a" * 1_900_000}, {}, "Unknown agent 'aaaa"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_plain_client_input_the_run_cannot_record_fails_it_at_once(
    case: str, client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each input fails the run in its first workflow task, saying why; no model request."""
    inp, options, says = CASES[case]
    # a run that got past its first turn would continue as new at once
    monkeypatch.setenv("AGENTOR_HISTORY_BUDGET", "500000")
    with ScriptedModelServer([CALL_PAD, Reply("ok")]) as model:
        agent = scripted_agent(
            model, client, task_queue, embedded_worker=False, tools=[pad], **options
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, **inp},
                id=f"plain-{task_queue}",
                task_queue=task_queue,
            )
            await unwedged_history(client, handle.id)
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 10)
        assert model.request_count == 0
    message = failure_message(info.value)
    assert says in message
    assert len(message) < 2_000


@pytest.mark.parametrize("deadline", [math.inf, math.nan, 1e300])
async def test_a_carried_deadline_no_clock_holds_fails_the_run_at_once(
    deadline: float, client: Client, task_queue: str
) -> None:
    """A carry (continue-as-new's input) whose deadline is no time, in a run with an
    execution timeout: the run read it in its first task and raised, failing every task."""
    carry = {
        "turn": 1,
        "budget": 5,
        "started": time.time(),
        "deadline": deadline,
        "conversation": {
            "base": {"position": 0, "count": 1, "digest": "d"},
            "tail": [{"role": "user", "content": "hi"}],
        },
    }
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "input": "hi", "carry": carry},
                id=f"plain-{task_queue}",
                task_queue=task_queue,
                execution_timeout=timedelta(hours=1),
            )
            try:
                await unwedged_history(client, handle.id, 15)
            finally:
                with contextlib.suppress(RPCError):  # closed
                    await handle.terminate("test over")
            with pytest.raises(WorkflowFailureError) as info:
                await handle.result()
        assert model.request_count == 0
    says = f"deadline must be a time in seconds since the epoch, got {deadline!r}"
    assert f'"carry" is malformed: {says}' in failure_message(info.value)


async def test_a_plain_client_prompt_under_the_limit_still_runs(
    client: Client, task_queue: str
) -> None:
    """The control: 1.6 MB of prompt after the same instructions runs as before.

    (Over the facade's 1.5 MB for a new run's first request, under what one
    payload holds: a resumed conversation that grew past 1.5 MB still starts.)
    """
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(
            model, client, task_queue, embedded_worker=False, instructions=LONG_INSTRUCTIONS
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "input": "x" * 1_600_000},
                id=f"plain-{task_queue}",
                task_queue=task_queue,
            )
            await unwedged_history(client, handle.id)
            outcome = await asyncio.wait_for(handle.result(), 10)
    assert outcome["status"] == "completed" and outcome["final_output"] == "ok"


async def test_the_facade_refuses_messages_nested_too_deep(client: Client, task_queue: str) -> None:
    """A message list 600 levels deep is a ValueError saying so (was a raw RecursionError)."""
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(model, client, task_queue)
        deep = [{"role": "user", "content": "hi", "extra": _nested(600)}]
        with pytest.raises(ValueError, match="input nests 602 levels deep, over the 100"):
            await agent.arun(deep)
        # the control: a message list of ordinary shape runs
        shallow = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        assert (await agent.arun(shallow)).final_output == "ok"
        assert model.request_count == 1
