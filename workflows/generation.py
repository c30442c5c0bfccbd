"""`Generation`: one model request of a run, and the `generation` event it records.

What the request sends (the conversation whole, or by reference once it is
large), where it runs (an activity; with `local_model_calls`, a local
activity inside the workflow task, or an activity again when that would
start late or carry too much), which new events go into history with it,
and what the run fails with when it cannot be sent (a request over one
payload, or the model's own failure).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from agentor_temporal.store.events import Event, Usage
from agentor_temporal.workflows import policies, steady
from agentor_temporal.workflows.activity_types import GenerateInput, GenerateResult, JournalInput
from agentor_temporal.workflows.conversation import Conversation
from agentor_temporal.workflows.formatting import SUMMARY_BYTES, failure_message, fit
from agentor_temporal.workflows.history_watch import HistoryWatch, past_last_line, watching
from agentor_temporal.workflows.journaling import Journal
from agentor_temporal.workflows.payloads import encoded_size, plain
from agentor_temporal.workflows.remote_results import ForeignResult, read_result
from agentor_temporal.workflows.request_size import oversized, tail_too_big, too_big
from agentor_temporal.workflows.run_ids import reset_execution
from agentor_temporal.workflows.segment import Setup
from agentor_temporal.workflows.tracing import RunTrace
from agentor_temporal.workflows.versions import adopted, level

T = TypeVar("T")


class AnswerKept(asyncio.CancelledError):
    """The run was stopped while its model request was in flight, and the answer was kept.

    From `policies.GENERATION_KEPT` the answer that came within the bound is
    recorded (`generation`) before this is raised; the run then closes as a
    stopped run does, and `resume` goes on from the answer.
    """

    def __init__(self, answer: GenerateResult) -> None:
        super().__init__("the run was stopped; its model answer was recorded")
        self.answer = answer


class Generation:
    """Asks the model for a run, and records each answer in its journal."""

    def __init__(self, journal: Journal, trace: RunTrace) -> None:
        self.journal = journal
        self.trace = trace
        #: when a run with a time limit must have settled by (`Deadline.settle_by`,
        #: as a timestamp): a stopped run's request is waited for until then at most
        self.settle_by: float | None = None
        #: set when a stopped run's request was not answered within the bound:
        #: the seconds it was waited for
        self.unanswered: float | None = None
        #: set when a local request timed out at the run's `settle_by`
        #: (`policies.LOCAL_REQUEST_BOUNDED`): the run stops at its time limit
        self.out_of_time = False
        #: stops the wait for an answer once the history nears Temporal's limits
        #: (`policies.HISTORY_STOPS_SHORT`; None before)
        self.watch: HistoryWatch | None = None
        #: (time, history length) of the workflow tasks this code last ran in, newest last
        self._tasks: list[tuple[float, int]] = []
        self._ran()

    def _ran(self) -> None:
        """Note the workflow task this code runs in, for `_first_send`."""
        task = (workflow.now().timestamp(), workflow.info().get_current_history_length())
        if not self._tasks or self._tasks[-1][1] != task[1]:
            self._tasks = [*self._tasks[-1:], task]

    def _first_send(self) -> bool:
        """Whether a local request decided now cannot have been sent before by a lost worker.

        A worker lost mid-request leaves its workflow task to time out, and
        the next worker decides the request again. That worker's instance of
        the run either replayed the run's history up to here, or began in
        this very task with lost tasks before it in history; and this
        instance last ran in an earlier task (at T), the lost task started
        after T and timed out a task timeout after it started. So when this
        instance ran in an earlier task less than a task timeout ago, or
        began in the run's first task (3 events: none lost), no send of
        this request was lost, and the worker need not read the run's
        history to count them (a request to the server per local request).
        Not knowing (replaying, a long tool call since), it reads.
        """
        if workflow.unsafe.is_replaying():
            return False
        now, length = workflow.now().timestamp(), workflow.info().get_current_history_length()
        earlier = [at for at, seen in self._tasks if seen < length]
        if not earlier:
            # this instance began in this task: the run's first, unless tasks were lost before it
            return length <= 3
        # a margin for the server's clocks: the times are its events'
        return now - earlier[-1] < workflow.info().task_timeout.total_seconds() * 0.8

    async def ask(
        self,
        seg: Setup,
        conversation: Conversation,
        disabled: list[str],
        turn: int,
        *,
        refs: Callable[[], bool],
        fold_allowed: Callable[[], bool],
        given: GenerateResult | None = None,
    ) -> GenerateResult | str:
        """Ask the model once and record the `generation`; a str is why the run fails.

        `refs` and `fold_allowed` say whether requests may go by reference and new
        events with the next activity; each asks `versions.adopted` once,
        when first needed, so they are passed uncalled. `given`: the answer a
        stopped segment recorded and left for this one (`AgentRunInput.answer`):
        recorded again, its usage not counted twice, and the model not asked.

        Raises:
            AnswerKept: the run was stopped while the request was in flight, and
                its answer came within the bound (recorded before this is raised).
        """
        spec = seg.spec
        schemas = [t.openai_schema() for t in spec.tools if t.name not in disabled]
        if not conversation.by_reference and conversation.size > seg.inline_bytes and refs():
            conversation.switch()
        request = conversation.request()
        base = conversation.base
        # a local request runs inside this workflow task: nothing recorded
        # before it could reach history sooner, so events wait for the next
        # step (a tool call, the run's end) instead of a journal step. Its
        # marker carries the request, in the completion that also records
        # what follows: a large one goes as an activity.
        local = given is not None or (
            spec.local_model_calls
            and not seg.stream_text
            and encoded_size(request) + self.journal.pending_bytes()
            <= policies.MAX_LOCAL_REQUEST_BYTES
        )
        fold = fold_allowed() and not local
        if not fold and not local:
            await self.journal.flush(spec.name, spec.mirror)
        refusal = (
            None
            if given is not None
            else (
                oversized(request, schemas)
                if base is None
                else too_big(conversation.size + encoded_size(schemas))
                or tail_too_big(request, schemas)
            )
        )
        if refusal is not None:
            return refusal
        activity_id = f"generate-{turn}"
        # the events since the last journal step go into history with the request
        folded = (
            self.journal.fold(
                spec.name, spec.mirror, beside=encoded_size(request) + encoded_size(schemas)
            )
            if fold
            else None
        )
        if fold and folded is None:
            await self.journal.flush(spec.name, spec.mirror)
        inp = GenerateInput(
            run_id=workflow.info().workflow_id,
            agent=spec.name,
            model=spec.model,
            messages=request,
            tools=schemas or None,
            model_settings=spec.model_settings,
            turn=turn,
            stream_text=seg.stream_text,
            conversation=base.to_dict() if base is not None else None,
            position=self.journal.position if base is not None else None,
            fingerprint=spec.fingerprint,
            journal=folded,
            task_started=workflow.now().timestamp() if local else None,
            first_send=local and self._first_send(),
            reset_execution=reset_execution(),
        )
        self._ran()
        kept: list[bool] = []
        # the history's length names the workflow task (see `ToolCalls._call`)
        scheduled_in = workflow.info().get_current_history_length()
        try:
            # not yet awaited: the activity is scheduled inside the generation's span
            summary = fit(f"{spec.model}, turn {turn}", SUMMARY_BYTES)
            if given is not None:
                # answered in the segment that was stopped: counted there, unless
                # that segment never recorded it (then its input carries the usage)
                gen = dataclasses.replace(given, request=None, mirrored=None)
            else:
                call = self._answer(inp, activity_id, summary, local=local, kept=kept)
                gen = await self.trace.generation(spec.model, turn, request, call)
        except ForeignResult as exc:
            return str(exc)
        except asyncio.CancelledError:
            self._unsent(folded, scheduled_in)
            raise
        except (ActivityError, ApplicationError, TemporalTimeoutError, CancelledError) as exc:
            if isinstance(exc, ActivityError) and isinstance(exc.cause, CancelledError):
                self._unsent(folded, scheduled_in)
            if not local and not isinstance(exc, ActivityError):
                raise
            # a local activity's failure arrives unwrapped: its own error, a
            # timeout, or the cancel
            cancelled = isinstance(exc, CancelledError) or isinstance(exc.cause, CancelledError)
            if cancelled and adopted(policies.PATCH_CLOSE_CANCELLED):
                raise asyncio.CancelledError(failure_message(exc)) from None
            if isinstance(exc, CancelledError):
                raise
            return failure_message(exc)
        if folded is not None:
            self.journal.confirm(gen.mirrored, spec.mirror)
        usage = Usage.from_dict(gen.usage)
        position = self.journal.position
        self.journal.record(
            Event(
                type="generation",
                turn=turn,
                model=spec.model,
                # sent by reference, the request is in history once: events
                # held and streamed here do not repeat it (the store gets it whole)
                messages=request if base is None else None,
                text=gen.text,
                reasoning=gen.reasoning,
                calls=copy.deepcopy(gen.calls) or None,
                usage=usage,
                started_at=gen.started_at,
                ended_at=gen.ended_at,
            ),
            # a given answer has no request in this history: its event keeps it
            ref=activity_id if given is None else None,
            request=None if base is None else {"conversation": base.to_dict(), "messages": request},
        )
        conversation.recorded(position)
        if kept:
            raise AnswerKept(gen)
        return gen

    def _unsent(self, folded: JournalInput | None, scheduled_in: int) -> None:
        """A request cancelled in the workflow task that started it was never scheduled:
        the events `folded` into its input did not reach history (`policies.PATCH_LOST_FOLD`),
        and the journal's next step records them."""
        if (
            folded is not None
            and workflow.info().get_current_history_length() == scheduled_in
            and workflow.patched(policies.PATCH_LOST_FOLD)
        ):
            self.journal.unfold(folded)

    async def _answer(
        self, inp: GenerateInput, activity_id: str, summary: str, *, local: bool, kept: list[bool]
    ) -> GenerateResult:
        """The model's answer: from a local activity, or an activity (also when that came late).

        From `policies.GENERATION_KEPT` a stop while the request is in flight
        does not stop it: its answer is waited for (`_through_the_stop`), and
        `kept` is appended to when it came.
        """
        keeps = level() >= policies.GENERATION_KEPT
        if local:
            bound = self._local_bound()
            sent = inp
            if bound is not None:
                sent = dataclasses.replace(inp, settle_by=self.settle_by)
            try:
                # one command either way (`execute_local_activity` is this, awaited)
                handle = steady.local(
                    workflow.start_local_activity(
                        policies.GENERATE,
                        plain(sent),
                        result_type=GenerateResult,
                        schedule_to_close_timeout=(
                            bound + policies.LOCAL_BOUND_BACKSTOP if bound is not None else None
                        ),
                        start_to_close_timeout=policies.MODEL_START_TO_CLOSE,
                        retry_policy=policies.MODEL_RETRY_POLICY,
                        activity_id=activity_id,
                        summary=summary,
                    )
                )
                if keeps:
                    return await self._through_the_stop(handle, kept)
                result: GenerateResult = await handle
                return result
            except (ActivityError, ApplicationError, TemporalTimeoutError) as exc:
                cause = exc.cause if isinstance(exc, ActivityError) else exc
                if bound is not None and (
                    isinstance(cause, TemporalTimeoutError)
                    or getattr(cause, "type", None) == policies.LOCAL_OUT_OF_TIME
                ):
                    # unanswered at the run's settle_by: the run stops at its limit
                    self.out_of_time = True
                    self.unanswered = bound.total_seconds()
                    raise asyncio.CancelledError(failure_message(exc)) from None
                if getattr(cause, "type", None) != policies.LOCAL_CALL_LATE:
                    raise
            # the worker was too busy to ask promptly: the model was not asked
            inp = dataclasses.replace(inp, task_started=None, first_send=False)
        # the same command either way (`execute_activity` is `start_activity` awaited);
        # its result read here: any client may have completed it (`remote_results`)
        remote: workflow.ActivityHandle[Any] = workflow.start_activity(
            policies.GENERATE,
            plain(inp),
            result_type=RawValue,
            start_to_close_timeout=policies.MODEL_START_TO_CLOSE,
            heartbeat_timeout=policies.MODEL_HEARTBEAT_TIMEOUT,
            retry_policy=policies.MODEL_RETRY_POLICY,
            activity_id=activity_id,
            summary=summary,
        )
        what = f"The model request of turn {inp.turn}"
        if keeps:
            return read_result(await self._through_the_stop(remote, kept), GenerateResult, what)
        return read_result(await remote, GenerateResult, what)

    def _local_bound(self) -> timedelta | None:
        """How long a local request may take: until the run's `settle_by`, if it has a limit.

        A local activity holds its workflow task, so the SDK sends the limit's
        timer and sees it fire only at the task's heartbeat (about every 8 s):
        the timer cannot stop a request that never answers before the server
        times the run out. The worker gives up on the model at `settle_by`
        itself (`GenerateInput.settle_by`), its schedule-to-close a backstop
        (`policies.LOCAL_REQUEST_BOUNDED`).
        """
        if self.settle_by is None or level() < policies.LOCAL_REQUEST_BOUNDED:
            return None
        left = self.settle_by - workflow.now().timestamp()
        return timedelta(seconds=max(left, policies.LOCAL_BOUND_FLOOR.total_seconds()))

    async def _through_the_stop(self, handle: asyncio.Future[T], kept: list[bool]) -> T:
        """`handle`'s answer; a stop meanwhile waits for it, within a bound, before it stops it.

        The bound: `policies.ANSWER_GRACE` after a cancel, and for a run with a
        time limit no later than its `settle_by`, which leaves its closing time.
        A paid request stopped mid-answer is lost: resume would send it again.
        """
        try:
            async with watching(self.watch):
                return await asyncio.shield(handle)
        except asyncio.CancelledError:
            # an answer that came in the stop's own workflow task reaches its
            # handle a loop step or two later (see tool_calls' reading of it)
            for _ in range(policies.CANCEL_READ_STEPS):
                if handle.done():
                    break
                await asyncio.sleep(0)
            bound = policies.ANSWER_GRACE.total_seconds()
            if self.settle_by is not None:
                bound = min(bound, self.settle_by - workflow.now().timestamp())
            waited_from = workflow.now()
            if not handle.done() and bound > 0:
                try:
                    if level() >= policies.HISTORY_LAST_LINE:
                        # and short of the last line: signals may go on meanwhile
                        await workflow.wait_condition(
                            lambda: handle.done() or past_last_line(), timeout=bound
                        )
                    else:
                        await workflow.wait([handle], timeout=bound)
                except asyncio.TimeoutError:
                    pass
                except asyncio.CancelledError:
                    pass  # stopped again (a time limit after a cancel): waits no more
            if not handle.done():
                if bound > 0 and level() >= policies.HISTORY_LAST_LINE:
                    bound = min(bound, (workflow.now() - waited_from).total_seconds())
                self.unanswered = bound if bound > 0 else None
                handle.cancel()
                raise
            if handle.cancelled() or handle.exception() is not None:
                raise  # it failed meanwhile: the run closes as stopped, as before
            kept.append(True)
            return handle.result()
