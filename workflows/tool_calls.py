"""`ToolCalls`: the tool calls of a turn, each its own activity.

A call the model got wrong (arguments that are not a JSON object, a tool
that does not exist or was withdrawn) is answered at once, without an
activity. A call of a tool that needs approval passes the `Approvals` gate
first. The rest run as `call_tool` activities, concurrently; the tool's own
outcome (a return, a raise, a timeout) comes back as its result, so Temporal
only retries what is not the tool's: lost or stopping workers, and workers
whose agent differs from the run's. A call that fails for such a reason for
good ends the run (`CallFailed`) rather than answer the model with our
machinery's failure. Finally the turn's results are cut to fit one payload
together; each call is also given its share of that budget to cut its own
result to, because history records every activity's result as it returned it.

Models reuse call ids, so each call is also counted as a use of its id
(`call_uses`): its use names its idempotency key and the decision it waits
for. People decide by call id, so in one turn only the first call with an
id that may ask a person is gated; a later one with the same id is answered
as invalid (it cannot be told apart from the first), and runs nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, CancelledError

from agentor_temporal.store.events import Event
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import CallToolInput, CallToolResult
from agentor_temporal.workflows.approvals import (
    NOT_RUN,
    ApprovalExpired,
    Approvals,
    BadToolSetting,
    tool_wait,
)
from agentor_temporal.workflows.call_uses import CallUses, use_key
from agentor_temporal.workflows.formatting import call_summary, failure_message
from agentor_temporal.workflows.history_watch import HistoryWatch, watching, within_last_line
from agentor_temporal.workflows.journaling import Journal
from agentor_temporal.workflows.payloads import clip_to_size, encoded_size, plain, share_budget
from agentor_temporal.workflows.remote_results import ForeignResult, read_result
from agentor_temporal.workflows.run_ids import reset_execution
from agentor_temporal.workflows.tracing import RunTrace
from agentor_temporal.workflows.types import AgentSpec, ToolSpec
from agentor_temporal.workflows.versions import adopted, level


class CallFailed(Exception):
    """A tool call failed for a reason that is not the tool's: the run ends, saying so.

    `answer` is the call's `tool_result` should its turn be kept; `results`
    (from `policies.FAILURE_KEEPS_CALLS`) every call's of the turn, in the
    model's order, for the run to record before it ends.
    """

    def __init__(self, message: str, answer: Event | None = None) -> None:
        super().__init__(message)
        self.answer = answer
        self.results: list[Event] | None = None


class TurnCancelled(asyncio.CancelledError):
    """The run was cancelled during a turn whose calls all came to an end; `results` answer them.

    At least one call ran to its own outcome; the others were stopped by the
    cancel (or never started), and their results say so. The run records
    them all before it closes, so `resume` goes on from the recorded batch
    rather than rewinding it and running the finished calls again.
    """

    def __init__(self, results: list[Event]) -> None:
        super().__init__("the run was cancelled")
        self.results = results


#: `error` of the result answering a call the run's cancel stopped
STOPPED = "cancelled"
#: `error` of the result answering a call that failed for a reason not the tool's (`CallFailed`)
CALL_FAILED = "call failed"
#: `error` of the result answering a call still running when its stopped run's
#: history reached the last line (`policies.HISTORY_LAST_LINE`)
CUT_OFF = "cut off"


def _answer(name: str, call_id: Any, error: str, result: str, **extra: Any) -> Event:
    return Event(
        type="tool_result", name=name, call_id=call_id, error=error, result=result, **extra
    )


def _cut_off(call: dict[str, Any], item: Event | tuple[str, dict[str, Any], ToolSpec]) -> Event:
    """The answer of a call still running when its stopped run's history reached the last line."""
    name, args = (item.name, item.args) if isinstance(item, Event) else item[:2]
    return _answer(
        str(name or ""),
        call.get("id"),
        CUT_OFF,
        "Error: this call was still running when its run had to close, its history near "
        "Temporal's limits (too many signals or updates sent to it); it may or may not have "
        "run, and its result, if any, was not recorded.",
        args=args,
    )


def _not_started(name: str, call_id: Any, message: str, args: dict[str, Any]) -> Event:
    """The answer to a call the run could not start (`BadToolSetting`), should its turn be kept."""
    return _answer(
        name,
        call_id,
        CALL_FAILED,
        f"Error: {message} The run stopped there; this call did not run.",
        args=args,
    )


async def _read(call: Awaitable[Any], what: str) -> CallToolResult:
    """The call's result, read as the run takes it (`remote_results`)."""
    return read_result(await call, CallToolResult, what)


def _unsure(name: str, call_id: Any, message: str, args: dict[str, Any]) -> Event:
    """The answer to a call that failed for a reason not the tool's, should its turn be kept.

    The model reads it only once the run is resumed: the call may have run
    (its worker was lost mid-call) or not (no worker could take it).
    """
    return _answer(
        name,
        call_id,
        CALL_FAILED,
        f"Error: {message} The run stopped there; this call may or may not have run, "
        "so check before you call it again.",
        args=args,
    )


class ToolCalls:
    """Runs a turn's tool calls for one segment of a run."""

    def __init__(
        self, journal: Journal, approvals: Approvals, trace: RunTrace | None = None
    ) -> None:
        self.journal = journal
        self.approvals = approvals
        self.trace = trace or RunTrace()
        #: tool activities in flight that need no approval
        self.running = 0
        #: calls per call id so far in the run (carried over continue-as-new)
        self.uses = CallUses()
        self._fold = False
        #: this turn's tool activities wait for their cancellation to complete
        self._wait_cancelled = False
        #: what stopped the turn's calls, as their answers say (`policies.DEADLINE_SETTLES`)
        self.stopped_by = "the run was cancelled"
        #: `CallToolInput.settle_by` of the segment's calls (a run with a time limit)
        self.settle_by: float | None = None
        #: stops the turn's wait once the history nears Temporal's limits
        #: (`policies.HISTORY_STOPS_SHORT`; None before)
        self.watch: HistoryWatch | None = None

    async def run_turn(
        self,
        spec: AgentSpec,
        calls: list[dict[str, Any]],
        turn: int,
        disabled: list[str],
        *,
        fold: bool = False,
        known: dict[int, Event] | None = None,
    ) -> list[Event]:
        """Every call's `tool_result`, in the order the model asked.

        Args:
            fold: new events go into history with the first call scheduled
                (see `Journal.fold`), not through a journal step before.
            known: the results of calls (by position) that ran before this
                segment (`AgentRunInput.answer`): they are not run again.

        Raises:
            ApprovalExpired: when an approval expired on a tool that fails the run.
        """
        self._fold = fold
        screened = self._shared(calls, [self._screen(spec, call, disabled) for call in calls])
        for index, event in (known or {}).items():
            if index < len(screened):
                screened[index] = event
        uses = [self.uses.next(str(call.get("id"))) for call in calls]
        self._wait_cancelled = adopted(policies.PATCH_RECORD_CANCELLED_CALLS)
        limits: list[int | None] = (
            self._shares(calls, screened)
            if level() >= policies.BOUNDED_TOOL_RESULTS
            else [None] * len(calls)
        )
        tasks = [
            asyncio.ensure_future(self._one(spec, call, answer, turn, index, use, limit))
            for index, (call, answer, use, limit) in enumerate(
                zip(calls, screened, uses, limits, strict=True)
            )
        ]
        if self._wait_cancelled:
            results = await self._settled(calls, screened, tasks)
        else:
            results = list(await asyncio.gather(*tasks))
        self._fit(results)
        return results

    async def _settled(
        self,
        calls: list[dict[str, Any]],
        screened: list[Event | tuple[str, dict[str, Any], ToolSpec]],
        tasks: list[asyncio.Task[Event]],
    ) -> list[Event]:
        """The turn's results; when the run is cancelled meanwhile, what its calls did.

        Raises:
            TurnCancelled: the run was cancelled (or stopped by its time limit or
                its history's size), and some call ran to its end.
            asyncio.CancelledError: the run was cancelled, and the turn is to be
                rewound on resume (see `_ended`).
            ApprovalExpired: an approval expired on a tool that fails the run;
                from `policies.EXPIRY_KEEPS_CALLS` with every call's result.
        """
        try:
            async with watching(self.watch):
                await workflow.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = self._first_error(tasks)
            if self._keeps_calls(failed) and not all(task.done() for task in tasks):
                # the run fails, but what its calls did is kept: none waits for a
                # person any more, and the ones running are waited for, short of
                # the last line
                self.approvals.end_waiting(str(failed))
                if not await within_last_line(tasks):
                    for task in tasks:
                        if not task.done():
                            task.cancel()  # asked to stop; not waited for
        except asyncio.CancelledError:
            # each call's activity is asked to stop, and answers once its
            # worker says how the call ended (a sync tool's thread cannot be
            # stopped: that worker waits for it)
            if level() >= policies.CANCEL_KEEPS_ENDED:
                await _read_what_came_with_the_cancel()
            for task in tasks:
                task.cancel()
            await within_last_line(tasks)
            ended = self._ended(calls, screened, tasks, self.stopped_by)
            if ended is None:
                raise
            self._fit(ended)
            raise TurnCancelled(ended) from None
        error = self._first_error(tasks)
        if error is None:
            return [task.result() for task in tasks]
        if isinstance(error, (ApprovalExpired, CallFailed)) and self._keeps_calls(error):
            error.results = self._failed_turn(
                tasks, [_cut_off(c, i) for c, i in zip(calls, screened, strict=True)]
            )
        raise error  # the first call's, in the model's order: the run ends

    @staticmethod
    def _keeps_calls(error: BaseException | None) -> bool:
        """Whether the run records its turn's results before `error` ends it."""
        if isinstance(error, ApprovalExpired):
            return level() >= policies.EXPIRY_KEEPS_CALLS
        return isinstance(error, CallFailed) and level() >= policies.FAILURE_KEEPS_CALLS

    @staticmethod
    def _first_error(tasks: list[asyncio.Task[Event]]) -> BaseException | None:
        """The first call's failure, in the model's order, among the calls that ended."""
        for task in tasks:
            error = task.exception() if task.done() and not task.cancelled() else None
            if error is not None:
                return error
        return None

    @classmethod
    def _failed_turn(cls, tasks: list[asyncio.Task[Event]], cut: list[Event]) -> list[Event] | None:
        """Every call's result of a turn that fails its run, or None to rewind it.

        An expired approval's call is answered as not approved; from
        `policies.FAILURE_KEEPS_CALLS` a call that failed for a reason not the
        tool's is answered that it may or may not have run (before, such a
        call rewound the turn, and resume ran its finished siblings again),
        and a turn in which no call ran to an answer of its own is rewound. A
        call still running (the history reached the last line) is answered
        from `cut`: cut off, it may or may not have run.
        """
        results: list[Event] = []
        kept = False
        for task, cut_off in zip(tasks, cut, strict=True):
            if not task.done():
                results.append(cut_off)
                kept = True
                continue
            error = task.exception()
            if isinstance(error, ApprovalExpired) and error.answer is not None:
                results.append(error.answer)
                kept = True  # as before FAILURE_KEEPS_CALLS: the expiry is the turn's answer
            elif (
                isinstance(error, CallFailed)
                and error.answer is not None
                and level() >= policies.FAILURE_KEEPS_CALLS
            ):
                results.append(error.answer)
            elif error is not None:
                return None
            else:
                results.append(task.result())
                kept = kept or task.result().error != NOT_RUN
        if not kept:
            return None
        cls._fit(results)
        return results

    @staticmethod
    def _ended(
        calls: list[dict[str, Any]],
        screened: list[Event | tuple[str, dict[str, Any], ToolSpec]],
        tasks: list[asyncio.Task[Event]],
        stopped_by: str,
    ) -> list[Event] | None:
        """The results of a turn its run's cancel (or time limit) ended, or None to rewind it.

        None unless some call ran to its own outcome (there is nothing to
        keep), or when a call failed for a reason that is not the tool's (it
        may or may not have run: resume rewinds, as after a lost worker).
        """
        results: list[Event] = []
        for call, item, task in zip(calls, screened, tasks, strict=True):
            if not task.done():
                # still running at the last line (`within_last_line`): not waited for
                results.append(_cut_off(call, item))
                continue
            error = None if task.cancelled() else task.exception()
            if (
                isinstance(error, ApprovalExpired)
                and error.answer is not None
                and level() >= policies.EXPIRY_KEEPS_CALLS
            ):
                # cancelled while the calls beside an expired approval ended
                results.append(error.answer)
                continue
            if (
                isinstance(error, CallFailed)
                and error.answer is not None
                and level() >= policies.FAILURE_KEEPS_CALLS
            ):
                # cancelled while the calls beside one no worker could run ended
                results.append(error.answer)
                continue
            if error is not None and not isinstance(error, asyncio.CancelledError):
                return None
            if not task.cancelled() and error is None:
                results.append(task.result())
                continue
            # cancelled before its activity was scheduled (waiting for a
            # person, or for the approval check): it did not run
            name, args = (item.name, item.args) if isinstance(item, Event) else item[:2]
            results.append(
                _answer(
                    str(name or ""),
                    call.get("id"),
                    STOPPED,
                    f"Error: {stopped_by} before this call ran; it did not run.",
                    args=args,
                )
            )
        if all(event.error in (STOPPED, CALL_FAILED) for event in results):
            return None
        return results

    @staticmethod
    def _screen(
        spec: AgentSpec, call: dict[str, Any], disabled: list[str]
    ) -> Event | tuple[str, dict[str, Any], ToolSpec]:
        """The call's name, arguments and tool; or the answer to a call the model got wrong."""
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        call_id = call.get("id")
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError as exc:
            return _answer(
                name,
                call_id,
                f"Invalid JSON arguments: {exc}",
                f"Error: arguments were not valid JSON ({exc}).",
            )
        if not isinstance(args, dict):
            return _answer(
                name,
                call_id,
                "Invalid arguments: not a JSON object",
                "Error: arguments must be a JSON object.",
            )
        if name in disabled:
            # withdrawing the schema is not enough: a model can still call it
            return _answer(
                name,
                call_id,
                "tool disabled",
                f"Error: tool {name!r} is disabled after repeated failures.",
                args=args,
            )
        tool = spec.tool(name)
        if tool is None:
            known = ", ".join(sorted(t.name for t in spec.tools)) or "none"
            return _answer(
                name,
                call_id,
                "unknown tool",
                f"Error: unknown tool {name!r}. Available tools: {known}.",
                args=args,
            )
        return name, args, tool

    @staticmethod
    def _shared(
        calls: list[dict[str, Any]],
        screened: list[Event | tuple[str, dict[str, Any], ToolSpec]],
    ) -> list[Event | tuple[str, dict[str, Any], ToolSpec]]:
        """Answer a call whose id an earlier call of the turn that may ask a person uses.

        A person decides by call id: two such calls could not be told apart.
        """
        gated: set[str] = set()
        out = list(screened)
        for index, (call, item) in enumerate(zip(calls, screened, strict=True)):
            if isinstance(item, Event) or item[2].approval == "never":
                continue
            call_id = str(call.get("id"))
            if call_id not in gated:
                gated.add(call_id)
                continue
            if not adopted(policies.PATCH_CALL_USES):
                continue  # runs recorded before gated both, under one id
            name, args, _ = item
            out[index] = _answer(
                name,
                call.get("id"),
                "duplicate call id",
                f"Error: another call in this turn has the same id {call_id!r}, and calls "
                "that may need a person's approval are approved by id, so this one did not "
                "run. Call it again with an id of its own.",
                args=args,
            )
        return out

    async def _one(
        self,
        spec: AgentSpec,
        call: dict[str, Any],
        screened: Event | tuple[str, dict[str, Any], ToolSpec],
        turn: int,
        index: int,
        use: int,
        max_result_bytes: int | None = None,
    ) -> Event:
        if isinstance(screened, Event):
            return screened
        name, args, tool = screened
        call_id = call.get("id")
        key = use_key(str(call_id), use)
        try:
            return await self._gated(
                spec, name, args, tool, call_id, turn, index, use, key, max_result_bytes
            )
        except BadToolSetting as exc:
            # where the run failed every workflow task on it: the run ends instead
            raise CallFailed(str(exc), _not_started(name, call_id, str(exc), args)) from None

    async def _gated(
        self,
        spec: AgentSpec,
        name: str,
        args: dict[str, Any],
        tool: ToolSpec,
        call_id: Any,
        turn: int,
        index: int,
        use: int,
        key: str,
        max_result_bytes: int | None,
    ) -> Event:
        if tool.approval != "never":
            answered = await self.approvals.gate(
                self.journal,
                spec.name,
                spec.mirror,
                tool,
                args,
                str(call_id),
                turn,
                fingerprint=spec.fingerprint,
                # a use after the id's first is decided by its own key; runs
                # recorded before that decided (and still replay) by call id
                key=key if key == str(call_id) or adopted(policies.PATCH_CALL_USES) else None,
            )
            if answered is not None:
                return answered
        limit = tool_wait(tool, "timeout", policies.TOOL_TIMEOUT_GRACE)
        if limit is None:
            limit = policies.TOOL_START_TO_CLOSE + policies.TOOL_TIMEOUT_GRACE
        self.running += 1
        folded = (
            self.journal.fold(spec.name, spec.mirror, beside=encoded_size(args))
            if self._fold
            else None
        )
        # the history's length names the workflow task: a cancel in this one
        # drops the activity's schedule before it is sent, the folded events too
        scheduled_in = workflow.info().get_current_history_length()
        try:
            # not yet awaited: the activity is scheduled inside the call's span
            call_tool = workflow.execute_activity(
                policies.CALL_TOOL,
                plain(
                    CallToolInput(
                        run_id=workflow.info().workflow_id,
                        agent=spec.name,
                        call_id=str(call_id),
                        name=name,
                        args=args,
                        turn=turn,
                        use=use,
                        fingerprint=spec.fingerprint,
                        journal=folded,
                        max_result_bytes=max_result_bytes,
                        settle_by=self.settle_by,
                        reset_execution=reset_execution(),
                    )
                ),
                # read below: any client may have completed it (`remote_results`)
                result_type=RawValue,
                # the activity answers "timed out" at the tool's limit; this
                # fires only for a worker that stopped answering altogether
                start_to_close_timeout=limit,
                heartbeat_timeout=policies.TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=policies.TOOL_RETRY_POLICY,
                activity_id=f"tool-{turn}-{index}",
                summary=call_summary(name, args),
                cancellation_type=(
                    workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                    if self._wait_cancelled
                    else workflow.ActivityCancellationType.TRY_CANCEL
                ),
            )
            res = await self.trace.tool_call(
                name,
                str(call_id),
                args,
                turn,
                _read(call_tool, f"The call {call_summary(name, args)}"),
            )
        except ForeignResult as exc:
            # not the tool's answer, nor a failure of ours: the call may have run
            raise CallFailed(str(exc), _unsure(name, call_id, str(exc), args)) from None
        except ActivityError as exc:
            if (
                isinstance(exc.cause, CancelledError)
                and folded is not None
                and workflow.info().get_current_history_length() == scheduled_in
                and workflow.patched(policies.PATCH_LOST_FOLD)
            ):
                self.journal.unfold(folded)
            if isinstance(exc.cause, CancelledError) and self._wait_cancelled:
                # the run's cancel stopped the call: its worker says so
                error = f"Error: {self.stopped_by} while this call ran, and it was stopped"
                return _answer(
                    name,
                    call_id,
                    STOPPED,
                    f"{error} before it finished (it may have done part of its work).",
                    args=args,
                )
            if isinstance(exc.cause, CancelledError) and adopted(policies.PATCH_CLOSE_CANCELLED):
                # the run is being cancelled: not the tool's answer
                raise asyncio.CancelledError(failure_message(exc)) from None
            if adopted(policies.PATCH_MACHINERY_NOT_AN_ANSWER):
                # not the tool's outcome (its own errors come back as results):
                # the run stops rather than tell the model something untrue
                message = (
                    f"The call {call_summary(name, args)} could not run: {failure_message(exc)}"
                )
                raise CallFailed(message, _unsure(name, call_id, message, args)) from None
            error = f"Tool call failed: {failure_message(exc)}"
            return _answer(name, call_id, error, f"Error: {error}", args=args)
        finally:
            self.running -= 1
        if folded is not None:
            self.journal.confirm(res.mirrored, spec.mirror)
        return Event(
            type="tool_result",
            name=name,
            args=args,
            result=res.result,
            error=res.error,
            call_id=call_id,
            started_at=res.started_at,
            ended_at=res.ended_at,
        )

    @staticmethod
    def _fit(results: list[Event]) -> None:
        """Cut a turn's results so that together they fit one payload.

        Each is already under MAX_TOOL_RESULT_BYTES, but many parallel calls
        would still make the journal step (and the next request) too large
        to record, which wedges the run in workflow-task retries.
        """
        sizes = [encoded_size(e.result) for e in results]
        args = sum(encoded_size(e.args) for e in results if e.args)
        ids = sum(encoded_size(e.call_id) for e in results)
        budget = ToolCalls._budget(sum(sizes), args, ids)
        if sum(sizes) <= budget or not adopted(policies.PATCH_TURN_RESULT_BUDGET):
            return
        for event, limit in zip(results, share_budget(sizes, budget), strict=True):
            if limit is not None and event.result is not None:
                event.result = clip_to_size(event.result, limit)

    @staticmethod
    def _budget(total: int, args: int, ids: int) -> int:
        """What a turn's results of `total` bytes may take together, beside what they repeat.

        Each result repeats its call's arguments (`args` bytes in all) and its
        call id (`ids`), in its event and in the tool message the next request
        carries: 500 ids of a few hundred bytes each are a lot.
        """
        budget = policies.MAX_TURN_RESULT_BYTES
        # asked only when the arguments matter: older runs replay unchanged
        if total + args > budget and args and adopted(policies.PATCH_TURN_ARGS_BUDGET):
            budget = max(budget - args, budget // 4)
        if total + ids > budget and adopted(policies.PATCH_TAIL_BUDGET):
            budget = max(budget - ids, policies.MAX_TURN_RESULT_BYTES // 4)
        return budget

    @staticmethod
    def _shares(
        calls: list[dict[str, Any]],
        screened: list[Event | tuple[str, dict[str, Any], ToolSpec]],
    ) -> list[int | None]:
        """Each call's share of the turn's budget (None: MAX_TOOL_RESULT_BYTES is less).

        As `_fit` cuts the results when every tool returns the most it may, so
        such a turn reads as it did when only `_fit` cut it; and the results
        then fit together, so `_fit` leaves them as they are. (Asked from
        `policies.BOUNDED_TOOL_RESULTS` on, where every rule `_budget` asks
        about is the run's already: it issues no command.)
        """
        sizes = [
            encoded_size(item.result) if isinstance(item, Event) else policies.MAX_TOOL_RESULT_BYTES
            for item in screened
        ]
        args = sum(
            encoded_size(item.args if isinstance(item, Event) else item[1])
            for item in screened
            if (item.args if isinstance(item, Event) else item[1])
        )
        ids = sum(encoded_size(call.get("id")) for call in calls)
        budget = ToolCalls._budget(sum(sizes), args, ids)
        if sum(sizes) <= budget:
            return [None] * len(calls)
        return share_budget(sizes, budget)


async def _read_what_came_with_the_cancel() -> None:
    """Let the calls whose completion came in the cancel's workflow task take their results.

    A completion resolves its activity's handle, which then hands the result
    to the call's task a loop step later; a call's task cancelled before that
    gets `CancelledError` instead (the SDK's rule for cancelling a completed
    activity), and its result, though in history, would read as not run. Two
    steps carry a result to its call (one to the handle, one to the call);
    nothing here starts or stops anything.
    """
    for _ in range(policies.CANCEL_READ_STEPS):
        await asyncio.sleep(0)
