"""The tasks a tool starts keep a `SystemExit`/`KeyboardInterrupt` inside the tool's call."""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from typing import Any

import pytest

from agentor_temporal.activities import Tool
from agentor_temporal.activities._contained import Exited, in_tool, keep_tool_tasks


async def _exits() -> None:
    await asyncio.sleep(0)
    sys.exit(3)


def _run(main: Any) -> Any:
    """`main()` on a fresh loop (a raise out of the loop is the failure these tests catch)."""
    return asyncio.run(main())


def test_a_child_tasks_exit_is_the_tools_answer_and_the_loop_lives() -> None:
    """A `sys.exit` in a task the tool gathered reaches the caller as the SystemExit."""

    async def gathers() -> str:
        await asyncio.gather(_exits())
        return "ran"

    async def main() -> str:
        with pytest.raises(SystemExit):
            await Tool(gathers).call({})
        await asyncio.sleep(0.05)  # the loop runs on
        return "alive"

    assert _run(main) == "alive"


def test_a_kept_task_cancelled_before_it_started_leaves_no_coroutine_unawaited() -> None:
    """Cancelled before its first step, the tool's task's coroutine is closed, not leaked."""

    async def never() -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        keep_tool_tasks()
        token = in_tool.set(True)
        try:
            task = asyncio.ensure_future(never())
        finally:
            in_tool.reset(token)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert "never" in repr(task)  # named by the tool's own coroutine

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _run(main)
        gc.collect()


def test_the_loops_own_task_factory_still_makes_the_tasks() -> None:
    """A factory the loop had is chained to; tasks outside a tool are not wrapped."""
    made: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            made.append(type(coro).__name__)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(factory)
        keep_tool_tasks()
        keep_tool_tasks()  # once only
        await asyncio.ensure_future(asyncio.sleep(0))
        token = in_tool.set(True)
        try:
            with pytest.raises(Exited):
                await asyncio.ensure_future(_exits())
        finally:
            in_tool.reset(token)

    _run(main)
    assert made[:2] == ["coroutine", "_Kept"]  # then asyncio.run's own, at its end


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is 3.11's")
def test_a_task_groups_exited_task_is_raised_as_its_exit() -> None:
    """A TaskGroup's task that exited makes the tool raise that exit, as asyncio's rule is."""

    async def in_group() -> str:
        async with asyncio.TaskGroup() as group:
            group.create_task(_exits())
            group.create_task(asyncio.sleep(5))
        return "ran"

    async def main() -> None:
        with pytest.raises(SystemExit) as raised:
            await Tool(in_group).call({})
        assert raised.value.code == 3

    _run(main)
