"""Odd tool outcomes, model replies and prompts never poison a run.

Real dev server, embedded worker. Whatever a tool returns or raises answers
the model; a reply or prompt out of the ordinary ends the run with a clear
status; and nothing fails a workflow task, which Temporal would retry for
ever (the run wedged until someone terminates it). Each case's run ends
within DEADLINE or the test fails naming the workflow-task failures.

Covered elsewhere: deep returns and arguments, async SystemExit and
KeyboardInterrupt, unprintable exceptions (test_tool_outcomes); lone
surrogates in results, empty choices, non-JSON bodies, calls without a
function (test_model_boundary); results and replies past 2 MB
(test_payload_limits); reused call ids (test_call_ids); hung sync tools
(test_hung_sync_tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import uuid
from dataclasses import replace
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import Event, RunResult, function_tool
from agentor_temporal.activities import Tool, _redact
from agentor_temporal.testing import CallTool, Raw, Reply, ScriptedModelServer, Step
from agentor_temporal.workflows.types import ToolSpec

from helpers import scripted_agent

DEADLINE = 45.0


async def _task_failures(client: Client, run_id: str) -> list[str]:
    """Messages of the run's WorkflowTaskFailed events (a wedged run has some)."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def _run(
    client: Client, task_queue: str, tools: list[Any], script: list[Step], prompt: Any = "go"
) -> tuple[RunResult, ScriptedModelServer]:
    """Run once; fail at the first workflow-task failure, or if the run does not end in time."""
    run_id = uuid.uuid4().hex
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=tools, max_tool_failures=50)
        task = asyncio.ensure_future(agent.arun(prompt, run_id=run_id))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        failures: list[str] = []
        while not task.done() and loop.time() < deadline:
            await asyncio.wait({task}, timeout=0.5)
            if not task.done():
                with contextlib.suppress(Exception):  # not started yet
                    failures = await _task_failures(client, run_id)
                if failures:
                    break
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(run_id).terminate("test: wedged")
            raise AssertionError(f"run did not end; WorkflowTaskFailed: {failures[:2]}")
        result = task.result()
    assert await _task_failures(client, run_id) == []
    return result, model


def _answers(result: RunResult) -> dict[str, Event]:
    return {e.name or "": e for e in result.events if e.type == "tool_result"}


class Opaque:
    """Not JSON-serializable, and its str() raises."""

    def __str__(self) -> str:
        raise RuntimeError("cannot print")

    __repr__ = __str__


class CustomBase(BaseException):
    """A BaseException that is not an Exception."""


class UnprintableBase(BaseException):
    def __str__(self) -> str:
        raise RuntimeError("no string")


def _describing_raises(what: Any) -> Any:
    """An exception whose `__str__` and `__repr__` raise `what()` (a BaseException)."""

    class Indescribable(Exception):
        def __str__(self) -> str:
            raise what()

        __repr__ = __str__

    return Indescribable


class TrickyText(str):
    """A str whose truth value and methods raise: what a tricky `__str__` may return."""

    def __bool__(self) -> bool:
        raise ValueError("no truth")

    def __str__(self) -> str:
        raise SystemExit(4)


class TrickyMessage(Exception):
    def __str__(self) -> str:
        return TrickyText("tricky")


class NoItems(dict):  # type: ignore[type-arg]
    """A mapping whose own code raises as JSON writes it (str() shows it as a dict)."""

    def items(self) -> Any:
        raise RuntimeError("no items")

    def __iter__(self) -> Any:
        raise RuntimeError("no iteration")


def _unshowable(what: Any) -> Any:
    """A value whose `__str__` and `__repr__` raise `what()` (a BaseException)."""

    class Unshowable:
        def __str__(self) -> str:
            raise what()

        __repr__ = __str__

    return Unshowable


def _circular() -> Any:
    value: list[Any] = []
    value.append(value)
    return value


def _tool(name: str, body: Any, *, is_async: bool) -> Any:
    """A tool named `name` whose body is `body()` (returned or raised from), sync or async."""
    if is_async:

        async def odd_async() -> Any:
            """Returns or raises something odd."""
            return body()

        odd_async.__name__ = name
        return function_tool(odd_async)

    def odd() -> Any:
        """Returns or raises something odd."""
        return body()

    odd.__name__ = name
    return function_tool(odd)


def _raiser(make: Any) -> Any:
    def go() -> Any:
        raise make()

    return go


UNSHOWABLE = "<a Unshowable that cannot be shown as text>"

#: returns and the text the model reads for each (None: any text, no error)
RETURNS: dict[str, tuple[Any, str | None]] = {
    "object": (object, None),
    # what JSON cannot hold is its str(), as Agentor writes it (not a JSON string of it)
    "bytes": (lambda: b"\x00\xff raw bytes", "b'\\x00\\xff raw bytes'"),
    "nan_inf": (lambda: {"a": math.nan, "b": math.inf}, '{"a": NaN, "b": Infinity}'),
    "circular": (_circular, "[[...]]"),
    "set": (lambda: {1, 2, 3}, "{1, 2, 3}"),
    "str_subclass": (lambda: TrickyText("tricky"), "tricky"),
    # reported as 'Error: RuntimeError: no items' though the tool had run
    "raising_items": (lambda: {"k": NoItems(a=1)}, "{'k': {'a': 1}}"),
    # the model was told 'Error: SystemExit: 2' (and so on) though the tool had run
    "str_exits": (_unshowable(lambda: SystemExit(2)), UNSHOWABLE),
    "str_interrupts": (_unshowable(KeyboardInterrupt), UNSHOWABLE),
    "str_cancels": (_unshowable(asyncio.CancelledError), UNSHOWABLE),
    "str_generator_exit": (lambda: [_unshowable(GeneratorExit)()], f'["{UNSHOWABLE}"]'),
}


async def test_odd_return_values_answer_the_model(client: Client, task_queue: str) -> None:
    """Values JSON cannot encode (sync and async tools) are shown to the model as text."""
    tools = [
        _tool(f"{kind}_{mode}", make, is_async=mode == "async")
        for kind, (make, _) in RETURNS.items()
        for mode in ("sync", "async")
    ]
    tools.append(_tool("opaque", Opaque, is_async=False))
    calls: list[Step] = [[CallTool(t.name) for t in tools], Reply("done")]
    result, _ = await _run(client, task_queue, tools, calls)
    assert result.status == "completed" and result.final_output == "done", result.error
    answers = _answers(result)
    for kind, (_, text) in RETURNS.items():
        for mode in ("sync", "async"):
            answer = answers[f"{kind}_{mode}"]
            assert answer.error is None, (kind, mode, answer.error)
            assert answer.result == text if text is not None else answer.result, (kind, answer)
    # a value that cannot even be printed is named as such: the tool ran (an error
    # would invite the model to call it again), and the task did not fail
    opaque = answers["opaque"]
    assert opaque.error is None and opaque.result is not None, opaque
    assert "<a Opaque that cannot be shown as text>" in opaque.result, opaque


RAISES: dict[str, tuple[Any, str]] = {
    "system_exit": (lambda: SystemExit(3), "SystemExit: 3"),
    "keyboard_interrupt": (KeyboardInterrupt, "KeyboardInterrupt"),
    "custom_base": (lambda: CustomBase("custom"), "CustomBase: custom"),
    "unprintable_base": (UnprintableBase, "UnprintableBase"),
    "generator_exit": (GeneratorExit, "GeneratorExit"),
    "recursion_error": (lambda: RecursionError("deep"), "RecursionError: deep"),
    "memory_error": (MemoryError, "MemoryError"),
    # describing them raised: the attempt failed and ran again, or the worker died
    "str_cancels": (_describing_raises(asyncio.CancelledError), "Indescribable: <unprintable"),
    "str_exits": (_describing_raises(lambda: SystemExit(2)), "Indescribable: <unprintable"),
    "str_generator_exit": (_describing_raises(GeneratorExit), "Indescribable: <unprintable"),
    "str_interrupts": (_describing_raises(KeyboardInterrupt), "Indescribable: <unprintable"),
    "str_subclass": (TrickyMessage, "TrickyMessage: tricky"),
    # asyncio cannot carry it into a Future: a sync tool's call waited out its timeout
    "stop_iteration": (lambda: StopIteration("empty"), "RuntimeError: "),
}


async def test_odd_exceptions_answer_the_model(client: Client, task_queue: str) -> None:
    """BaseExceptions a tool raises (sync and async) are its answer, the run goes on."""
    tools = [
        _tool(f"{kind}_{mode}", _raiser(make), is_async=mode == "async")
        for kind, (make, _) in RAISES.items()
        for mode in ("sync", "async")
    ]
    result, model = await _run(
        client, task_queue, tools, [[CallTool(t.name) for t in tools], Reply("done")]
    )
    assert result.status == "completed" and result.final_output == "done", result.error
    answers = _answers(result)
    for kind, (_, error) in RAISES.items():
        for mode in ("sync", "async"):
            answer = answers[f"{kind}_{mode}"]
            assert answer.error is not None and answer.error.startswith(error), (kind, mode, answer)
    assert "raised StopIteration: empty" in str(answers["stop_iteration_sync"].error)
    assert model.request_count == 2


@function_tool
def echo(text: str) -> str:
    """Echoes.

    Args:
        text: what to echo.
    """
    return text


def _completion(message: dict[str, Any], finish_reason: str) -> Raw:
    return Raw(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": finish_reason, "message": message}],
        }
    )


async def test_odd_tool_calls_answer_the_model(client: Client, task_queue: str) -> None:
    """Calls with null, NaN, huge-number or lone-surrogate arguments: each answered."""
    null_args = _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c_null",
                    "type": "function",
                    "function": {"name": "echo", "arguments": None},
                }
            ],
        },
        "tool_calls",
    )
    script: list[Step] = [
        [
            CallTool("echo", '{"text": NaN}', id="c_nan"),
            CallTool("echo", '{"text": ' + "9" * 5000 + "}", id="c_huge"),
            CallTool("echo", '{"text": "\\ud800"}', id="c_surrogate"),
        ],
        null_args,
        # a final reply with neither text nor calls
        _completion({"role": "assistant", "content": None}, "stop"),
    ]
    result, model = await _run(client, task_queue, [echo], script)
    assert result.status == "completed", result.error
    answers = {e.call_id: e for e in result.events if e.type == "tool_result"}
    assert sorted(answers) == ["c_huge", "c_nan", "c_null", "c_surrogate"]
    assert (answers["c_null"].error or "").endswith("text: Field required")
    assert (answers["c_nan"].error or "").startswith("Invalid JSON arguments")  # NaN is not JSON
    assert (answers["c_huge"].error or "").startswith("Invalid JSON arguments: Exceeds the limit")
    assert answers["c_surrogate"].error is None and answers["c_surrogate"].result == "\ufffd"
    assert model.request_count == 3


#: prompts a model would likely refuse; the run must not wedge on them
PROMPTS: dict[str, Any] = {
    "unknown-role": [{"role": "wizard", "content": "hi"}],
    "content-dict": [{"role": "user", "content": {"weird": 1}}],
    "content-none": [{"role": "user", "content": None}],
    "tool-without-call": [{"role": "tool", "content": "x", "tool_call_id": "nope"}],
    "lone-surrogate": "bad \ud800 prompt",
}


@pytest.mark.parametrize("kind", list(PROMPTS))
async def test_odd_prompts_reach_the_model_without_wedging_the_run(
    kind: str, client: Client, task_queue: str
) -> None:
    """Messages a model may refuse are the model's to refuse; a lone surrogate is replaced."""
    prompt = PROMPTS[kind]
    result, model = await _run(client, task_queue, [echo], [Reply("done")], prompt=prompt)
    assert result.status == "completed" and result.final_output == "done", result.error
    [request] = model.requests
    surrogate = kind == "lone-surrogate"
    sent = {"role": "user", "content": "bad \ufffd prompt"} if surrogate else prompt[-1]
    assert request["messages"][-1] == sent


async def test_max_turns_zero_or_negative_is_refused_at_once(
    client: Client, task_queue: str
) -> None:
    with ScriptedModelServer([Reply("done")]) as model:
        agent = scripted_agent(model, client, task_queue)
        for bad in (0, -1, True, "3"):
            with pytest.raises(ValueError, match="max_turns must be a positive integer"):
                await agent.arun("go", max_turns=bad)
            with pytest.raises(ValueError, match="max_turns must be a positive integer"):
                await agent.astart("go", max_turns=bad)
            with pytest.raises(ValueError, match="max_turns must be a positive integer"):
                async for _ in agent.stream_chat("go", max_turns=bad):
                    pass
            with pytest.raises(ValueError, match="max_turns must be a positive integer"):
                await agent.aresume("any-run", max_turns=bad)
        assert model.request_count == 0


def _contains_itself() -> list[Any]:
    content: list[Any] = ["text"]
    content.append(content)
    return content


#: message lists no run can send, and what the refusal says
NOT_JSON: dict[str, tuple[Any, str]] = {
    # measuring its depth never ended: run() hung, growing without bound
    "contains-itself": (
        [{"role": "user", "content": _contains_itself()}],
        "input cannot be sent as JSON: a list in it contains itself",
    ),
    "object": ([{"role": "user", "content": object()}], "Object of type object is not JSON"),
    "set": ([{"role": "user", "content": "x", "tags": {1, 2}}], "Object of type set is not"),
    "int-key": ([{"role": "user", "content": "x", 5: 1}], "dicts with text keys"),
}


@pytest.mark.parametrize("kind", list(NOT_JSON))
async def test_input_that_is_not_json_is_refused_at_once(
    kind: str, client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Messages JSON cannot carry are a ValueError naming the message, before anything starts."""
    # with a key known, masking walks the input too: it must come after the check
    # (a list that contains itself recursed without end on a fork)
    monkeypatch.setattr(_redact, "_known", {"sk-poison-test-known-key"})
    messages, fragment = NOT_JSON[kind]
    with ScriptedModelServer([Reply("done")]) as model:
        agent = scripted_agent(model, client, task_queue)
        for start in (
            lambda: agent.arun(messages),
            lambda: agent.astart(messages),
            lambda: agent.afork("any-run", messages),
        ):
            with pytest.raises(ValueError, match="cannot be sent as JSON") as info:
                await asyncio.wait_for(start(), 10)
            assert fragment in str(info.value)
        with pytest.raises(ValueError, match="cannot be sent as JSON"):
            async for _ in agent.stream_chat(messages):
                pass
        assert model.request_count == 0


class EarlierBuild(Tool):
    """`probe`, whose spec records `odd` for `setting`: as a build that did not refuse it did.

    The facade refuses such a time setting now (tests/unit/test_tools.py); a
    run recorded before holds it in history, and a worker of this build takes
    that run's next workflow task.
    """

    def __init__(self, setting: str, odd: float, **options: Any) -> None:
        def probe() -> str:
            """Answers "probed"."""
            return "probed"

        super().__init__(probe, **options)
        self.odd = {setting: odd}

    def spec(self) -> ToolSpec:
        return replace(super().spec(), **self.odd)


#: recorded time settings Python's timedelta cannot hold
ODD_WAITS = [
    ("timeout", math.inf, {}),
    ("timeout", 1e20, {}),
    ("approval_timeout", math.nan, {"requires_approval": True}),
    ("approval_timeout", math.inf, {"requires_approval": True}),
]


async def test_a_recorded_time_no_timer_can_hold_fails_the_run_and_resume_goes_on(
    client: Client, task_queue: str
) -> None:
    """Each failed every workflow task of the run, for ever; now the run fails saying what to fix.

    The call that could not start is answered so, its sibling's result is
    kept, and once the workers have the tool fixed `resume` goes on.
    """
    for case, (setting, odd, options) in enumerate(ODD_WAITS):
        tool = EarlierBuild(setting, odd, **options)
        script: list[Step] = [
            [CallTool("echo", '{"text": "hi"}', id="c_echo"), CallTool("probe", id="c_probe")]
        ]
        # a queue each: a worker takes only runs of its own build
        result, model = await _run(client, f"{task_queue}-{case}", [echo, tool], script)
        assert result.status == "failed", (setting, odd, result)
        assert f"Tool 'probe' has {setting}={odd!r}, which is not a number of seconds" in str(
            result.error
        )
        assert "fix the tool's definition on the workers, then resume(run_id)" in str(result.error)
        answers = {e.call_id: e for e in result.events if e.type == "tool_result"}
        assert answers["c_echo"].result == "hi" and answers["c_echo"].error is None, answers
        assert answers["c_probe"].error == "call failed", answers
        assert "this call did not run" in str(answers["c_probe"].result)
        assert model.request_count == 1
    # the workers fixed (another queue: this one's worker keeps the earlier build)
    fixed = EarlierBuild("timeout", 60.0)
    with ScriptedModelServer([Reply("done")]) as model:
        agent = scripted_agent(
            model, client, f"{task_queue}-fixed", tools=[echo, fixed], max_tool_failures=50
        )
        resumed = await asyncio.wait_for(agent.aresume(result.run_id), DEADLINE)
    assert resumed.status == "completed" and resumed.final_output == "done", resumed.error
    [request] = model.requests
    sent = [m for m in request["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in sent] == ["c_echo", "c_probe"], sent
    assert await _task_failures(client, result.run_id) == []


@function_tool
def scale(x: float) -> str:
    """Scales.

    Args:
        x: the factor.
    """
    return repr(x * 2)


def _refuse(token: str) -> Any:
    raise AssertionError(f"{token} in history")


async def test_a_number_no_float_holds_in_arguments_is_answered_not_recorded(
    client: Client, task_queue: str
) -> None:
    """`1e400` (standard JSON), `NaN`, `-Infinity` in a call's arguments: the model is told they
    are invalid and the tool does not run; before, it ran with inf or nan and the call went
    into history as the token Infinity/NaN, which the UI and other SDKs cannot decode."""
    script: list[Step] = [
        [
            CallTool("scale", '{"x": 1e400}', id="c_big"),
            CallTool("scale", '{"x": NaN}', id="c_nan"),
            CallTool("scale", '{"x": -Infinity}', id="c_inf"),
            CallTool("scale", '{"x": 2.5e0}', id="c_fine"),
        ],
        Reply("done"),
    ]
    result, model = await _run(client, task_queue, [scale], script)
    assert result.status == "completed", result.error
    answers = {e.call_id: e for e in result.events if e.type == "tool_result"}
    assert answers["c_fine"].error is None and answers["c_fine"].result == "5.0"
    [generation] = [e for e in result.events if e.type == "generation" and e.calls]
    recorded = {c["id"]: c["function"]["arguments"] for c in generation.calls or []}
    for call_id, number in (("c_big", "1e400"), ("c_nan", "NaN"), ("c_inf", "-Infinity")):
        error = answers[call_id].error or ""
        assert error.startswith("Invalid JSON arguments"), (call_id, error)
        # what the model reads of its own call again names the number
        assert recorded[call_id] == f"<arguments hold {number}, a number no float holds>"
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    for event in history.events:
        attrs = getattr(event, event.WhichOneof("attributes"))
        for name in ("input", "result"):
            if name in attrs.DESCRIPTOR.fields_by_name and attrs.HasField(name):
                for payload in getattr(attrs, name).payloads:
                    json.loads(payload.data, parse_constant=_refuse)
    assert model.request_count == 2
