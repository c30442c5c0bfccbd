"""Tools: schemas from hints and docstrings, validated calls, the idempotency key."""

from __future__ import annotations

import asyncio
import datetime
import gc
import logging
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Annotated

import pydantic
import pytest

from agentor_temporal.activities.tooldef import (
    ToolContext,
    ToolTimedOut,
    function_tool,
    parse_docstring,
    tool_context,
)
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.policies import BLOCKING_STEP


@function_tool
def get_weather(city: str, days: int = 1) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up. A longer description
            that continues: on a second line.
        days (int): How many days.
    """
    return f"{city}:{days}:{threading.current_thread().name}"


def test_schema_from_hints_and_google_docstring() -> None:
    assert get_weather.name == "get_weather"
    assert get_weather.description == "Get the current weather for a city."
    assert get_weather.parameters == {
        "type": "object",
        "properties": {
            "city": {
                "type": "string",
                "description": (
                    "The city to look up. A longer description that continues: on a second line."
                ),
            },
            "days": {"type": "integer", "default": 1, "description": "How many days."},
        },
        "required": ["city"],
    }


def test_decorated_function_stays_callable() -> None:
    assert get_weather("Oslo").startswith("Oslo:1:")


async def test_sync_tool_runs_in_a_thread_and_sees_its_context() -> None:
    """A sync tool runs off the event loop and can read its idempotency key."""
    seen: list[str] = []

    @function_tool(name="keyed")
    def keyed(x: int) -> dict[str, int]:
        seen.append(tool_context().idempotency_key)
        return {"x": x, "main": int(threading.current_thread() is threading.main_thread())}

    ctx = ToolContext(run_id="r", call_id="c", agent="A", turn=1, attempt=2)
    assert await keyed.call({"x": "3"}, ctx) == '{"x": 3, "main": 0}'
    assert seen == ["r:c"]


async def test_invalid_arguments_are_reported_for_the_model() -> None:
    with pytest.raises(ValueError, match="invalid arguments for get_weather: city: Field required"):
        await get_weather.call({"days": 2})


def test_tool_context_outside_a_call_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="only available"):
        tool_context()


def test_options_and_agentor_compat_names() -> None:
    def plain() -> str:
        return "x"

    def transfer(amount: int) -> int:
        return amount

    tool = function_tool(name_override="renamed", description_override="D", strict_mode=True)(plain)
    assert (tool.name, tool.description) == ("renamed", "D")
    approval = function_tool(requires_approval=lambda amount: amount > 10)(transfer)
    assert approval.spec().approval == "predicate" and approval.needs_approval({"amount": 11})
    with pytest.raises(ValueError, match="tool name"):
        function_tool(name="bad name")(plain)


@pytest.mark.parametrize("setting", ["timeout", "approval_timeout"])
@pytest.mark.parametrize("value", [math.inf, math.nan, 1e20, 0, -5, True, "5"])
def test_a_time_no_run_can_wait_for_is_refused_when_defined(setting: str, value: object) -> None:
    """inf, NaN or 1e20 seconds failed every workflow task of a run that called the tool."""

    def plain() -> str:
        return "x"

    with pytest.raises(ValueError, match=f"^{setting} must be a positive number of seconds"):
        function_tool(**{setting: value})(plain)
    # changed after it was built: refused when a worker takes its spec
    tool = function_tool(**{setting: 60})(plain)
    setattr(tool, setting, value)
    with pytest.raises(ValueError, match=f"^{setting} must be a positive number of seconds"):
        tool.spec()
    longest = function_tool(**{setting: policies.MAX_WAIT_SECONDS})(plain)
    assert getattr(longest.spec(), setting) == policies.MAX_WAIT_SECONDS


async def test_an_approval_predicate_runs_beside_the_loop_and_is_given_up_on_when_slow() -> None:
    """A predicate runs in a thread (the loop goes on meanwhile); past its timeout it raises."""
    answer = threading.Event()

    def transfer(amount: int) -> int:
        return amount

    def over(amount: int) -> bool:
        answer.wait(10)
        return amount > 10

    tool = function_tool(requires_approval=over)(transfer)
    asking = asyncio.ensure_future(tool.asks_person({"amount": 11}, timeout=10))
    for _ in range(5):
        await asyncio.sleep(0.01)  # the loop runs while the predicate waits
    assert not asking.done()
    answer.set()
    assert await asking is True
    answer.clear()
    with pytest.raises(ToolTimedOut, match="timed out after 0.2 s"):
        await tool.asks_person({"amount": 11}, timeout=0.2)
    answer.set()


async def test_an_async_approval_predicate_is_awaited(recwarn: pytest.WarningsRecorder) -> None:
    """Not taken for "ask a person" because a coroutine is truthy, nor left never awaited."""

    def transfer(amount: int) -> str:
        """Moves money."""
        return "ok"

    async def over(amount: int) -> bool:
        await asyncio.sleep(0)
        return amount > 10

    async def stuck(amount: int) -> bool:
        await asyncio.Event().wait()
        return True

    tool = function_tool(requires_approval=over)(transfer)
    assert await tool.asks_person({"amount": 5}, timeout=10) is False
    assert await tool.asks_person({"amount": 11}, timeout=10) is True
    slow = function_tool(requires_approval=stuck)(transfer)
    with pytest.raises(ToolTimedOut, match="timed out after 0.2 s"):
        await slow.asks_person({"amount": 11}, timeout=0.2)
    # a sync predicate handing back a coroutine is an error (the caller asks a person)
    odd = function_tool(requires_approval=lambda amount: over(amount))(transfer)
    with pytest.raises(TypeError, match="define it with `async def`"):
        await odd.asks_person({"amount": 5}, timeout=10)
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


async def test_an_async_predicate_blocking_the_loop_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An `async def` predicate that blocks the event loop (time.sleep) is named in a warning
    that says how to fix it; one that awaits is not, and either answer stands."""

    def transfer(amount: int) -> str:
        """Moves money."""
        return "ok"

    async def blocks(amount: int) -> bool:
        time.sleep(BLOCKING_STEP.total_seconds() + 0.2)  # the mistake this is about
        await asyncio.sleep(0)
        time.sleep(BLOCKING_STEP.total_seconds() + 0.2)
        return amount > 10

    async def awaits(amount: int) -> bool:
        await asyncio.sleep(BLOCKING_STEP.total_seconds() + 0.2)
        return amount > 10

    with caplog.at_level(logging.WARNING, logger="agentor_temporal.activities.tooldef"):
        assert await function_tool(requires_approval=awaits)(transfer).asks_person(
            {"amount": 11}, timeout=10
        )
        assert not caplog.records
        blocking = function_tool(name="blocking", requires_approval=blocks)(transfer)
        assert await blocking.asks_person({"amount": 11}, timeout=10) is True
    [warning] = [r.getMessage() for r in caplog.records]
    assert "approval predicate of blocking blocked the worker's event loop" in warning
    assert "Define it with `def`" in warning


async def test_async_tools_are_awaited() -> None:
    @function_tool
    async def slow(n: int) -> int:
        """Sleeps."""
        await asyncio.sleep(0)
        return n * 2

    assert await slow.call({"n": 4}) == "8"


def test_parse_docstring_sections() -> None:
    summary, params = parse_docstring(
        "Do it.\n\nArgs:\n    a: first\n\nReturns:\n    b: not a param\n"
    )
    assert summary == "Do it." and params == {"a": "first"}


def test_a_parameter_the_model_could_never_be_offered_is_refused_when_defined() -> None:
    """Not silently dropped (a leading '_'), nor a raw pydantic error at the first run."""
    from collections.abc import Callable as CallableType

    def private(_token: str) -> str:
        return ""

    def reserved(model_config: str) -> str:
        return ""

    def callback(cb: CallableType[[int], int]) -> str:
        return ""

    class Opaque:
        pass

    def opaque(thing: Opaque) -> str:
        return ""

    def nan_bound(n: Annotated[int, pydantic.Field(gt=math.nan)]) -> str:
        return ""

    def bad_pattern(code: Annotated[str, pydantic.Field(pattern="[")]) -> str:
        return ""

    for fn, says in (
        (private, "parameter '_token' cannot be offered to the model"),
        # a many-line pydantic_core SchemaError naming no tool before
        (nan_bound, "tool 'nan_bound': its parameters cannot be described to the model"),
        (bad_pattern, "regex parse error"),
        (reserved, "parameter 'model_config' cannot be offered to the model"),
        (callback, "tool 'callback': its parameters cannot be described to the model"),
        (opaque, "tool 'opaque': its parameters cannot be described to the model"),
    ):
        with pytest.raises(TypeError) as info:
            function_tool(fn)
        assert says in str(info.value) and "\n" not in str(info.value)

    def fine(model_name: str, city: str = "Oslo") -> str:
        return ""

    assert set(function_tool(fine).parameters["properties"]) == {"model_name", "city"}


def test_a_default_that_is_not_a_json_value_is_left_out_of_the_schema() -> None:
    """Defaults that may differ between processes (times, UUIDs, paths) are not shown."""

    def lookup(
        a: int = 3,
        b: str = "x",
        c: list[int] = [1],  # noqa: B006 - never mutated: a default as users write them
        when: datetime.datetime = datetime.datetime.now(),  # noqa: B008
        key: uuid.UUID = uuid.uuid4(),  # noqa: B008
        where: Path = Path.cwd(),  # noqa: B008
    ) -> str:
        """Look something up."""
        return ""

    props = function_tool(lookup).spec().parameters["properties"]
    assert {k: v.get("default") for k, v in props.items()} == {
        "a": 3,
        "b": "x",
        "c": [1],
        "when": None,
        "key": None,
        "where": None,
    }
