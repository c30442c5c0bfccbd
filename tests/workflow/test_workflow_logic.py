"""The workflow's own rules, in seconds: the time-skipping test server and stub activities.

The stubs are registered under the production activity names, so the real
`AgentRunWorkflow` runs unchanged; only the model, the tools and the agent's
spec are scripted. Hours of approval timeout pass instantly.
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agentor_temporal.plugin import with_passthrough
from agentor_temporal.store import Event, replay_messages
from agentor_temporal.workflows import AgentRunWorkflow, AgentSpec, ToolSpec, policies
from agentor_temporal.workflows.activity_types import (
    ApprovalCheckInput,
    CallToolInput,
    CallToolResult,
    DescribeAgentInput,
    GenerateInput,
    GenerateResult,
    JournalInput,
    JournalResult,
)
from agentor_temporal.workflows.approvals import NOT_RUN
from agentor_temporal.workflows.formatting import failure_message
from agentor_temporal.workflows.tool_calls import CALL_FAILED, STOPPED

from helpers import history_shows

PARAMS = {"type": "object", "properties": {"x": {"type": "string"}}, "required": []}


def tool(name: str, **options: Any) -> ToolSpec:
    return ToolSpec(name=name, description=f"The {name} tool.", parameters=PARAMS, **options)


def call(name: str, call_id: str, args: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


@dataclass
class Script:
    """One test's agent: its spec, the model's replies and the tools' answers."""

    spec: AgentSpec
    replies: list[GenerateResult]
    answer: Callable[[CallToolInput], CallToolResult | Awaitable[CallToolResult]] = lambda inp: (
        CallToolResult(result="ok")
    )
    #: every request the model received, in order
    requests: list[GenerateInput] = field(default_factory=list)
    tool_calls: list[CallToolInput] = field(default_factory=list)


class Stubs:
    """Activities under the production names, answering from the current `Script`."""

    def __init__(self) -> None:
        self.script: Script | None = None

    @activity.defn(name=policies.DESCRIBE_AGENT)
    async def describe_agent(self, inp: DescribeAgentInput) -> AgentSpec:
        assert self.script is not None
        return self.script.spec

    @activity.defn(name=policies.GENERATE)
    async def generate(self, inp: GenerateInput) -> GenerateResult:
        assert self.script is not None
        self.script.requests.append(inp)
        replies = self.script.replies
        return replies.pop(0) if len(replies) > 1 else replies[0]

    @activity.defn(name=policies.CALL_TOOL)
    async def call_tool(self, inp: CallToolInput) -> CallToolResult:
        assert self.script is not None
        self.script.tool_calls.append(inp)
        answer = self.script.answer(inp)
        return await answer if inspect.isawaitable(answer) else answer

    @activity.defn(name=policies.JOURNAL)
    async def journal(self, inp: JournalInput) -> JournalResult:
        offset = inp.new_from - inp.start
        return JournalResult(events=inp.events[offset:], start=inp.new_from, refs=inp.refs)

    @activity.defn(name=policies.NEEDS_APPROVAL)
    async def needs_approval(self, inp: ApprovalCheckInput) -> bool:
        return True


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def skipping() -> AsyncIterator[tuple[Client, Stubs, str]]:
    binary = shutil.which("temporal-test-server") or str(
        Path(sys.executable).parent / "temporal-test-server"
    )
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=binary)
    stubs = Stubs()
    queue = f"logic-{uuid.uuid4().hex[:8]}"
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[AgentRunWorkflow],
        activities=[
            stubs.describe_agent,
            stubs.generate,
            stubs.call_tool,
            stubs.journal,
            stubs.needs_approval,
        ],
        workflow_runner=with_passthrough(None),
    ):
        yield env.client, stubs, queue
    await env.shutdown()


async def run(
    skipping: tuple[Client, Stubs, str], script: Script, input: Any = "Go."
) -> tuple[dict[str, Any], list[Event]]:
    """Run the script's agent to its end: (workflow result, recorded events)."""
    client, stubs, queue = skipping
    stubs.script = script
    handle = await client.start_workflow(
        policies.WORKFLOW_TYPE,
        {"agent": script.spec.name, "input": input},
        id=uuid.uuid4().hex,
        task_queue=queue,
    )
    result: dict[str, Any] = await handle.result()
    events = await handle.query("events", 0)
    return result, [Event.from_dict(e) for e in events]


def spec(*tools: ToolSpec, **options: Any) -> AgentSpec:
    return AgentSpec(
        name="Logic", model="m", instructions="Be brief.", tools=list(tools), **options
    )


async def test_a_failing_tool_is_withdrawn_after_its_budget(
    skipping: tuple[Client, Stubs, str],
) -> None:
    """After max_tool_failures failures a tool's schema is withdrawn and the model told once."""
    script = Script(
        spec(tool("flaky"), tool("steady"), max_tool_failures=2),
        [
            GenerateResult(calls=[call("flaky", "c1")]),
            GenerateResult(calls=[call("flaky", "c2")]),
            GenerateResult(calls=[call("flaky", "c3")]),
            GenerateResult(text="Done."),
        ],
        answer=lambda inp: CallToolResult(result="Error: down", error="RuntimeError: down"),
    )
    result, events = await run(skipping, script)
    assert result["status"] == "completed"
    offered = [[t["function"]["name"] for t in r.tools or []] for r in script.requests]
    assert offered == [["flaky", "steady"], ["flaky", "steady"], ["steady"], ["steady"]]
    notices = [m for m in script.requests[2].messages if m["role"] == "user"]
    assert "'flaky' failed 2 times and is now unavailable" in notices[-1]["content"]
    # the withdrawn tool is refused without running
    assert len(script.tool_calls) == 2
    third = [e for e in events if e.type == "tool_result"][2]
    assert third.error == "tool disabled"


async def test_max_turns_ends_the_run_without_a_turn_on_run_end(
    skipping: tuple[Client, Stubs, str],
) -> None:
    """A model that never stops asking ends at max_turns, as Agentor writes it."""
    script = Script(
        spec(tool("steady"), max_turns=3), [GenerateResult(calls=[call("steady", "c")])]
    )
    result, events = await run(skipping, script)
    assert result["status"] == "max_turns"
    assert result["error"] == "Reached max_turns (3) without a final answer."
    assert len(script.requests) == 3
    assert events[-1].type == "run_end" and events[-1].turn is None


async def test_parallel_results_are_cut_to_fit_one_payload_together(
    skipping: tuple[Client, Stubs, str],
) -> None:
    """Many results that each fit but not together are shared out, small ones kept whole."""
    big = "x" * (policies.MAX_TOOL_RESULT_BYTES - 1000)
    calls = [call("steady", f"c{i}", f'{{"x": "{i}"}}') for i in range(6)]

    def answer(inp: CallToolInput) -> CallToolResult:
        return CallToolResult(result="small" if inp.args["x"] == "0" else big)

    script = Script(
        spec(tool("steady")), [GenerateResult(calls=calls), GenerateResult(text="ok")], answer
    )
    result, events = await run(skipping, script)
    assert result["status"] == "completed"
    results = [e for e in events if e.type == "tool_result"]
    assert results[0].result == "small"
    total = sum(len(e.result or "") for e in results)
    assert total <= policies.MAX_TURN_RESULT_BYTES
    assert all("truncated to fit" in (e.result or "") for e in results[1:])


async def test_an_oversized_request_fails_the_run_saying_why(
    skipping: tuple[Client, Stubs, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation past what a model endpoint takes ends the run with the reason."""
    monkeypatch.setattr(policies, "MAX_MODEL_REQUEST_BYTES", 200_000)
    prompt = "y" * 300_000
    script = Script(spec(), [GenerateResult(text="unreachable")])
    result, events = await run(skipping, script, prompt)
    assert result["status"] == "failed"
    assert "more than a model endpoint accepts in one request" in result["error"]
    assert script.requests == []


@pytest.mark.parametrize("mode", ["deny", "fail"])
async def test_an_approval_nobody_gives_expires_hours_later(
    skipping: tuple[Client, Stubs, str], mode: str
) -> None:
    """An approval timeout denies the call (the model is told) or fails the run, as configured."""
    gated = tool("pay", approval="always", approval_timeout=3 * 3600, on_approval_timeout=mode)
    script = Script(
        spec(gated), [GenerateResult(calls=[call("pay", "c1")]), GenerateResult(text="ok")]
    )
    result, events = await run(skipping, script)
    decision = next(e for e in events if e.type == "approval_decision")
    assert decision.status == "expired" and decision.text == "no decision within 10800 s"
    assert script.tool_calls == []
    if mode == "deny":
        assert result["status"] == "completed"
        answer = next(e for e in events if e.type == "tool_result")
        assert answer.error == "approval expired"
    else:
        assert result["status"] == "failed" and "expired" in result["error"]


async def test_a_half_finished_tool_batch_is_rewound(skipping: tuple[Client, Stubs, str]) -> None:
    """A run resumed after its tools half-answered asks the model again from the request."""
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."}]
    crashed = [
        Event(type="run_start", agent="Logic", model="m", messages=first),
        Event(
            type="generation",
            turn=1,
            messages=first,
            calls=[call("steady", "a"), call("steady", "b")],
        ),
        Event(type="tool_call", name="steady", call_id="a", turn=1),
        Event(type="tool_call", name="steady", call_id="b", turn=1),
        Event(type="tool_result", name="steady", call_id="a", result="ok", turn=1),
    ]
    script = Script(spec(tool("steady")), [GenerateResult(text="Done.")])
    result, _ = await run(skipping, script, replay_messages(crashed))
    assert result["status"] == "completed"
    assert script.requests[0].messages == first


async def test_input_no_client_should_send_fails_the_run_not_its_task(
    skipping: tuple[Client, Stubs, str],
) -> None:
    """Invalid input fails the workflow at once with the reason (Temporal would retry a task)."""
    client, stubs, queue = skipping
    stubs.script = Script(spec(), [GenerateResult(text="unreachable")])
    handle = await client.start_workflow(
        policies.WORKFLOW_TYPE,
        {"agent": "Logic", "input": []},
        id=uuid.uuid4().hex,
        task_queue=queue,
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert "empty message list" in failure_message(failure.value)


class FailingTurn:
    """Tools for a turn in which one call fails for a reason not the tool's (`CallFailed`).

    `fast` answers at once, `broken` fails as no tool does (non-retryable, as
    a worker built differently past DEFINITION_PATIENCE), and `slow` is still
    running then: it answers a second after (`stop=False`), or runs until it
    is cancelled.
    """

    def __init__(self, *, stop: bool) -> None:
        self.stop = stop
        self.failed = asyncio.Event()

    async def answer(self, inp: CallToolInput) -> CallToolResult:
        if inp.name == "broken":
            self.failed.set()
            raise ApplicationError("no worker built as the run", non_retryable=True)
        if inp.name == "slow":
            await self.failed.wait()
            while self.stop:  # until its run's cancel reaches it
                activity.heartbeat()
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # answers after the run has seen the failure
        return CallToolResult(result=f"{inp.name} done")


def failing_turn_spec(*extra: ToolSpec) -> AgentSpec:
    tools = [tool("fast"), tool("broken"), tool("slow"), *extra]
    return spec(*tools, behaviour=policies.FAILURE_KEEPS_CALLS)


async def test_a_call_failing_for_a_reason_not_the_tools_keeps_its_turns_results(
    skipping: tuple[Client, Stubs, str],
) -> None:
    """A call that fails the run (CallFailed) lets its turn settle first: a call running is
    waited for, one waiting for a person answered as not run, and every result recorded, so a
    resume goes on after them instead of running the finished calls again."""
    tools = FailingTurn(stop=False)
    calls = [call("fast", "a"), call("broken", "b"), call("slow", "c"), call("pay", "d")]
    script = Script(
        failing_turn_spec(tool("pay", approval="always")),
        [GenerateResult(calls=calls), GenerateResult(text="never asked")],
        tools.answer,
    )
    result, events = await run(skipping, script)
    assert result["status"] == "failed" and "could not run" in result["error"], result
    answers = {e.call_id: e.error for e in events if e.type == "tool_result"}
    assert answers == {"a": None, "b": CALL_FAILED, "c": None, "d": NOT_RUN}, answers
    assert events[-1].type == "run_end"
    # resume reads the turn as answered: no call of it runs again
    replayed = replay_messages(events)
    assert [m.get("tool_call_id") for m in replayed if m["role"] == "tool"] == list("abcd")


async def test_a_cancel_while_a_failed_calls_turn_settles_keeps_what_its_calls_did(
    skipping: tuple[Client, Stubs, str],
) -> None:
    """Cancelled while the calls beside one that failed the run (CallFailed) end: the finished
    call's result is kept, the failed call and the stopped one answered, so resume runs none
    of them again."""
    client, _, _ = skipping
    tools = FailingTurn(stop=True)
    calls = [call("fast", "a"), call("broken", "b"), call("slow", "c")]
    script = Script(
        failing_turn_spec(),
        [GenerateResult(calls=calls), GenerateResult(text="never")],
        tools.answer,
    )
    task = asyncio.ensure_future(run(skipping, script))
    try:
        await asyncio.wait_for(tools.failed.wait(), 30)

        async def all_started() -> None:
            while {c.call_id for c in script.tool_calls} != {"a", "b", "c"}:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(all_started(), 30)
        run_id = script.tool_calls[0].run_id
        # the cancel comes once the failure is in history (the run waits for `slow` then)
        await history_shows(client, run_id, EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED)
        handle = client.get_workflow_handle(run_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(task, 30)
        events = [Event.from_dict(e) for e in await handle.query("events", 0)]
    finally:
        task.cancel()
    answers = {e.call_id: e.error for e in events if e.type == "tool_result"}
    assert answers == {"a": None, "b": CALL_FAILED, "c": STOPPED}, answers
    replayed = replay_messages(events)
    assert [m.get("tool_call_id") for m in replayed if m["role"] == "tool"] == list("abc")
