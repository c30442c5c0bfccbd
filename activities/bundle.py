"""`AgentActivities`: the activities of one worker, bound to its registry.

Temporal registers bound methods like functions; binding is how each activity
reaches the worker's agents, stores and client without module globals. The
`name=` of each is written into history and shown in the UI, so it is fixed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from temporalio import activity

from agentor_temporal.activities import journal as _journal
from agentor_temporal.activities import model as _model
from agentor_temporal.activities import outcomes as _outcomes
from agentor_temporal.activities import tools as _tools
from agentor_temporal.activities._definition import definition_for
from agentor_temporal.activities._errors import instead_of_cancel
from agentor_temporal.activities._joining import LiveCalls
from agentor_temporal.activities._private import heartbeating
from agentor_temporal.activities._reset_answers import ResetAnswers, in_reset_execution
from agentor_temporal.activities.conversations import CACHE
from agentor_temporal.activities.registry import AgentRegistry
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import (
    ApprovalCheckInput,
    CallToolInput,
    CallToolResult,
    DescribeAgentInput,
    GenerateInput,
    GenerateResult,
    JournalInput,
    JournalResult,
    RunOutcomeInput,
)
from agentor_temporal.workflows.formatting import call_summary
from agentor_temporal.workflows.payloads import fields_of
from agentor_temporal.workflows.types import AgentSpec, RunOutcome

T = TypeVar("T")


class AgentActivities:
    """The activities a worker registers for `AgentRun`.

    Args:
        registry: the agents this worker serves. The worker's Temporal client
            (to backfill a mirror that fell behind, and to publish text
            deltas) comes from the activity context, not from here.
    """

    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry
        #: a retry of a model request or tool call that is still live (or just
        #: finished) in this worker joins it instead of running it again
        self.calls = LiveCalls()
        #: a call of a reset execution that its base completed takes that result
        self.answers = ResetAnswers()
        #: the event loop the worker runs its activities on (set by the plugin)
        self.loop: asyncio.AbstractEventLoop | None = None

    @activity.defn(name=policies.DESCRIBE_AGENT)
    async def describe_agent(self, inp: DescribeAgentInput) -> AgentSpec:
        """Record the agent's spec at the start of a segment."""
        return await _journal.describe_agent(self.registry, inp)

    @activity.defn(name=policies.GENERATE)
    async def generate(self, inp: GenerateInput) -> GenerateResult:
        """Mirror the events the request carries, then make one model request.

        A retry joins the request still live in this worker.
        """
        mirrored = None
        if inp.journal is not None:
            async with heartbeating():
                mirrored = await self._mirror_first(
                    inp.journal, inp.fingerprint, f"turn {inp.turn}"
                )
        # a streamed request too: a joined retry takes the live request's
        # answer, its deltas still going to the run (one stream, no reset)
        async with heartbeating():
            result = None
            if in_reset_execution(inp.reset_execution):
                result = await self._recorded(inp, _request_identity, GenerateResult)
            if result is None:
                result = await self.calls.run(
                    lambda: _model.generate(self.registry, inp),
                    same=lambda: _request_identity(fields_of(inp)),
                )
        return result if mirrored is None else dataclasses.replace(result, mirrored=mirrored)

    @activity.defn(name=policies.CALL_TOOL)
    async def call_tool(self, inp: CallToolInput) -> CallToolResult:
        """Mirror the events the call carries, then make one tool call.

        A retry joins the call still live in this worker.
        """
        mirrored = None
        async with heartbeating():
            if inp.journal is not None:
                what = call_summary(inp.name, inp.args)
                mirrored = await self._mirror_first(inp.journal, inp.fingerprint, what)
            result = None
            if in_reset_execution(inp.reset_execution):
                result = await self._recorded(inp, _call_identity, CallToolResult)
            if result is None:
                result = await self.calls.run(
                    lambda: _tools.call_tool(self.registry, inp),
                    same=lambda: _call_identity(fields_of(inp)),
                )
        return result if mirrored is None else dataclasses.replace(result, mirrored=mirrored)

    async def _recorded(
        self, inp: Any, same: Callable[[Mapping[str, Any]], str], cls: type[T]
    ) -> T | None:
        """The result the execution a reset ended recorded for this same call, if any."""
        result = await self.answers.recorded(lambda: fields_of(inp), same, cls)
        # its `mirrored` was that execution's: this attempt's own is set after
        return None if result is None else dataclasses.replace(result, mirrored=None)  # type: ignore[type-var]

    async def _mirror_first(self, journal: JournalInput, fingerprint: str, what: str) -> int | None:
        """Mirror the events a task carries, once its worker is known to run it.

        The server giving up on the attempt meanwhile (a heartbeat timeout while
        Temporal throttled or was unreachable) ends it quietly, as it does the
        call: the SDK logged the CancelledError as a failure, with a traceback.
        """
        try:
            # a worker built differently leaves the task, and writes nothing of the run
            await definition_for(self.registry, journal.agent, fingerprint, what)
            return await _journal.mirror_folded(self.registry, journal)
        except asyncio.CancelledError:
            replaced = instead_of_cancel(what)
            if replaced is None:
                raise
            raise replaced from None

    @activity.defn(name=policies.JOURNAL)
    async def journal(self, inp: JournalInput) -> JournalResult:
        """New events into history, unconfirmed ones into the store."""
        try:
            return await _journal.journal(self.registry, inp)
        finally:
            if any(e.get("type") == "run_end" for e in inp.events):
                # the execution ends: none of its calls is retried from here on. A
                # local step runs in the workflow task that closes it, which the
                # server may yet refuse and run again: its local answers stay a while
                info = activity.info()
                self.calls.forget_execution(
                    info.workflow_id or "", info.workflow_run_id or "", recorded=not info.is_local
                )

    @activity.defn(name=policies.NEEDS_APPROVAL)
    async def needs_approval(self, inp: ApprovalCheckInput) -> bool:
        """Evaluate a tool's approval predicate on one call's arguments."""
        return await _tools.needs_approval(self.registry, inp)

    @activity.defn(name=policies.RUN_OUTCOME)
    async def run_outcome(self, inp: RunOutcomeInput) -> RunOutcome:
        """How a run `run_agent` found already started ended (see `outcomes`)."""
        return await _outcomes.run_outcome(inp)

    def execution_ended(self, workflow_id: str, run_id: str) -> None:
        """Forget what this worker kept for an execution that closed here with its result.

        What the run's closing journal step does when it records the `run_end`;
        a run that puts its last events in its result has no such step. Called
        from the workflow's thread: the live calls belong to the worker's event
        loop (`loop`, set when the worker runs), so they are forgotten there; a
        call of theirs iterated here raced that loop and failed the run's last
        workflow task (measured: 1 model request in 2,000 asked again). Its
        local calls' answers stay a while (`LiveCalls.forget_execution`): the
        server may yet refuse the task that closed it and run it again.
        """
        CACHE.forget(workflow_id)
        loop = self.loop
        if loop is not None and not loop.is_closed():
            # the task closing it may yet be refused and run again: its local answers stay
            forget = functools.partial(self.calls.forget_execution, recorded=False)
            loop.call_soon_threadsafe(forget, workflow_id, run_id)

    def all(self) -> list[Any]:
        """Every activity, for `Worker(activities=...)`."""
        return [
            self.describe_agent,
            self.generate,
            self.call_tool,
            self.journal,
            self.needs_approval,
            self.run_outcome,
        ]


def _call_identity(inp: Mapping[str, Any]) -> str:
    """What a tool call is (`LiveCalls.run`'s `same`): its tool, arguments and idempotency key.

    Given the input's fields as the workflow sent them (`fields_of`).
    """
    what = [inp.get("run_id"), inp.get("call_id"), inp.get("use", 1), inp.get("name")]
    return json.dumps([*what, inp.get("args")], default=str)


def _request_identity(inp: Mapping[str, Any]) -> str:
    """What a model request is (`LiveCalls.run`'s `same`): a digest of all it sends."""
    names = ("run_id", "model", "turn", "position", "conversation", "messages", "tools")
    sent = [*(inp.get(name) for name in names), inp.get("model_settings") or {}]
    return hashlib.sha256(json.dumps(sent, sort_keys=True, default=str).encode()).hexdigest()
