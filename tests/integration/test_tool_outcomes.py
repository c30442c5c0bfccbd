"""A tool's own outcome is final; only a lost or stopping worker runs a call again.

Real dev server, real workers. A tool that times out, raises, or raises an
exception that cannot even be printed answers the model once and runs once;
`retries=N` opts into N more runs. A worker that stops while a call is in
flight hands it back to Temporal (never recording the stop as the tool's
answer), and another worker runs it again with the same idempotency key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any

import pydantic
import pytest
from temporalio import activity
from temporalio.client import Client

from agentor_temporal import Agentor, TemporalStore, function_tool, tool_context
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, until

#: Characters of the `huge_failure` tool's message.
HUGE = 5_000_000
#: An integer of 5001 digits (past Python's 4300-digit int-to-text limit), and its text.
LONG = 10**5000 + 7
LONG_TEXT = "1" + "0" * 4999 + "7"


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no string for you")


class Unshowable:
    def __repr__(self) -> str:
        raise RuntimeError("no text for you")


class Handle:
    def __str__(self) -> str:
        return "handle #7"


class Opaque(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    handle: Handle
    count: int


def tools(ledger: str) -> list[Any]:
    @function_tool(timeout=1)
    def slow(seconds: float) -> str:
        """Sleeps.

        Args:
            seconds: how long.
        """
        ledger_write(ledger, "slow")
        time.sleep(seconds)
        return "slept"

    @function_tool(timeout=1)
    async def slow_async(seconds: float) -> str:
        """Sleeps on the loop.

        Args:
            seconds: how long.
        """
        ledger_write(ledger, "slow_async")
        await asyncio.sleep(seconds)
        return "slept"

    @function_tool
    async def beats_oddly() -> str:
        """Heartbeats with details no converter can encode."""
        ledger_write(ledger, "beats_oddly")
        activity.heartbeat(object())
        await asyncio.sleep(0.5)  # the beat is encoded (and failed the call) meanwhile
        return "beat"

    @function_tool
    def beats_oddly_in_thread() -> str:
        """Heartbeats from its thread with details no converter can encode."""
        ledger_write(ledger, "beats_oddly_in_thread")
        activity.heartbeat(object())
        time.sleep(0.5)
        return "beat"

    @function_tool(retries=1)
    async def beats_with_progress() -> str:
        """Fails once; its retry beats with details of its own, then works a while."""
        if tool_context().attempt == 1:
            raise ConnectionError("backend down")
        activity.heartbeat({"progress": 50})
        ledger_write(ledger, "beats_with_progress", f"beat={time.time()}")
        await asyncio.sleep(3)
        return "done"

    @function_tool
    def unprintable() -> str:
        """Raises what cannot be printed."""
        ledger_write(ledger, "unprintable")
        raise Unprintable()

    @function_tool(retries=3)
    def flaky() -> str:
        """Fails every time, asking for three retries (each retry records its start and end)."""
        ledger_write(ledger, "flaky")
        raise ConnectionError("backend down")

    @function_tool
    async def long_job(seconds: float) -> str:
        """A long job.

        Args:
            seconds: how long.
        """
        ledger_write(ledger, "long_job", f"attempt={tool_context().attempt}")
        await asyncio.sleep(seconds)
        return "finished"

    @function_tool
    async def exits() -> str:
        """Asks the interpreter to exit (on the worker's event loop)."""
        ledger_write(ledger, "exits")
        raise SystemExit(3)

    @function_tool
    async def interrupts() -> str:
        """Raises a keyboard interrupt (on the worker's event loop)."""
        ledger_write(ledger, "interrupts")
        raise KeyboardInterrupt

    @function_tool
    def deep() -> list[Any]:
        """Answers with a list nested far deeper than JSON encoders recurse."""
        ledger_write(ledger, "deep")
        value: list[Any] = []
        for _ in range(5000):
            value = [value]
        return value

    @function_tool
    def huge_failure() -> str:
        """Fails with a 5 MB message, its end telling what went wrong."""
        ledger_write(ledger, "huge_failure")
        raise ValueError("x" * HUGE + " the end that says why")

    @function_tool
    def long_number() -> int:
        """Answers with an integer past Python's int-to-text limit (4300 digits)."""
        ledger_write(ledger, "long_number")
        return LONG

    @function_tool
    def long_numbers() -> dict[Any, Any]:
        """Answers with such integers inside a structure, as a value and as a key."""
        ledger_write(ledger, "long_numbers")
        return {"n": [LONG, 2], LONG: "key"}

    @function_tool
    def unshowable() -> list[Any]:
        """Answers with a value whose own str() raises, beside one that can be shown."""
        ledger_write(ledger, "unshowable")
        return [Unshowable(), "done"]

    @function_tool
    def odd_model() -> Opaque:
        """Answers with a pydantic model holding a type pydantic cannot write as JSON."""
        ledger_write(ledger, "odd_model")
        return Opaque(handle=Handle(), count=3)

    listed = [slow, slow_async, unprintable, flaky, long_job, exits, interrupts, deep]
    return [
        *listed,
        *(beats_oddly, beats_oddly_in_thread, beats_with_progress, huge_failure),
        *(long_number, long_numbers, unshowable, odd_model),
    ]


def agent(model: ScriptedModelServer, queue: str, client: Client, ledger: str) -> Agentor:
    return Agentor(
        name="Outcomes",
        model="m",
        tools=tools(ledger),
        base_url=model.base_url,
        api_key="k",
        temporal=client,
        task_queue=queue,
        embedded_worker=False,
        max_tool_failures=10,
    )


@pytest.mark.parametrize(
    "call, error, runs",
    [
        (
            CallTool("slow", {"seconds": 4}),
            # a thread cannot be stopped: the model is told it may still be running
            "slow timed out after 1 s; its thread is still running and was abandoned "
            "(it may still have effects; its result will be discarded)",
            1,
        ),
        (CallTool("slow_async", {"seconds": 4}), "slow_async timed out after 1 s", 1),
        (CallTool("unprintable"), "Unprintable: Unprintable()", 1),
        (CallTool("flaky"), "ConnectionError: backend down", 4),
        # asyncio re-raises these out of the event loop when a task ends with them
        (CallTool("exits"), "SystemExit: 3", 1),
        (CallTool("interrupts"), "KeyboardInterrupt", 1),
    ],
    ids=["sync-timeout", "async-timeout", "unprintable", "retries=3", "exit", "interrupt"],
)
async def test_a_tools_own_outcome_answers_the_model_and_is_not_rerun(
    call: CallTool,
    error: str,
    runs: int,
    client: Client,
    task_queue: str,
    ledger: str,
) -> None:
    with ScriptedModelServer([call, Reply("Understood.")]) as model:
        outcomes = agent(model, task_queue, client, ledger)
        async with build_worker(client, [outcomes], task_queue=task_queue):
            started = time.monotonic()
            result = await asyncio.wait_for(outcomes.arun("go"), 60)
            took = time.monotonic() - started
        answered = model.requests[1]["messages"][-1]
    assert result.status == "completed" and result.final_output == "Understood."
    [tool_result] = [e for e in result.events if e.type == "tool_result"]
    assert tool_result.error == error and answered["content"] == f"Error: {error}"
    assert len(ledger_lines(ledger)) == runs
    if runs == 1:
        assert took < 15  # the timeout answered at once, not after retries


async def test_deep_arguments_and_answers_are_answers_not_failed_tasks(
    client: Client, task_queue: str, ledger: str
) -> None:
    """Nesting past Python's recursion limit: the model is told, the run goes on."""
    deep_args = '{"seconds": ' + "[" * 3000 + "]" * 3000 + "}"
    script = [CallTool("slow", deep_args), CallTool("deep"), Reply("Understood.")]
    with ScriptedModelServer(script) as model:
        outcomes = agent(model, task_queue, client, ledger)
        async with build_worker(client, [outcomes], task_queue=task_queue):
            result = await asyncio.wait_for(outcomes.arun("go"), 60)
    assert result.status == "completed" and result.final_output == "Understood."
    invalid, answered = [e for e in result.events if e.type == "tool_result"]
    assert (invalid.error or "").startswith("Invalid JSON arguments")
    assert answered.error is None and answered.result.startswith("<a list nested too deeply")
    # the call with invalid arguments never ran
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["deep"]
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    assert not [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]


async def test_an_answer_hard_to_write_is_written_not_an_error(
    client: Client, task_queue: str, ledger: str
) -> None:
    """The tool did its work: the model reads what it returned, not an error inviting a new
    call. An integer past Python's 4300-digit int-to-text limit (alone, or in a structure
    as value and key), a value whose str() raises, a pydantic model holding a type it cannot
    write: each was answered "Error: ..." (ValueError, RuntimeError, PydanticSerializationError).
    """
    names = ["long_number", "long_numbers", "unshowable", "odd_model"]
    script = [*(CallTool(name) for name in names), Reply("Understood.")]
    with ScriptedModelServer(script) as model:
        outcomes = agent(model, task_queue, client, ledger)
        async with build_worker(client, [outcomes], task_queue=task_queue):
            result = await asyncio.wait_for(outcomes.arun("go"), 60)
        answers = [model.requests[i]["messages"][-1]["content"] for i in range(1, 5)]
    assert result.status == "completed" and result.final_output == "Understood."
    results = [e for e in result.events if e.type == "tool_result"]
    assert [e.error for e in results] == [None] * 4
    assert (
        [e.result for e in results]
        == answers
        == [
            LONG_TEXT,
            f'{{"n": [{LONG_TEXT}, 2], "{LONG_TEXT}": "key"}}',
            '["<a Unshowable that cannot be shown as text>", "done"]',
            '{"handle": "handle #7", "count": 3}',
        ]
    )
    assert [line.split()[0] for line in ledger_lines(ledger)] == names


async def test_a_stopping_worker_hands_its_call_back(
    client: Client, temporal_address: str, task_queue: str, ledger: str
) -> None:
    """Worker stops mid-call: the call is not answered with the stop; another worker reruns it."""
    with ScriptedModelServer([CallTool("long_job", {"seconds": 3}), Reply("All done.")]) as model:
        outcomes = agent(model, task_queue, client, ledger)
        # its own client: the SDK allows one worker per client and queue
        first_client = await Client.connect(temporal_address)
        first = build_worker(
            first_client,
            [outcomes],
            task_queue=task_queue,
            graceful_shutdown_timeout=timedelta(milliseconds=200),
        )
        run = asyncio.ensure_future(first.run())
        pending = asyncio.ensure_future(outcomes.arun("go"))
        await until(lambda: ledger_lines(ledger), "the call to start", 30)
        await first.shutdown()
        await run
        async with build_worker(client, [outcomes], task_queue=task_queue):
            result = await asyncio.wait_for(pending, 60)
    assert result.status == "completed" and result.final_output == "All done."
    [tool_result] = [e for e in result.events if e.type == "tool_result"]
    assert tool_result.error is None and tool_result.result == "finished"
    starts = [line.split() for line in ledger_lines(ledger)]
    key = f"{result.run_id}:{tool_result.call_id}"
    assert [s[1] for s in starts] == [key, key]
    assert [s[3] for s in starts] == ["attempt=1", "attempt=2"]
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    assert "WorkerStopping" in history.to_json()
    assert len(await TemporalStore(client).aload(result.run_id)) == 7


@pytest.mark.parametrize("name", ["beats_oddly", "beats_oddly_in_thread"])
async def test_a_tools_heartbeat_with_odd_details_does_not_fail_or_rerun_its_call(
    name: str, client: Client, task_queue: str, ledger: str
) -> None:
    """A tool's own heartbeat, whatever its details, neither fails its call nor runs it again."""
    with ScriptedModelServer([CallTool(name), Reply("Understood.")]) as model:
        outcomes = agent(model, task_queue, client, ledger)
        async with build_worker(client, [outcomes], task_queue=task_queue):
            result = await asyncio.wait_for(outcomes.arun("go"), 30)
    assert result.status == "completed" and result.final_output == "Understood."
    [tool_result] = [e for e in result.events if e.type == "tool_result"]
    assert tool_result.error is None and tool_result.result == "beat"
    assert len(ledger_lines(ledger)) == 1  # ran once


async def test_a_tools_own_heartbeat_keeps_the_calls_start_count(
    client: Client, task_queue: str, ledger: str
) -> None:
    """A tool's heartbeat carries the start count `_starts` keeps in the call's details."""
    with ScriptedModelServer([CallTool("beats_with_progress"), Reply("Understood.")]) as model:
        outcomes = agent(model, task_queue, client, ledger)
        async with build_worker(client, [outcomes], task_queue=task_queue):
            run = asyncio.create_task(outcomes.arun("go"))
            [line] = await until(lambda: ledger_lines(ledger), "the retry's own heartbeat", 30)
            beat = float(line.rsplit("beat=", 1)[1])
            run_id = line.split()[1].split(":")[0]

            async def details_after_the_beat() -> bytes | None:
                desc = await client.get_workflow_handle(run_id).describe()
                for act in desc.raw_description.pending_activities:
                    if act.last_heartbeat_time.ToNanoseconds() / 1e9 >= beat - 0.01:
                        return b"".join(p.data for p in act.heartbeat_details.payloads)
                return None

            deadline = time.monotonic() + 2.5
            details = None
            while details is None and time.monotonic() < deadline:
                details = await details_after_the_beat()
                await asyncio.sleep(0.05)
            result = await asyncio.wait_for(run, 30)
    assert details is not None, "the tool's heartbeat never reached the server"
    assert b"agentor_lost_starts" in details and b"progress" not in details, details
    assert result.status == "completed" and result.final_output == "Understood."


async def test_a_huge_tool_failure_is_logged_by_its_head_tail_and_size(
    client: Client, task_queue: str, ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool's 5 MB failure message is logged by its start, its end and its size, never whole;
    the model is told its start, as before."""
    caplog.set_level(logging.WARNING, logger="agentor_temporal")
    with ScriptedModelServer([CallTool("huge_failure"), Reply("Understood.")]) as model:
        outcomes = agent(model, task_queue, client, ledger)
        async with build_worker(client, [outcomes], task_queue=task_queue):
            result = await asyncio.wait_for(outcomes.arun("go"), 60)
        answered = model.requests[1]["messages"][-1]["content"]
    assert result.status == "completed"
    [logged] = [r.getMessage() for r in caplog.records if "huge_failure() failed" in r.getMessage()]
    assert len(logged) < 4_000
    total = len("ValueError: ") + HUGE + len(" the end that says why")
    assert f"of {total} characters cut" in logged and logged.endswith("the end that says why")
    assert answered.startswith("Error: ValueError: xxx") and len(answered) < 4_100
