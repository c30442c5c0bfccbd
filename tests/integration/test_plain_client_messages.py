"""A plain client's chat messages whose calls are of no shape a run reads fail it at once.

Any Temporal client can start `AgentRun` with a message list the facade never
built. The run counts the calls of the conversation it opens with (a resumed
run's ids, so a model reusing one gets a key of its own), reading each
assistant message's `tool_calls`: a `tool_calls` that was no list (a number, a
boolean, an object) raised in the run's first workflow task, which Temporal
retries for ever (the run wedged until someone terminated it). So did an
`answer` (what resume carries: the model's reply a stopped segment had got)
whose call's function was no object or whose arguments were no JSON text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from agentor_temporal.testing import Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import failure_message

from helpers import scripted_agent, unwedged_history


def _with_calls(calls: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "user", "content": "and now?"},
    ]


#: A conversation's base as resume writes it (where the rest is in history)
BASE = {"position": 0, "count": 0, "digest": "0" * 64}

#: name -> (the assistant message's tool_calls, what the failure says of them)
CASES: dict[str, tuple[Any, str]] = {
    # these two wedged the run: 'int' / 'bool' object is not iterable
    "number": (5, "is a number"),
    "boolean": (True, "is a boolean"),
    # these reached the model, which no provider takes
    "object": ({"id": "call_1"}, "is an object"),
    "list_of_numbers": ([1, 2], "holds a number"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_plain_clients_messages_with_calls_of_no_shape_fail_the_run_at_once(
    case: str, client: Client, task_queue: str
) -> None:
    """The run fails in its first workflow task, naming the message; no model request."""
    calls, says = CASES[case]
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "input": _with_calls(calls)},
                id=f"plain-calls-{case}-{task_queue}",
                task_queue=task_queue,
            )
            await unwedged_history(client, handle.id, timeout=60.0)
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 30)
        assert model.request_count == 0
    message = failure_message(info.value)
    assert f'The input\'s message 1: its "tool_calls" {says}, not a list of calls' in message


async def test_a_plain_clients_conversation_tail_with_calls_of_no_shape_fails_the_run_at_once(
    client: Client, task_queue: str
) -> None:
    """A resumed conversation's tail (what continue-as-new and resume carry) is read alike."""
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "conversation": {"base": BASE, "tail": _with_calls(True)}},
                id=f"plain-tail-{task_queue}",
                task_queue=task_queue,
            )
            await unwedged_history(client, handle.id, timeout=60.0)
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 30)
        assert model.request_count == 0
    assert 'conversation tail\'s message 1: its "tool_calls" is a boolean' in failure_message(
        info.value
    )


async def test_the_facades_messages_with_calls_of_no_shape_end_the_run_clearly(
    client: Client, task_queue: str
) -> None:
    """The same messages given to `arun` end the run as failed, saying why."""
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(model, client, task_queue)
        result = await asyncio.wait_for(agent.arun(_with_calls(7)), 60)
        assert model.request_count == 0
    assert result.status == "failed"
    assert 'message 1: its "tool_calls" is a number, not a list of calls' in str(result.error)


#: name -> (the answer's call, what the failure says)
ANSWER_CALLS: dict[str, tuple[dict[str, Any], str]] = {
    # 'int' object has no attribute 'get'
    "function_number": ({"id": "c", "function": 5}, '"answer"."calls"[0]."function" must be'),
    # the JSON object must be str, bytes or bytearray, not dict
    "arguments_object": (
        {"id": "c", "type": "function", "function": {"name": "a", "arguments": {"city": "x"}}},
        '"answer"."calls"[0]."function"."arguments" must be JSON text',
    ),
}


@pytest.mark.parametrize("case", sorted(ANSWER_CALLS))
async def test_a_plain_clients_answer_with_a_call_of_no_shape_fails_the_run_at_once(
    case: str, client: Client, task_queue: str
) -> None:
    call, says = ANSWER_CALLS[case]
    with ScriptedModelServer([Reply("ok")]) as model:
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        async with build_worker(client, [agent], task_queue=task_queue):
            handle = await client.start_workflow(
                policies.WORKFLOW_TYPE,
                {"agent": agent.name, "input": "hi", "answer": {"text": None, "calls": [call]}},
                id=f"plain-answer-{case}-{task_queue}",
                task_queue=task_queue,
            )
            await unwedged_history(client, handle.id, timeout=60.0)
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 30)
        assert model.request_count == 0
    assert says in failure_message(info.value)
