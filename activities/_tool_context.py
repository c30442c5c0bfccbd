"""What a tool can know about the call it is serving: `tool_context()`.

A tool in flight when its worker dies runs again on another worker, so a
tool with side effects needs a key that is the same on every attempt of one
call and different for every other call of the run: `idempotency_key`, the
run id and the call id, numbered when the model reused that call id. The
context travels in a context variable, which `Tool.call` copies into a sync
tool's thread.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from agentor_temporal.workflows.call_uses import use_key


@dataclass(frozen=True)
class ToolContext:
    """Where a tool call stands; read it with `tool_context()` inside a tool."""

    run_id: str
    call_id: str
    agent: str
    turn: int
    #: 1 for the first execution, higher when a lost worker's call is retried
    attempt: int
    #: which call with this `call_id` in the run this is: models reuse ids
    #: (`call_0` in every turn), so the id alone does not name one call
    use: int = 1

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of this call, and distinct for every call of the run.

        `"<run_id>:<call_id>"` for the first call with an id, and
        `"<run_id>:<call_id>#<n>"` for the n-th (an id containing `#` is
        numbered from its first call, so no two calls share a key).
        """
        return f"{self.run_id}:{use_key(self.call_id, self.use)}"


#: The call being executed: `Tool.call` sets it around the tool's body.
current: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "agentor_tool_context", default=None
)


def tool_context() -> ToolContext:
    """The context of the tool call being executed.

    Raises:
        RuntimeError: outside a tool call.
    """
    ctx = current.get()
    if ctx is None:
        raise RuntimeError("tool_context() is only available while a tool is being called")
    return ctx
