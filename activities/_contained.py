"""Keeping an async tool's `SystemExit` and `KeyboardInterrupt` inside its call.

asyncio re-raises a `SystemExit` or `KeyboardInterrupt` that ends a task out
of the event loop itself: on a worker, the loop that runs every call it
serves. An async tool that raised one (an argparse or click entry point
called from it: `sys.exit(2)` on bad arguments) stopped the whole worker;
its call was handed back and ran again on the next worker, every other call
in flight there with it, and a worker process was left stopped but alive,
polling nothing. The tool's own coroutine is awaited inside `contained`; the
tasks it starts (`asyncio.gather`, `wait_for` on 3.11, a `TaskGroup`,
`create_task`) are kept by a task factory on the loop, which wraps the
coroutine of each task created inside a tool call (`in_tool`, a context
variable that such tasks inherit) and chains to any factory already there.
Either way the exception travels as `Exited`, an ordinary exception, to the
tool's caller, where it is the tool's answer like any other. A callback the
tool schedules itself (`loop.call_soon`) is not a task and is not covered
here: a worker stopped by one drains and exits (`agentor_temporal._loop_death`).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Coroutine, Generator
from typing import Any

#: Set while a tool (or an approval predicate) runs; the tasks it starts inherit it.
in_tool: contextvars.ContextVar[bool] = contextvars.ContextVar("agentor_in_tool", default=False)


class Exited(Exception):
    """A `SystemExit` or `KeyboardInterrupt` a tool's task raised, carried out of its task."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"{type(original).__name__}: {original}")
        self.original = original


def exited_in(exc: BaseException) -> BaseException | None:
    """The `SystemExit`/`KeyboardInterrupt` an `Exited` carries in `exc`, or in its group.

    A `TaskGroup` whose task exited gathers the `Exited` into an exception
    group; asyncio's own rule for a group's task that exited is to raise that
    exit alone, so the model reads "SystemExit: 2", not "unhandled errors in a
    TaskGroup".
    """
    if isinstance(exc, Exited):
        return exc.original
    for inner in getattr(exc, "exceptions", None) or ():
        if isinstance(inner, BaseException) and (found := exited_in(inner)) is not None:
            return found
    return None


async def contained(awaitable: Any) -> Any:
    """Await an async tool; what it raises stays an exception of its task.

    What it returns is awaited too when awaitable (an `await` forgotten in an
    `async def` tool, as a sync tool's returned coroutine is awaited): the model
    was answered "<coroutine object ...>" and the script printed "coroutine ...
    was never awaited" on stderr.
    """
    keep_tool_tasks()
    try:
        value = await awaitable
        return await value if inspect.isawaitable(value) else value
    except (SystemExit, KeyboardInterrupt) as exc:
        raise Exited(exc) from None


class _Kept(Coroutine[Any, Any, Any]):
    """A tool's task's coroutine whose `SystemExit`/`KeyboardInterrupt` is raised as `Exited`.

    A coroutine object of its own rather than an `async def` around the
    original: a task cancelled before its first step throws into the original
    at once (closing it), as it would without the wrapper, instead of leaving
    it never awaited.
    """

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        # the task's repr and stack name the tool's own coroutine
        self.__name__ = getattr(coro, "__name__", type(coro).__name__)
        self.__qualname__ = getattr(coro, "__qualname__", self.__name__)

    def send(self, value: Any) -> Any:
        try:
            return self._coro.send(value)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise Exited(exc) from None

    def throw(self, exc: Any, *rest: Any) -> Any:
        try:
            return self._coro.throw(exc, *rest)
        except (SystemExit, KeyboardInterrupt) as raised:
            raise Exited(raised) from None

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()

    def __getattr__(self, name: str) -> Any:
        # cr_frame, cr_code, cr_running...: asyncio reads them for reprs and stacks
        return getattr(self._coro, name)


def _keeping(previous: Any) -> Any:
    """A task factory wrapping a tool's tasks' coroutines, then making them as `previous` would."""

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        context = kwargs.get("context")
        inside = context.get(in_tool, False) if context is not None else in_tool.get()
        if inside and asyncio.iscoroutine(coro) and not isinstance(coro, _Kept):
            coro = _Kept(coro)
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    factory.agentor_keeps_tool_tasks = True  # type: ignore[attr-defined]
    return factory


def keep_tool_tasks() -> None:
    """Put the task factory on the running loop, once (chained to the loop's own)."""
    loop = asyncio.get_running_loop()
    current = loop.get_task_factory()
    if not getattr(current, "agentor_keeps_tool_tasks", False):
        loop.set_task_factory(_keeping(current))
