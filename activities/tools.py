"""The `call_tool` activity: one tool call, one activity execution.

A tool's own outcome is final and answers the model: what it returns, what it
raises (even an exception that cannot be printed), and running past its
timeout. The activity succeeds with that answer, so Temporal never runs the
tool again for it; a tool opts into retries with `@function_tool(retries=N)`.
What is not the tool's outcome is never recorded as one: a worker that is
stopping (its thread pool refuses work, or its shutdown cancels the call)
or too busy to start a sync tool (no thread came free in
SYNC_TOOL_THREAD_WAIT) hands the task back to Temporal, and a worker whose
agent differs from the run's leaves it for one that matches. So only a lost or stopping worker makes
a call run again, and then the tool sees the same idempotency key through
`tool_context()`; a call whose starts keep losing their worker (the tool
kills its process) is answered instead once `policies.LOST_TOOL_STARTS` were
lost (see `_starts`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentor_temporal.activities import _redact, _starts
from agentor_temporal.activities._definition import definition_for
from agentor_temporal.activities._errors import (
    being_cancelled,
    instead_of_cancel,
    safe_str,
    worker_busy,
    worker_stopping,
)
from agentor_temporal.activities._private import clip, excerpt, heartbeating, tool_heartbeats
from agentor_temporal.activities._tool_running import (
    NoThreadFree,
    PoolUnavailable,
    ToolTimedOut,
    settle_by,
)
from agentor_temporal.activities.registry import AgentRegistry
from agentor_temporal.activities.tooldef import ToolContext
from agentor_temporal.store.encoding import encodable_text
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import (
    ApprovalCheckInput,
    CallToolInput,
    CallToolResult,
)
from agentor_temporal.workflows.formatting import call_summary
from agentor_temporal.workflows.payloads import clip_to_size

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Error type of a tool failure retried because the tool asked for retries.
TOOL_FAILED = "ToolFailed"

#: Characters of a tool's result or error masked on the event loop, well under a second's
#: work; a longer one is masked in a thread, the call beating meanwhile (`_beside`).
_ON_LOOP_CHARS = 256_000

#: Characters kept of each end of a long failure's text: far more than is shown of it, so
#: a key (or a wrapped form of one) near what is shown is still read whole.
_ERROR_ENDS = 64_000
#: Stands for the middle of a long failure's text, cut before it is masked.
_ERROR_CUT = "\n... [{} characters cut] ...\n"


def error_result(error: str, **extra: float | None) -> CallToolResult:
    """The result a failed call answers the model with (`result` = "Error: ...")."""
    return _failed(failure_text(error), **extra)


def failure_text(error: str) -> str:
    """A failure's text as it may be shown: secrets masked (not yet cut), a piece of one at
    a word's edge too (a chunk of a file quoted: `workflows.key_pieces`).

    Of a long one only its start and end are kept (`_ERROR_ENDS` each), all that is ever
    shown of it (the model's first 4,000 characters, the log's first 2,000 and last
    1,000): masking a failed job's whole 15 MB log quoted took seconds of the
    interpreter's lock in single regular-expression searches, in which the call's
    heartbeats stopped, the server gave the call to another worker and the tool ran
    again; cutting first kept the masking of what is shown (it is cut again after).
    """
    if _long_failure(error):
        cut = len(error) - 2 * _ERROR_ENDS
        error = error[:_ERROR_ENDS] + _ERROR_CUT.format(cut) + error[-_ERROR_ENDS:]
    return _redact.clean(encodable_text(error), pieces=True)


def _long_failure(error: str) -> bool:
    """Whether only the ends of a failure's text are masked and kept (`failure_text`)."""
    return len(error) > 2 * _ERROR_ENDS + len(_ERROR_CUT)


def _failed(text: str, **extra: float | None) -> CallToolResult:
    error = clip(text)
    return CallToolResult(result=f"Error: {error}", error=error, **extra)  # type: ignore[arg-type]


async def call_tool(registry: AgentRegistry, inp: CallToolInput) -> CallToolResult:
    """Run one tool call with heartbeats; the tool's own outcome is the answer."""
    summary = call_summary(inp.name, inp.args)
    agent = await definition_for(registry, inp.agent, inp.fingerprint, summary)
    tool = agent.tool(inp.name)
    if tool is None:
        known = ", ".join(sorted(t.name for t in agent.tools)) or "none"
        return CallToolResult(
            result=f"Error: unknown tool {inp.name!r}. Available tools: {known}.",
            error="unknown tool",
        )
    finished = registry.finished_calls.get(inp.call_id)
    if finished is not None:
        logger.info("Tool %s in run %s already ran here; answering from that", summary, inp.run_id)
        return finished
    attempt = activity.info().attempt if activity.in_activity() else 1
    context = ToolContext(
        run_id=inp.run_id,
        call_id=inp.call_id,
        agent=inp.agent,
        turn=inp.turn,
        attempt=attempt,
        use=inp.use,
    )
    starts = await _starts.begin(policies.LOST_TOOL_STARTS)
    if starts.lost >= policies.LOST_TOOL_STARTS:
        logger.error(
            "Tool %s in run %s lost its worker in each of its last %d starts; not started again",
            summary,
            inp.run_id,
            starts.lost,
        )
        return error_result(_lost_text(tool.name, starts.lost))
    limit = tool.timeout or policies.TOOL_START_TO_CLOSE.total_seconds()
    started = time.time()
    failure: str | None = None
    failure_size: int | None = None
    settling = settle_by.set(inp.settle_by)
    try:
        async with heartbeating():
            with tool_heartbeats(tool.name):
                text = await tool.call(inp.args, context, registry.tool_pool(), timeout=limit)
    except PoolUnavailable as exc:
        await _starts.end(starts)
        raise worker_stopping(summary, exc) from None
    except NoThreadFree as exc:
        logger.warning("Tool %s in run %s handed back: %s", summary, inp.run_id, exc)
        await _starts.end(starts)
        raise worker_busy(summary, exc) from None
    except asyncio.CancelledError:
        replaced = instead_of_cancel(summary)
        if replaced is not None:
            await _starts.end(starts)  # cut by its worker's shutdown, not lost with it
            raise replaced from None
        if being_cancelled():
            raise  # the run is being cancelled: not the tool's answer either
        answer = error_result(
            "CancelledError: the tool cancelled itself", started_at=started, ended_at=time.time()
        )
    except ToolTimedOut as exc:
        answer = error_result(f"{tool.name} {exc}", started_at=started, ended_at=time.time())
        abandoned = registry.tool_pool().abandoned
        if abandoned:
            logger.warning(
                "%d sync tool thread(s) abandoned by timeouts still running in this process",
                abandoned,
            )
    except BaseException as exc:  # noqa: B036 - whatever the tool raised is its answer
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and being_cancelled():
            raise
        # the whole text, for the log's excerpt: its cause is often at its end,
        # past what the model is told
        ended = time.time()
        raw = safe_str(exc)
        failure = await _beside(failure_text, raw)
        failure_size = len(raw) if _long_failure(raw) else None
        answer = _failed(failure, started_at=started, ended_at=ended)
    else:
        answer = await _beside(_result, text, inp, started)
    finally:
        settle_by.reset(settling)
    if answer.error is not None:
        logger.warning(
            "Tool %s failed in run %s: %s",
            summary,
            inp.run_id,
            excerpt(failure, size=failure_size) if failure is not None else excerpt(answer.error),
        )
        if attempt <= tool.retries:
            # the tool opted into retries: Temporal runs it again, with backoff
            await _starts.end(starts)
            raise ApplicationError(
                f"{answer.error} (attempt {attempt} of {tool.retries + 1})", type=TOOL_FAILED
            )
    if answer.error is not None and inp.max_result_bytes is not None:
        # its text is recorded twice (`error`, and `result` for the model):
        # together they take the call's share of the turn's budget
        half = _limit(inp) // 2
        answer.error = clip_to_size(answer.error, half)
        answer.result = clip_to_size(answer.result or "", half)
    registry.finished_calls.put(inp.call_id, answer)
    return answer


async def _beside(clean: Callable[..., T], text: str, *args: Any) -> T:
    """`clean(text, *args)`: a long text masked beside the loop, the call beating meanwhile.

    Masking costs 0.2-1 s a megabyte once the worker knows a key (any real worker knows
    its model's), so a tool's 15 MB result or error (a log it read, a response body it
    quotes) took seconds after its beats had stopped with the tool: the server timed the
    call out and gave it to another worker, which ran the tool again. Beside the loop,
    the loop serves the worker's other calls meanwhile.
    """
    if len(text) <= _ON_LOOP_CHARS:
        return clean(text, *args)
    async with heartbeating():
        try:
            return await asyncio.to_thread(clean, text, *args)
        except RuntimeError:  # no thread to be had (the interpreter is exiting)
            return clean(text, *args)


def _lost_text(name: str, lost: int) -> str:
    return (
        f"{name} was started {lost + 1} times and never finished: each time, the worker running "
        "it stopped answering (its process died, or the tool held the GIL past the heartbeat "
        "timeout). It was not started again; it may have done part of its work"
    )


def _limit(inp: CallToolInput) -> int:
    """Encoded bytes the call's result may take: its share of the turn's budget, at most."""
    if inp.max_result_bytes is None:
        return policies.MAX_TOOL_RESULT_BYTES
    return min(inp.max_result_bytes, policies.MAX_TOOL_RESULT_BYTES)


def _result(text: str, inp: CallToolInput, started: float) -> CallToolResult:
    ended = time.time()
    # a piece of a key at a word's edge too: the result may be one chunk of a file the key
    # is cut across (`read_file(offset, limit)`), the next chunk holding the rest
    text = _redact.mask_secrets(encodable_text(text), pieces=True)
    limit = _limit(inp)
    clipped = clip_to_size(text, limit)
    if clipped != text:
        logger.warning(
            "Tool %s returned %d characters in run %s; cut to %d bytes as encoded",
            inp.name,
            len(text),
            inp.run_id,
            limit,
        )
    return CallToolResult(
        result=clipped, started_at=started, ended_at=ended, truncated=clipped != text
    )


async def needs_approval(registry: AgentRegistry, inp: ApprovalCheckInput) -> bool:
    """Whether this call of the tool waits for a person.

    A predicate that raises or takes longer than `APPROVAL_CHECK_TIMEOUT`, a
    tool this worker does not know, or an agent built differently from the
    run's asks a person: failing safe is the point of an approval gate (and
    another definition's predicate is never used).
    """
    try:
        agent = registry.get(inp.agent)
        if inp.fingerprint and agent.fingerprint() != inp.fingerprint:
            logger.warning(
                "Agent %r here differs from the run's; asking a person about %s",
                inp.agent,
                inp.name,
            )
            return True
        tool = agent.tool(inp.name)
        if tool is None:
            return True
        return await tool.asks_person(
            inp.args, registry.tool_pool(), timeout=policies.APPROVAL_CHECK_TIMEOUT.total_seconds()
        )
    except PoolUnavailable as exc:
        # this worker is stopping: not the predicate's answer
        raise worker_stopping(f"the approval check of {inp.name}", exc) from None
    except asyncio.CancelledError:
        if being_cancelled():
            raise
        # the predicate's own (a lookup it awaited was cancelled): let out, the
        # check failed and was asked again five times before a person was
        logger.warning("Approval predicate of %s was cancelled; asking a person", inp.name)
        return True
    except BaseException as exc:  # noqa: B036 - a predicate's SystemExit is its answer too
        # raised in its thread, it stops nothing here; let out, it failed the
        # check, which was asked again five times before a person was
        logger.warning(
            "Approval predicate of %s failed (%s); asking a person",
            inp.name,
            excerpt(safe_str(exc)),
        )
        return True
