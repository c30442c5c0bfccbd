"""`AgentRunWorkflow` (type `AgentRun`): the agent loop as deterministic code.

The loop is Agentor's: ask the model, run the tools it asked for (each its own
activity, concurrently), feed the results back, stop at a final answer or a
budget. The parts live beside it: `Journal` records events (history, stream,
store), `ToolCalls` runs a turn's calls through the `Approvals` gate, and
`FailureBudget` withdraws a tool that keeps failing; how an execution ends
(`Closing`) and continues as new (`Continuing`) are the bases of its class.
No clock, randomness or I/O here: timestamps of work are measured in the
activities and come back in their results.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    # Dataclasses, constants and pure functions with no I/O or module state:
    # sharing the host's copies with the sandbox cannot leak nondeterminism,
    # and re-importing them for every run would only cost time.
    from agentor_temporal.store.events import Event, Usage
    from agentor_temporal.store.replay import assistant_message, initial_messages, tool_message
    from agentor_temporal.workflows import policies
    from agentor_temporal.workflows.activity_types import (
        GenerateResult,
    )
    from agentor_temporal.workflows.approvals import ApprovalExpired, Approvals, sent_decision
    from agentor_temporal.workflows.budget import FailureBudget
    from agentor_temporal.workflows.call_uses import CallUses, SeenIds
    from agentor_temporal.workflows.carried_outcomes import handed_outcomes
    from agentor_temporal.workflows.carry import (
        Carry,
        HistoryGauge,
        decisions_in,
        stream_state,
    )
    from agentor_temporal.workflows.closing import results_kept
    from agentor_temporal.workflows.continuing import Continuing
    from agentor_temporal.workflows.conversation import Conversation
    from agentor_temporal.workflows.deadline import Deadline, model_request, run_deadline
    from agentor_temporal.workflows.formatting import call_summary, fit
    from agentor_temporal.workflows.generation import AnswerKept, Generation
    from agentor_temporal.workflows.history_watch import (
        HistoryWatch,
        history_now,
        tasks_error,
        tasks_past,
    )
    from agentor_temporal.workflows.input_limits import (
        calls_problem,
        depth_problem,
        input_problem,
    )
    from agentor_temporal.workflows.journaling import Journal
    from agentor_temporal.workflows.observer import RunObserver
    from agentor_temporal.workflows.payloads import fields_of
    from agentor_temporal.workflows.refusals import counted, refusal
    from agentor_temporal.workflows.request_ids import query_refusal
    from agentor_temporal.workflows.run_input import NO_INPUT, decoded, validated_input
    from agentor_temporal.workflows.segment import LocalSpec, Setup, describe_continued, set_names
    from agentor_temporal.workflows.stream_window import PollGuard, StreamWindow, guard_publish
    from agentor_temporal.workflows.task_answers import TaskAnswers
    from agentor_temporal.workflows.tool_calls import CallFailed, ToolCalls, TurnCancelled
    from agentor_temporal.workflows.types import (
        AgentRunInput,
        AgentSpec,
        PausedState,
    )
    from agentor_temporal.workflows.versions import adopted, level

#: The `run_end` error of a run that was cancelled.
CANCELLED = "The run was cancelled; resume(run_id) continues it."


# Outside the sandbox. Only this package's code runs in the workflow (a user's
# tools, hooks and approvals run in activities and clients), and its modules
# are passed through the sandbox anyway, so the sandbox isolated nothing here;
# what it did cost was a quarter of the worker's Python CPU per run (it runs
# code through `exec` for every activation and for every payload the SDK
# encodes or decodes: 48 per seed run). Its determinism checks are kept by
# tests that run and replay this workflow inside the sandbox
# (tests/integration/test_goldens.py).
@workflow.defn(name=policies.WORKFLOW_TYPE, sandboxed=False)
class AgentRunWorkflow(Continuing):
    """One segment of an agent run; the workflow id is the run id."""

    @workflow.init
    def __init__(self, raw: RawValue = NO_INPUT) -> None:
        # every recorded event is also published here, so clients can follow a
        # run live (and the worker's activities can add text deltas)
        value = decoded(raw)
        #: signals this execution took, of every name (`_signalled`), and their bytes
        self.signals = 0
        self.signal_bytes = 0
        #: updates this execution accepted (`PauseWatch` counts them with the signals)
        self.updates = 0
        #: refusals kept (`decision_refused`) that `counted` left out of `updates`
        self._refusals_uncounted = 0
        #: what the execution's first workflow task saw: bytes, events (`history_now`)
        info = workflow.info()
        self.first_history = (info.get_current_history_size(), info.get_current_history_length())
        #: signals the run could not read and dropped (`_unreadable_signal`)
        self._unreadable = 0
        # every signal comes to `_other_signal`, its arguments as sent: set before
        # the stream, it takes the signals the first activation buffered too
        workflow.set_dynamic_signal_handler(self._other_signal)
        self._stream = WorkflowStream(stream_state(value))
        self._publish = guard_publish(self._signalled)
        #: the update answers of a workflow task share one budget (its completion's)
        self._answers = TaskAnswers()
        PollGuard(self._stream, self._answers).install()
        self._journal = Journal(
            self._stream.topic(policies.EVENTS_TOPIC), StreamWindow(self._stream)
        )
        self._approvals = Approvals()
        # before any update handler or validator runs (see `decisions_in`)
        self._approvals.restore(decisions_in(value))
        self._approvals.carried = handed_outcomes(value)
        #: the run's behaviour level (`versions`); 0 until its spec is recorded
        self.behaviour = 0
        # spans, search attributes and metrics follow the recorded events
        self._observer = RunObserver()
        self._journal.listeners.append(self._observer.on_event)
        self._tools = ToolCalls(self._journal, self._approvals, self._observer.trace)
        self._generation = Generation(self._journal, self._observer.trace)
        self._spec: AgentSpec | None = None
        self._agent = ""
        self._status = "running"
        self._turn = 0
        #: usage spent before this segment, and in it
        self._prior = Usage()
        self._usage = Usage()
        #: set when the run is about to close; releases waiting handlers
        self._closing = False
        #: whether requests may go by reference (versions.adopted, asked once)
        self._refs: bool | None = None
        #: whether new events go with the next request (versions.adopted, asked once)
        self._fold: bool | None = None
        self._history: HistoryGauge | None = None
        self._executions = 1
        #: an execution before this one in its line began with a reset (`Carry.reset`)
        self.reset_line = False
        self._whole_run = False
        #: the run's time limit, when it was started with one (`policies.DEADLINE_SETTLES`)
        self._deadline: Deadline | None = None
        #: set when the run stopped itself at its time limit: its `run_end` error
        self._out_of_time: str | None = None
        #: set when the run stopped itself mid-turn, its history near Temporal's
        #: limits (`policies.HISTORY_STOPS_SHORT`): its `run_end` error
        self._overgrown: str | None = None
        #: the turn whose model request is in flight, if one is
        self._asking: int | None = None
        #: signals and updates its tools' wait took, once past PAUSED_WAIT_TASKS
        self._tasks_taken: int | None = None
        #: the turn whose request was in flight when the run was stopped, and what
        #: became of it (`policies.GENERATION_KEPT`): its answer recorded, or not
        self._stopped_asking: int | None = None
        self._answer_kept = False

    #: this worker's spec for an agent, set on each run by the worker's
    #: interceptor (`agentor_temporal._local_spec`); None: the describe step
    #: is always asked
    local_spec: LocalSpec | None = None
    #: whether the worker's payloads keep their metadata (no codec, no external
    #: storage): a closing run may then put its last events in its result
    plain_results = False
    #: `plain_results` as the execution's first workflow task recorded it (`run`)
    results_kept = False

    # -- queries and updates -----------------------------------------------------

    @workflow.query(name="events")
    def events(self, after: Any = 0) -> list[dict[str, Any]]:
        """The run's events from position `after` (this segment's are held here).

        A page: at most `policies.EVENTS_QUERY_BYTES` of them (at least one), as
        gRPC refuses an answer past 4 MB; ask again from the position after the
        last (the `state` query's `events` is where they end). This execution
        holds the events from `state`'s `offset` on (a run continued as new):
        an `after` below it answers from `offset`, so the page after begins at
        `max(after, offset)` plus the page's length.
        """
        if isinstance(after, bool) or not isinstance(after, int):
            raise ApplicationError(
                "The events query takes after, the whole-run position of the first event "
                f"wanted (an integer; 0 for all): got {fit(repr(after), 60)}",
                type="BadQuery",
            )
        return self._journal.after(after, policies.EVENTS_QUERY_BYTES)

    @workflow.query(name="state")
    def state(self) -> dict[str, Any]:
        """Where the run stands: status, turn, agent, model and event count.

        The status is "awaiting_approval" while a call waits for a person (as
        the run's AgentStatus says), and the history numbers are those of the
        workflow task the run last took. `unreadable_signals` counts the signals
        this execution dropped unread (a `decide_signal` with no argument, one
        that does not decode, or one naming no request id of 1 to 64 characters:
        no `signalled_decision` query can read what it came to).
        """
        status = self._status
        if status == "running" and self._approvals.awaiting:
            status = "awaiting_approval"
        # reading the workflow info is no command; a query changes no state
        history = (
            HistoryGauge.now() if status in ("running", "awaiting_approval") else self._history
        )
        return {
            "status": status,
            "turn": self._turn,
            "agent": self._agent,
            "model": self._spec.model if self._spec else None,
            "offset": self._journal.offset,
            "events": self._journal.position,
            "execution": self._executions,
            "history_bytes": history.bytes if history else None,
            "history_events": history.events if history else None,
            "continue_as_new_suggested": history.suggested if history else None,
            "unreadable_signals": self._unreadable,
        }

    def _paused(self) -> bool:
        if not self._approvals.awaiting or self._tools.running:
            return False
        # a call whose predicate is still being asked may wait for a person too:
        # the pause is reported once the turn's calls are all waiting or done
        return not self._approvals.checking or level() < policies.WHOLE_PAUSE

    @workflow.update(name="wait_paused")
    async def wait_paused(self) -> dict[str, Any]:
        """Return once the run waits only for people (or has ended): a `PausedState`'s fields.

        Given as a dict (`payloads.fields_of`), the same JSON: the SDK copied a
        `PausedState` item by item before encoding it, over a second for a
        turn of 500 calls with long arguments.
        """
        self.updates += 1
        await workflow.wait_condition(lambda: self._closing or self._paused())
        paused = self._pause()
        if paused is None:
            return fields_of(PausedState(self._status))  # "continued_as_new": ask the next
        # every caller waiting is answered in this one task: they share its budget
        return fields_of(self._answers.pause(paused))

    @workflow.query(name="paused")
    def paused(self) -> dict[str, Any] | None:
        """The run's pause if it waits only for people now (a `PausedState`'s fields), else None.

        A caller asks this first: an update is two history events and a
        workflow task, and a caller polling a paused run with `resume` once a
        second would otherwise grow its history without end.
        """
        paused = self._pause()
        return None if paused is None else fields_of(paused)

    def _pause(self) -> PausedState | None:
        if self._paused() and not self._closing:
            return PausedState("awaiting_approval", list(self._approvals.awaiting.values()))
        return None

    @workflow.update(name="decide")
    def decide(self, decision: RawValue = NO_INPUT) -> dict[str, Any]:
        """Approve or deny one waiting tool call (a `Decision`); the first decision wins."""
        self.updates += 1
        info = workflow.current_update_info()
        update_id = info.id if info is not None else None
        # sent again under its id after the run continued as new (taken by signal before)
        carried = self._approvals.carried_outcome(update_id)
        if carried is not None:
            return carried
        return self._approvals.take(
            sent_decision(None if decision is NO_INPUT else decision), update_id
        )

    @decide.validator
    def _validate_decision(self, decision: RawValue = NO_INPUT) -> None:
        info = workflow.current_update_info()
        if self._approvals.carried_outcome(info.id if info is not None else None) is not None:
            return  # answered with what it came to (a carried refusal raised again)
        self._approvals.check(sent_decision(None if decision is NO_INPUT else decision))

    @workflow.update(name=policies.REFUSED_DECISION_UPDATE)
    def decision_refused(self, sent: RawValue = NO_INPUT) -> None:
        """Keep a decision's refusal under the decision's own id (`refusals`): it fails
        with it, an outcome Temporal keeps, so the decision sent again is refused again."""
        if counted(self._refusals_uncounted, self._approvals.taken):
            self.updates += 1
        else:
            self._refusals_uncounted += 1
        said = refusal(sent)
        info = workflow.current_update_info()
        if info is not None:
            # carried on as new (`carried_outcomes`): refused again executions later too
            self._approvals.refusals[info.id] = {"refused": said, "type": "DecisionRefused"}
        raise ApplicationError(said, type="DecisionRefused", non_retryable=True)

    @decision_refused.validator
    def _validate_refusal(self, sent: RawValue = NO_INPUT) -> None:
        refusal(sent)

    def decide_signal(self, value: Any) -> None:
        """`decide` for a sender Temporal refused the update: {"request_id", "decision"}."""
        self._signalled()
        dropped = self._approvals.take_signalled(value)
        if dropped is not None:
            # no query can read what it came to: said and counted, not dropped in silence
            self._unreadable += 1
            workflow.logger.warning(
                "Dropped a 'decide_signal' signal the run cannot answer: %s", dropped
            )

    def _other_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal, its arguments as sent: `decide_signal`, the stream's publish, the rest.

        Set in `__init__` before the stream is built, not declared on the class:
        the SDK routes a signal when it is applied, before `__init__`, and calls a
        named handler with the arguments that came, decoded by its hints: a
        `decide_signal` or publish sent with none or with two raised in the
        handler, failing every workflow task of the run, and one that did not
        decode was dropped uncounted. Here a signal the run has no use for, or
        cannot read, is counted (`_signalled`), then dropped. Each signal's
        bytes are counted too (`history_now`).
        """
        self.signal_bytes += sum(arg.payload.ByteSize() for arg in args)
        if name == policies.STREAM_PUBLISH_SIGNAL:
            if not self._publish(args):
                self._unreadable_signal(name)
            return
        if name == policies.DECIDE_SIGNAL:
            try:
                if len(args) != 1:
                    raise ValueError(f"{len(args)} arguments")
                value = workflow.payload_converter().from_payload(args[0].payload)
            except Exception:
                self._unreadable_signal(name)
                return
            self.decide_signal(value)
            return
        self._signalled()

    def _unreadable_signal(self, name: str) -> None:
        """A signal sent without the one argument the run reads, or one it cannot decode.

        Counted from `policies.PATCH_UNREADABLE_SIGNALS` on (before, the SDK dropped
        one that did not decode, uncounted), and a warning names it.
        """
        self._unreadable += 1
        workflow.logger.warning(
            "Dropped a %r signal the run cannot read: it takes one JSON argument", name
        )
        if workflow.patched(policies.PATCH_UNREADABLE_SIGNALS):
            self._signalled()

    def _signalled(self) -> None:
        """Count a signal the execution took: Temporal refuses them past 10,000.

        Every signal handler calls it (the stream's publish too, `guard_publish`),
        so a run waiting for a person stops short of the cap (`Approvals.gate`).
        """
        self.signals += 1

    # named to sort after `events`: the Temporal UI's Queries tab offers the first by name
    @workflow.query(name="signalled_decision")
    def signalled_decision(self, request_id: Any = None) -> dict[str, Any] | None:
        """What the decision sent by signal with this request id came to, once taken.

        {"decided": the decided request} or {"refused": why, "type": the
        refusal's error type}; None until the signal is taken.
        """
        if not isinstance(request_id, str):
            raise ApplicationError(
                "The signalled_decision query takes request_id, the text the decide_signal "
                f"named: got {fit(repr(request_id), 60)}",
                type="BadQuery",
            )
        refusal = query_refusal(request_id)
        if refusal is not None:
            raise ApplicationError(refusal, type="BadQuery")
        return self._approvals.signalled_outcome(request_id)

    # -- the loop --------------------------------------------------------------

    @workflow.run
    async def run(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """Run the agent loop to a final answer, a budget, or a failure."""
        # in the first workflow task, before any local activity (`results_kept`)
        self.results_kept = results_kept(self.plain_results)
        inp = validated_input(raw)
        self._whole_run = inp.fork is None and inp.carry is None and not inp.event_offset
        seg = await self._begin(inp)
        spent = self._prior + self._usage  # the usage carried over, after continue-as-new
        with self._observer.begin(seg.spec, inp, workflow.info().workflow_id, spent):
            # only a resume sets it (never an input recorded before it existed),
            # so recorded histories replay unchanged
            for data in inp.recovered or []:
                self._journal.record(Event.from_dict(data))
            if inp.fork is not None:
                self._journal.record_fork(inp.fork)
                if inp.fork.snapshot:
                    # a finished parent, forked without input: Agentor returns
                    # the copy as it is, with no model request
                    self._observer.status.settle("completed")
                    return await self._close(
                        "completed",
                        seg,
                        text=inp.fork.final_output,
                        details=f"Fork of {inp.fork.run_id}: a snapshot of its finished run",
                    )
            try:
                return await self._within_limit(inp, seg)
            except asyncio.CancelledError as exc:
                # a cancelled run says so in its log, then closes as cancelled;
                # `resume` continues it like any run that did not complete.
                # Patched: runs cancelled before this closed as completed.
                if not adopted(policies.PATCH_CLOSE_CANCELLED):
                    raise
                if isinstance(exc, TurnCancelled):
                    # the calls that ran are kept: resume goes on after them
                    for event in exc.results:
                        event.turn = self._turn
                        self._journal.record(event)
                if self._out_of_time is not None or self._overgrown is not None:
                    # stopped by its own time limit or history, not cancelled: it
                    # fails, resumable
                    return await self._end(
                        "failed", seg, turn=self._turn or None, error=self._stop_error()
                    )
                await self._end(
                    "failed",
                    seg,
                    turn=self._turn or None,
                    error=self._stop_error(),
                    returning=False,
                )
                raise

    async def _within_limit(self, inp: AgentRunInput, seg: Setup) -> dict[str, Any]:
        """The loop; stopped as a cancel would, shortly before the run's time limit,
        or mid-turn when its history nears Temporal's limits (`policies.HISTORY_STOPS_SHORT`).

        Raises:
            asyncio.CancelledError: the run was cancelled, or stopped at its limit
                (`_out_of_time` set) or by its history (`_overgrown` set);
                `TurnCancelled` when its turn's calls are kept.
        """
        if level() >= policies.HISTORY_STOPS_SHORT:
            # around the turn's waits only: a run that never nears the limits
            # issues the commands it did before, in the same workflow tasks
            watch = HistoryWatch(self._grown_mid_turn, self._stop_grown)
            self._tools.watch = self._generation.watch = watch
        if level() >= policies.DEADLINE_SETTLES:
            self._deadline = run_deadline(seg.carry)
        if self._deadline is None:
            return await self._loop(inp, seg)
        self._tools.settle_by = self._deadline.settle_by.timestamp()
        self._generation.settle_by = self._tools.settle_by
        loop = asyncio.ensure_future(self._loop(inp, seg))
        left = (self._deadline.stop_at - workflow.now()).total_seconds()
        timer = asyncio.ensure_future(workflow.sleep(max(left, 0.0), summary="time limit"))
        try:
            await workflow.wait([loop, timer], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # the run is cancelled: its loop settles the turn, as it would unwrapped
            loop.cancel()
        if not loop.done() and timer.done():
            self._out_of_time = self._deadline.error(cut_off=self._asking)
            self._tools.stopped_by = "the run reached its time limit"
            loop.cancel()
        elif self._generation.out_of_time:
            # its local model request timed out at the limit's `settle_by` (the
            # timer unseen while the request held the workflow task): stopped by it
            self._out_of_time = self._deadline.error()
        if not timer.done():
            timer.cancel()
        return await loop

    def _grown_mid_turn(self) -> bool:
        """Whether the running loop's history passed what a run may grow to mid-turn.

        A run waiting for a person stops itself (`Approvals.gate`); a closing or
        continuing one is past the point where stopping could help.
        """
        if self._status != "running" or self._approvals.awaiting:
            return False
        size, events = history_now()
        if size > policies.PAUSED_HISTORY_BYTES or events > policies.PAUSED_HISTORY_EVENTS:
            return True
        # while its tools run (its model request's own text deltas are signals too)
        watch = self._tools.watch
        self._tasks_taken = None if self._asking or watch is None else tasks_past(watch.began)
        return self._tasks_taken is not None

    def _stop_grown(self) -> None:
        """Note why the run stops, before the watch cancels its wait (`HistoryWatch`)."""
        self._overgrown = self._grown_error()
        self._tools.stopped_by = "the run's history neared Temporal's limits"

    def _grown_error(self) -> str:
        """The `run_end` error of a run stopped by its history mid-turn."""
        if self._tasks_taken is not None:
            return tasks_error(self._tasks_taken)
        gauge = HistoryGauge.now()
        return (
            f"The run stopped mid-turn: its history reached {gauge.bytes / 1e6:.1f} MB and "
            f"{gauge.events:,} events (it stops at {policies.PAUSED_HISTORY_BYTES / 1e6:g} MB "
            f"or {policies.PAUSED_HISTORY_EVENTS:,} events; Temporal terminates a run at 50 MB "
            "or 51,200 events, and a run continues as new only between turns). Every signal "
            "or update sent to a run adds to its history: find what sent it so many. The "
            "calls that ran are recorded, and resume(run_id) continues it."
        )

    async def _loop(self, inp: AgentRunInput, seg: Setup) -> dict[str, Any]:
        spec = seg.spec
        if seg.carry is None:
            conversation = self._opening(inp, seg)
            failures = FailureBudget(spec.max_tool_failures)
            first = 1
        else:
            conversation = Conversation.from_dict(seg.carry.conversation)
            failures = FailureBudget(spec.max_tool_failures)
            failures.failures, failures.disabled = seg.carry.failures, seg.carry.disabled
            first = seg.carry.turn + 1
            self._tools.uses = CallUses(seg.carry.uses, seen=seg.carry.seen)
            # a carry from a build that kept no counts: its decisions name uses
            self._tools.uses.seed_keys(seg.carry.decisions)
        for turn in range(first, seg.budget + 1):
            if turn > first:
                stop = await self._maybe_continue(inp, seg, conversation, failures, turn - 1)
                if stop is not None:
                    return await self._end("failed", seg, turn=turn - 1, error=stop)
            self._turn = turn
            given = _given(inp) if turn == first and seg.carry is None else None
            gen = await self._generate(seg, conversation, failures.disabled, turn, given)
            if isinstance(gen, str):
                return await self._end("failed", seg, turn=turn, error=gen)
            conversation.append(assistant_message(gen.text, gen.calls))
            if not gen.calls:
                text = gen.text or ""
                usage = Usage.from_dict(gen.usage)
                self._journal.record(Event(type="message", text=text, turn=turn, usage=usage))
                return await self._end("completed", seg, turn=turn, text=text)
            # a fork of a run waiting for a person: the calls that ran there are answered
            known = _answered(inp) if given is not None else None
            try:
                results = await self._run_tools(seg, gen.calls, turn, failures.disabled, known)
            except (ApprovalExpired, CallFailed) as exc:
                if exc.results is not None:
                    # what the calls did stays: resume goes on after them
                    for event in exc.results:
                        event.turn = turn
                        self._journal.record(event)
                return await self._end("failed", seg, turn=turn, error=str(exc))
            for event in results:
                event.turn = turn
                self._journal.record(event)
                conversation.append(tool_message(event))
            withdrawn = failures.count(results)
            # after every result of the turn: a notice between tool messages
            # would split the answers to one assistant turn, which providers
            # reject; and none on the last turn, where no model reads it
            if turn < seg.budget:
                conversation.extend([failures.notice(name) for name in withdrawn])
        error = f"Reached max_turns ({seg.budget}) without a final answer."
        # no turn on this run_end, as Agentor writes it
        return await self._end("max_turns", seg, error=error)

    def _opening(self, inp: AgentRunInput, seg: Setup) -> Conversation:
        """Record the segment's `run_start`; return the conversation it opens."""
        spec, position = seg.spec, self._journal.position
        if inp.conversation is not None and self._refs_allowed():
            # a resumed conversation too large to send: history has its base
            conversation = Conversation.from_dict(inp.conversation)
            assert conversation.base is not None
            request = {
                "conversation": conversation.base.to_dict(),
                "messages": conversation.request(),
            }
            messages = None
        else:
            conversation = Conversation(initial_messages(spec.instructions, inp.input))
            request, messages = None, copy.deepcopy(conversation.tail)
        # a resumed run's calls so far: a call reusing one of their ids is a new use
        self._tools.uses.seed_messages(conversation.tail)
        for call_id, count in (inp.call_uses or {}).items():
            self._tools.uses.at_least(call_id, count)
        if inp.call_seen is not None:
            self._tools.uses.seen = SeenIds(inp.call_seen)
        self._journal.record(
            Event(
                type="run_start",
                agent=spec.name,
                model=spec.model,
                messages=messages,
                started_at=seg.started,
            ),
            request=request,
        )
        conversation.recorded(position)
        return conversation

    # -- steps -------------------------------------------------------------------

    async def _begin(self, inp: AgentRunInput) -> Setup:
        """Record the agent's spec and where this segment starts."""
        self._agent, self._journal.offset = inp.agent, inp.event_offset
        self._prior = Usage.from_dict(inp.prior_usage)
        carry = Carry.from_dict(inp.carry) if inp.carry is not None else None
        try:
            spec = self._spec = await describe_continued(
                inp.agent, inp.fingerprint, carry, self.local_spec
            )
            # what `versions.adopted` reads: the level this run was begun at
            self.behaviour = spec.behaviour
            # before any command: a name refused as a search attribute fails
            # the task that sets it. Asked only for such an input, so other
            # runs' histories replay unchanged.
            # first: measuring the size encodes the input, which a deep one breaks
            deep = depth_problem(inp) if carry is None else None
            if deep is not None and adopted(policies.PATCH_INPUT_DEPTH):
                raise ApplicationError(deep, type="InvalidInput", non_retryable=True)
            # a continued execution's tail is the run's own: it opened with checked input
            calls = calls_problem(inp) if carry is None else None
            if calls is not None and adopted(policies.PATCH_INPUT_CALLS):
                raise ApplicationError(calls, type="InvalidInput", non_retryable=True)
            problem = input_problem(inp, spec, opening=carry is None)
            if problem is not None and adopted(policies.PATCH_INPUT_LIMITS):
                raise ApplicationError(problem, type="InvalidInput", non_retryable=True)
        except ApplicationError:
            await self._release_handlers()
            raise
        set_names(spec, inp, self._observer.status.attributes)
        if carry is not None:
            self._turn, self._usage = carry.turn, Usage.from_dict(carry.usage)
            self._executions = carry.executions
            self.reset_line = carry.reset
            return Setup(spec, carry.budget, carry.started, inp.stream_text, carry)
        return Setup(
            spec=spec,
            budget=inp.max_turns or spec.max_turns,
            started=self._journal.opened(),
            stream_text=inp.stream_text,
        )

    async def _generate(
        self,
        seg: Setup,
        conversation: Conversation,
        disabled: list[str],
        turn: int,
        given: GenerateResult | None = None,
    ) -> GenerateResult | str:
        """Ask the model once and record the `generation`; a str is why the run fails.

        Raises:
            AnswerKept: the run was stopped meanwhile, and the answer recorded.
        """
        if self._history is None or turn == 1:
            self._history = HistoryGauge.now()
        workflow.set_current_details(
            f"Turn {turn} of {seg.budget}: asking {seg.spec.model} · {self._tokens()} tokens so far"
            f" · {self._history.describe()}"
        )
        self._asking = turn
        try:
            gen = await self._generation.ask(
                seg,
                conversation,
                disabled,
                turn,
                refs=self._refs_allowed,
                fold_allowed=self._journal_in_activities,
                given=given,
            )
        except AnswerKept as kept:
            self._usage = self._usage + Usage.from_dict(kept.answer.usage)
            self._answer_kept = True
            raise
        except asyncio.CancelledError:
            if level() >= policies.GENERATION_KEPT:
                self._stopped_asking = turn
            raise
        finally:
            self._asking = None
        if not isinstance(gen, str):
            self._usage = self._usage + Usage.from_dict(gen.usage)
        return gen

    def _stop_error(self) -> str:
        """The `run_end` error of a run cancelled or stopped at its time limit."""
        if level() < policies.GENERATION_KEPT:
            return self._out_of_time or CANCELLED
        kept = self._turn if self._answer_kept else None
        cut_off = self._stopped_asking if not self._answer_kept else None
        waited = self._generation.unanswered
        if self._out_of_time is not None and self._deadline is not None:
            return self._deadline.error(cut_off, kept=kept, waited=waited)
        if self._overgrown is not None:
            return self._overgrown + model_request(cut_off, kept=kept, waited=waited)
        return CANCELLED + model_request(cut_off, kept=kept, waited=waited)

    async def _run_tools(
        self,
        seg: Setup,
        calls: list[dict[str, Any]],
        turn: int,
        disabled: list[str],
        known: dict[int, Event] | None = None,
    ) -> list[Event]:
        """Record the turn's `tool_call`s, then run them (see `ToolCalls`)."""
        for call in calls:
            function = call.get("function") or {}
            try:
                preview = json.loads(function.get("arguments") or "{}")
            except ValueError:
                preview = None
            self._journal.record(
                Event(
                    type="tool_call",
                    name=function.get("name"),
                    args=preview if isinstance(preview, dict) else None,
                    call_id=call.get("id"),
                    turn=turn,
                )
            )
        running = ", ".join(
            call_summary(str(e.name), e.args) for e in self._journal.last(len(calls))
        )
        workflow.set_current_details(
            f"Turn {turn} of {seg.budget}: running {running} · {self._tokens()} tokens so far"
        )
        fold = self._journal_in_activities()
        if not fold or (
            # too large to ride with the first call: in history now, not with
            # the results (asked only then: older runs replay unchanged)
            self._journal.pending_bytes() > policies.MAX_FOLD_BYTES
            and adopted(policies.PATCH_TURN_ARGS_BUDGET)
        ):
            await self._journal.flush(seg.spec.name, seg.spec.mirror)
        return await self._tools.run_turn(seg.spec, calls, turn, disabled, fold=fold, known=known)


def _given(inp: AgentRunInput) -> GenerateResult | None:
    """The answer a stopped segment recorded and left for this one (`AgentRunInput.answer`)."""
    if inp.answer is None:
        return None
    answer = inp.answer
    return GenerateResult(
        text=answer.get("text"),
        reasoning=answer.get("reasoning"),
        calls=list(answer.get("calls") or []),
        # only an answer no segment recorded has it (`AgentRunInput.answer`)
        usage=dict(answer.get("usage") or {}),
        started_at=answer.get("started_at"),
        ended_at=answer.get("ended_at"),
    )


def _answered(inp: AgentRunInput) -> dict[int, Event] | None:
    """The results of `AgentRunInput.answer`'s calls that ran before (a fork's), by position."""
    results = (inp.answer or {}).get("results")
    if not results:
        return None
    return {i: Event.from_dict(e) for i, e in enumerate(results) if e is not None}
