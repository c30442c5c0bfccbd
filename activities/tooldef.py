"""Tools: a Python function, its JSON schema, and how it is called.

The schema comes from type hints (through a pydantic model, which also
validates and coerces the model's arguments before the function sees them)
and from a Google-style docstring (`Args:` lines become parameter
descriptions; see `_tool_schema`). A tool body runs inside the `call_tool`
activity, where `tool_context()` (see `_tool_context`) exposes a stable
idempotency key (run_id + call_id, numbered when the model reused the call
id): a tool in flight when its worker dies runs again elsewhere, and that key
is how a side-effecting tool makes the second attempt safe.

A tool's own outcome is final: what it returns, what it raises, and running
past its `timeout` all answer the model, and it runs again only when its
worker was lost (or when it opts in with `retries=N`). A sync tool runs in a
thread, which Python cannot stop: when it times out, the model is told so,
and that the call may still be running, and the thread is abandoned (see
`_tool_running`): it runs on in the background, its result discarded, without
taking a place from later calls or holding up the process's exit. Its
timeout counts from when a thread starts it, never while it waits for one.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, overload

import pydantic

from agentor_temporal.activities import _tool_context
from agentor_temporal.activities._contained import contained, in_tool
from agentor_temporal.activities._threads import ToolThreads
from agentor_temporal.activities._tool_context import ToolContext, tool_context
from agentor_temporal.activities._tool_running import (
    NoThreadFree,
    PoolUnavailable,
    ToolTimedOut,
    bounded,
    default_threads,
    in_thread,
    raise_exited,
    timed_steps,
)
from agentor_temporal.activities._tool_schema import (
    args_model,
    parameters_schema,
    parse_docstring,
    stringify,
)
from agentor_temporal.workflows.policies import MAX_WAIT_SECONDS
from agentor_temporal.workflows.types import ToolSpec

logger = logging.getLogger(__name__)

__all__ = [
    "NoThreadFree",
    "PoolUnavailable",
    "Tool",
    "ToolContext",
    "ToolTimedOut",
    "as_tool",
    "function_tool",
    "parse_docstring",
    "stringify",
    "tool_context",
]


class Tool:
    """A callable the model can ask for, with its schema and policies."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool | Callable[..., bool] | Callable[..., Awaitable[bool]] = False,
        approval_timeout: float | None = None,
        on_approval_timeout: str = "deny",
        timeout: float | None = None,
        retries: int = 0,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"a tool must be callable, got {type(fn).__name__}")
        if on_approval_timeout not in ("deny", "fail"):
            raise ValueError('on_approval_timeout must be "deny" or "fail"')
        _check_seconds("timeout", timeout)
        _check_seconds("approval_timeout", approval_timeout)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "tool"))
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-' "
                "(the chat-completions API refuses anything else)"
            )
        summary, docs = parse_docstring(inspect.getdoc(fn))
        self.description = description if description is not None else summary
        self.requires_approval = requires_approval
        self.approval_timeout = approval_timeout
        self.on_approval_timeout = on_approval_timeout
        self.timeout = timeout
        #: times a raise or timeout is retried (by Temporal, with backoff)
        #: before it answers the model; 0: the first outcome is final
        self.retries = retries
        self._model = args_model(fn)
        self.parameters: dict[str, Any] = parameters_schema(self._model, docs)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (decorating keeps it usable)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def spec(self) -> ToolSpec:
        """The tool as recorded in the agent spec.

        Raises:
            ValueError: a time setting changed since the tool was built is none
                a run can wait for.
        """
        _check_seconds("timeout", self.timeout)
        _check_seconds("approval_timeout", self.approval_timeout)
        if callable(self.requires_approval):
            approval = "predicate"
        else:
            approval = "always" if self.requires_approval else "never"
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            approval=approval,
            approval_timeout=self.approval_timeout,
            on_approval_timeout=self.on_approval_timeout,
            timeout=self.timeout,
        )

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Check and coerce the model's arguments.

        Raises:
            ValueError: listing what is wrong, for the model to read.
        """
        try:
            parsed = self._model.model_validate(args)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ValueError(f"invalid arguments for {self.name}: {problems}") from None
        return {k: getattr(parsed, k) for k in type(parsed).model_fields}

    def needs_approval(self, args: dict[str, Any]) -> bool:
        """Whether this call waits for a person (a sync predicate sees the arguments).

        Raises:
            TypeError: when the predicate answers with an awaitable (an async
                predicate is awaited by `asks_person`).
        """
        if callable(self.requires_approval):
            answer = self.requires_approval(**args)
            if inspect.isawaitable(answer):
                if inspect.iscoroutine(answer):
                    answer.close()  # never awaited: no warning about it
                raise TypeError(
                    f"the approval predicate of {self.name} answered with an awaitable; "
                    "define it with `async def` to have it awaited"
                )
            return bool(answer)
        return bool(self.requires_approval)

    async def asks_person(
        self, args: dict[str, Any], threads: ToolThreads | None = None, *, timeout: float
    ) -> bool:
        """`needs_approval` for a worker: a predicate runs in `threads`, never on the loop.

        A predicate may take its time (a lookup). On the worker's event loop it
        held up every other run the worker serves, and one slower than
        `STALLED_LOOP_LIMIT` stopped the heartbeats of every call in flight
        there, so each was run again on another worker.

        Raises:
            ToolTimedOut: when it ran longer than `timeout` seconds (its thread
                is abandoned, still running).
            PoolUnavailable: when the thread pool refused it (the worker stops).
            NoThreadFree: when it waited too long for a thread (it never started).
            Exception: whatever the predicate raised.
        """
        if not callable(self.requires_approval):
            return bool(self.requires_approval)
        kwargs = self.validate(args)
        if inspect.iscoroutinefunction(self.requires_approval):
            # an async predicate awaits its lookups: it runs on the loop, timed
            # step by step, since a blocking call in it holds up the whole worker
            timed = timed_steps(self.requires_approval(**kwargs), self._blocked_loop)
            inside = in_tool.set(True)  # the tasks it starts are kept too (`_contained`)
            try:
                return bool(await bounded(contained(timed), timeout))
            except Exception as exc:
                raise_exited(exc)
                raise
            finally:
                in_tool.reset(inside)
        asked = functools.partial(self.needs_approval, kwargs)
        return bool(await in_thread(threads or default_threads(), asked, timeout))

    def _blocked_loop(self, seconds: float) -> None:
        logger.warning(
            "The approval predicate of %s blocked the worker's event loop for %.1f s without "
            "awaiting: an `async def` predicate runs on the loop, so a blocking call in it "
            "(time.sleep, requests, a sync database driver) holds up every run this worker "
            "serves, and its time limit cannot stop it. Define it with `def` (it then runs "
            "in a thread) or await non-blocking calls",
            self.name,
            seconds,
        )

    async def call(
        self,
        args: dict[str, Any],
        context: ToolContext | None = None,
        threads: ToolThreads | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """Run the tool; sync functions run in `threads` so the worker stays live.

        Raises:
            ToolTimedOut: when it ran longer than `timeout` seconds (a sync
                tool's thread is abandoned, still running).
            PoolUnavailable: when the thread pool refused the call.
            NoThreadFree: when a sync tool waited too long for a thread
                (it never started).
            Exception: whatever the tool raised.
        """
        kwargs = self.validate(args)
        token = _tool_context.current.set(context)
        inside = in_tool.set(True)  # the tasks an async tool starts are kept too (`_contained`)
        try:
            if inspect.iscoroutinefunction(self.fn):
                value = await bounded(contained(self.fn(**kwargs)), timeout)
            else:
                # the copied context carries tool_context() into the thread
                call = functools.partial(contextvars.copy_context().run, self.fn, **kwargs)
                value = await in_thread(threads or default_threads(), call, timeout)
                if inspect.isawaitable(value):
                    value = await bounded(contained(value), timeout)
        except Exception as exc:
            raise_exited(exc)
            raise
        finally:
            in_tool.reset(inside)
            _tool_context.current.reset(token)
        if value is None or isinstance(value, str):
            return stringify(value)
        # written beside the loop: a huge value (a query's million rows) takes seconds
        # to write, in which the loop would serve no other call of the worker
        try:
            return await asyncio.to_thread(stringify, value)
        except RuntimeError:  # no thread to be had (the interpreter is exiting): here, then
            return stringify(value)


def _check_seconds(setting: str, value: Any) -> None:
    """Refuse a time setting the run cannot wait for (None: no setting).

    The run makes it a timer or an activity timeout in workflow code, where
    a value a timedelta cannot hold would fail every workflow task for ever.
    """
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= MAX_WAIT_SECONDS  # NaN fails this too
    ):
        raise ValueError(
            f"{setting} must be a positive number of seconds, at most {MAX_WAIT_SECONDS:,} "
            f"(about 31 years); got {value!r}"
        )


@overload
def function_tool(func: Callable[..., Any], /) -> Tool: ...


@overload
def function_tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Callable[..., bool] | Callable[..., Awaitable[bool]] = False,
    approval_timeout: float | None = None,
    on_approval_timeout: str = "deny",
    timeout: float | None = None,
    retries: int = 0,
    **compat: Any,
) -> Callable[[Callable[..., Any]], Tool]: ...


def function_tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Callable[..., bool] | Callable[..., Awaitable[bool]] = False,
    approval_timeout: float | None = None,
    on_approval_timeout: str = "deny",
    timeout: float | None = None,
    retries: int = 0,
    **compat: Any,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a tool, with or without arguments.

    Args:
        func: the function (when used as a bare `@function_tool`).
        name: tool name; defaults to the function's name.
        description: defaults to the docstring's summary.
        requires_approval: True to make every call wait for `approve`/`deny`,
            or a predicate over the call's arguments (e.g. amount > 1000),
            plain or `async def`.
        approval_timeout: seconds a person has to decide; None waits forever.
        on_approval_timeout: "deny" (answer the model with a denial) or
            "fail" (end the run) when the approval timeout expires.
        timeout: seconds one call may run (default 30 minutes). A call that
            runs longer answers the model "timed out" and is not run again;
            a sync tool's thread cannot be stopped: it is abandoned, running
            on in the background (its result discarded) until it returns or
            the process exits, and the model is told it may still be running.
        retries: how many times a call that raised or timed out is run again
            (by Temporal, with backoff, same idempotency key) before its error
            answers the model. Default 0: a tool's own outcome is final.
        **compat: Agentor's `name_override` / `description_override` are
            honoured; its other legacy options are accepted and ignored.

    Returns:
        A `Tool`, which stays callable like the function it wraps.
    """
    name = name or compat.pop("name_override", None)
    description = (
        description if description is not None else compat.pop("description_override", None)
    )

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool(
            fn,
            name=name,
            description=description,
            requires_approval=requires_approval,
            approval_timeout=approval_timeout,
            on_approval_timeout=on_approval_timeout,
            timeout=timeout,
            retries=retries,
        )

    return decorate(func) if func is not None else decorate


def as_tool(item: Any) -> Tool:
    """A `Tool` from a `Tool` or a plain function.

    Raises:
        TypeError: for anything that cannot be called.
    """
    if isinstance(item, Tool):
        return item
    if callable(item):
        return Tool(item)
    raise TypeError(
        f"Unsupported tool {item!r}: pass a function or a @function_tool; "
        "provider-hosted tools cannot run on a worker."
    )
