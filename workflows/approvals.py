"""`Approvals`: tool calls that wait for a person, and the decisions taken.

A call of a tool with `requires_approval` records an `approval_request`,
then waits durably (a workflow condition, optionally with a timeout) until
the `decide` update brings a `Decision`. The first decision on a call wins;
a second one, or one for a call that is not waiting, is refused with a
typed error the facade turns into `ValueError`.

A decision is addressed by call id, but a call id is not a call: models
reuse ids (see `call_uses`). So a decision is kept under the key of the use
of the id that was waiting when it was taken, and a call waits for a
decision under its own key: a later call reusing an id is never approved
or denied by the decision on an earlier one. (Runs recorded before this,
`policies.PATCH_CALL_USES`, keep deciding by call id as they did.)

A decision taken while its call waited is still addressed by call id,
though: one sent for turn 1's `call_0` but delivered after turn 3's `call_0`
began to wait (a person acting on what they read earlier, a client sending
again) would decide turn 3's call. So a decision may name the turn of the
call the person saw, and the `decide` validator refuses it when the call
with that id waiting is another turn's. Only the validator: a refused
update leaves nothing in history, whereas a handler refusing a decision an
older build took would make that build's histories replay differently.

A waiting run cannot continue as new, yet every signal or accepted update
sent to it adds history, which a client's retry loop can take to the size
at which Temporal terminates the run. So a run whose history passes
`policies.PAUSED_HISTORY_BYTES` or `PAUSED_HISTORY_EVENTS` while it waits
stops (`PauseOvergrown`), failed and resumable, as an expiry with "fail" does;
so does one whose execution took `PAUSED_SIGNALS` signals (Temporal refuses
the rest, the decisions sent by signal among them), and one that took
`PAUSED_WAIT_TASKS` signals and updates while it waited (a worker without the
run in its cache replays them all in one workflow task, see `pause_watch`).
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from agentor_temporal.store.events import Event
from agentor_temporal.workflows import policies, steady
from agentor_temporal.workflows.activity_types import ApprovalCheckInput
from agentor_temporal.workflows.call_uses import count_key, parse_key
from agentor_temporal.workflows.formatting import (
    DENIED_ANSWER,
    QUOTED_CHARS,
    SUMMARY_BYTES,
    call_summary,
    fit,
    printable,
    quoted,
)
from agentor_temporal.workflows.journaling import Journal
from agentor_temporal.workflows.pause_watch import PauseWatch, pause_overgrown, stopped_waiting
from agentor_temporal.workflows.payloads import plain
from agentor_temporal.workflows.request_ids import SIGNAL_SHAPE, request_id_problem
from agentor_temporal.workflows.types import Decision, ToolSpec
from agentor_temporal.workflows.versions import level

#: Waiting calls the run's current details name (the rest are counted).
DETAILS_CALLS = 10


def tool_wait(tool: ToolSpec, setting: str, extra: timedelta = timedelta(0)) -> timedelta | None:
    """A tool's `timeout` or `approval_timeout` (+ `extra`) as a timedelta; None when unset.

    A recorded spec may hold what the facade refuses now (inf, NaN, 1e20, a
    string: an older build, a tool changed after it was built), which a
    timedelta cannot hold: every workflow task of the run failed on it, for
    ever. Such a value ends the call (and the run) instead, naming the fix.
    (Only values that raised are refused: the others replay as recorded.)

    Raises:
        BadToolSetting: the value is none a run can wait for.
    """
    value = getattr(tool, setting)
    if not value:
        return None
    try:
        return timedelta(seconds=value) + extra
    except (TypeError, ValueError, OverflowError):
        raise BadToolSetting(
            f"Tool {tool.name!r} has {setting}={fit(repr(value), 100)}, which is not a number "
            f"of seconds a run can wait (a positive number up to {policies.MAX_WAIT_SECONDS:,}): "
            "fix the tool's definition on the workers, then resume(run_id)."
        ) from None


class BadToolSetting(Exception):
    """A tool's recorded time setting no timer can hold (`tool_wait`): its call cannot run."""


def signalled(value: Any) -> Decision:
    """The `Decision` a `decide_signal` carries, checked as the update's converter checks.

    Raises:
        ApplicationError: `BadDecision`, saying what is malformed.
    """
    if not isinstance(value, dict):
        raise ApplicationError("the decision must be an object", type="BadDecision")
    call_id, approved, turn = value.get("call_id"), value.get("approved"), value.get("turn")
    if not isinstance(call_id, str) or not call_id or not isinstance(approved, bool):
        raise ApplicationError(
            "a decision names a call (call_id, text) and says approved (true or false)",
            type="BadDecision",
        )
    if turn is not None and not isinstance(turn, int):
        raise ApplicationError("turn must be a positive integer", type="BadDecision")
    at = value.get("at")
    if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))):
        raise ApplicationError("at must be a time in seconds since the epoch", type="BadDecision")
    return Decision(call_id, approved, value.get("reason"), value.get("by"), turn, at)


#: what a decision is, for the messages refusing one that is not
DECISION_SHAPE = (
    'one object {"call_id": text, "approved": true or false, and optionally "reason" and '
    '"by" (text), "turn" (a positive integer), "at" (seconds since the epoch)}'
)


def sent_decision(raw: RawValue | None) -> Decision:
    """The `Decision` a `decide` update carries, read here, not by the SDK.

    The SDK decoded it by the handler's type before our code ran: a plain
    client's null reached the validator as None ("'NoneType' object has no
    attribute 'turn_problem'"), and a field of another type was refused as
    "Failed decoding arguments". Read the same way (the same converter and
    type), so an update accepted before reads as it did on replay.

    Args:
        raw: the update's one argument; None when it came with none.

    Raises:
        ApplicationError: `BadDecision`, naming what is wrong and the shape.
    """
    problem = "no decision came"
    if raw is not None:
        converter = workflow.payload_converter()
        try:
            value = converter.from_payload(raw.payload, Decision)
        except Exception:
            value = None
        if isinstance(value, Decision):
            return value
        try:
            signalled(converter.from_payload(raw.payload))
            problem = "one of its fields is not of its type"
        except ApplicationError as exc:
            problem = str(exc.message)
        except Exception:
            problem = "it is not JSON"
    raise ApplicationError(
        f"Run {workflow.info().workflow_id!r} refused the decision: {problem}; "
        f"send {DECISION_SHAPE}.",
        type="BadDecision",
    )


class ApprovalExpired(Exception):
    """An approval timed out on a tool whose timeout fails the run.

    `answer` is the expired call's `tool_result`; `results` (from
    `policies.EXPIRY_KEEPS_CALLS`) every call's of the turn, in the model's
    order, for the run to record before it ends.
    """

    def __init__(self, message: str, answer: Event | None = None) -> None:
        super().__init__(message)
        self.answer = answer
        self.results: list[Event] | None = None


class PauseOvergrown(ApprovalExpired):
    """The run waited for a person until its history neared Temporal's limits.

    Handled as an expiry that fails the run: the turn's calls are all
    answered (the waiting ones as not run) and the run ends, resumable.
    """


#: `error` of the result answering a call that waited for a person when its run failed
NOT_RUN = "run failed"


class Approvals:
    """Calls waiting for a person (`awaiting`) and the decisions taken (`decisions`)."""

    def __init__(self) -> None:
        #: call_id -> the approval request waiting for a person
        self.awaiting: dict[str, dict[str, Any]] = {}
        #: the current details' line for a waiting call, by call id (`details`)
        self._summaries: dict[str, str] = {}
        #: use key (`call_uses.use_key`) -> the decision taken on that use (first one wins)
        self.decisions: dict[str, Decision] = {}
        #: call_id -> the use key of its call waiting now, or of the latest that waited
        self.keys: dict[str, str] = {}
        #: call_id -> the turn of its call waiting now, or of the latest that waited
        #: in this execution (what a decision naming a turn is checked against)
        self.turns: dict[str, int] = {}
        #: request id -> what a decision sent by signal came to (`take_signalled`)
        self.signalled: dict[str, dict[str, Any]] = {}
        #: request id -> the same, in brief (`brief_outcome`), once past the latest
        #: SIGNALLED_DECISIONS_KEPT: in memory only, never in history
        self.signalled_briefly: dict[str, dict[str, Any]] = {}
        #: update or request id -> what a decision by update or signal came to, as an
        #: earlier execution of the run carried it (`carried_outcomes`): a decision
        #: sent again under it is answered with it
        self.carried: dict[str, dict[str, Any]] = {}
        #: update id -> a refusal serve had the run keep under it (`decision_refused`)
        self.refusals: dict[str, dict[str, Any]] = {}
        #: update id -> what the `decide` update sent under it took (`take`): rebuilt on
        #: replay, as accepted updates run again. Its sender may have been told
        #: Temporal refused it all the same, and then sends the decision by signal
        #: under that id (`take_signalled`), which must hear its own decision taken
        self.updated: dict[str, dict[str, Any]] = {}
        #: decisions this execution took, by update or signal (`refusals.counted`)
        self.taken = 0
        #: calls whose tool's predicate is being asked whether a person must decide
        self.checking = 0
        #: why no call waits for a person any more: the run is failing (`end_waiting`)
        self.ended: str | None = None
        #: whether the pause must stop for the run's history (`PAUSE_WATCHED_ONCE`)
        self._watch = PauseWatch()

    def restore(self, decisions: dict[str, Decision]) -> None:
        """Take the decisions an earlier execution of the run carried over."""
        self.decisions = dict(decisions)
        latest: dict[str, int] = {}
        for key in decisions:
            call_id, use = parse_key(key)
            if use >= latest.get(call_id, 0):
                latest[call_id], self.keys[call_id] = use, key

    def carried_outcome(self, request_id: str | None) -> dict[str, Any] | None:
        """What the decision sent under `request_id` came to in an earlier execution, by
        update or signal (None: none carried); a refusal raised again as it was
        (`ApplicationError`).

        Asked by the `decide` validator and handler with the update's id: serve
        sends a decision again under the id it sent it under, and the decision,
        taken by signal before the run continued as new, must not be taken anew
        for the call with that id waiting now (a later turn's).
        """
        outcome = self.carried.get(request_id) if request_id is not None else None
        if outcome is None:
            return None
        decided = outcome.get("decided")
        if isinstance(decided, dict):
            return decided
        raise ApplicationError(
            str(outcome.get("refused", "")), type=str(outcome.get("type") or "BadDecision")
        )

    def _key(self, call_id: str) -> str:
        # a long id decided in an earlier execution was carried by its digest
        return self.keys.get(call_id) or self.keys.get(count_key(call_id), call_id)

    def check(self, decision: Decision, *, replayed: bool = False) -> None:
        """The `decide` validator: refuse a decision the run cannot take (`ApplicationError`).

        Args:
            replayed: asked where replays ask it too (a decision sent by
                signal): the texts' encoded size is then checked only from
                `policies.BOUNDED_DECISION_BYTES` on. A validator never runs
                on replay, so it checks them for runs of every level.
        """
        run_id = workflow.info().workflow_id
        problem = decision.turn_problem()
        sized = not replayed or level() >= policies.BOUNDED_DECISION_BYTES
        if problem is None and sized:
            # types and characters first: their messages say more
            problem = decision.problem() or decision.size_problem()
        if problem is not None:
            raise ApplicationError(
                f"Run {run_id!r} refused the decision: {problem}.", type="BadDecision"
            )
        asked = self.turns.get(decision.call_id)
        if decision.turn is not None and asked is not None and asked != decision.turn:
            now = (
                f"the call with that id waiting now is turn {asked}'s"
                if decision.call_id in self.awaiting
                else f"the latest call with that id (turn {asked}'s) was decided"
            )
            raise ApplicationError(
                f"Run {run_id!r} is not waiting for turn {decision.turn}'s call "
                f"{decision.call_id!r}: {now}; nothing changed. Read the run's pending "
                "approvals and decide the call they show.",
                type="OtherTurn",
            )
        self._admissible(decision)

    def _admissible(self, decision: Decision) -> None:
        """What the handler checks again: two updates in one task both pass the validator."""
        run_id = workflow.info().workflow_id
        problem = decision.problem()
        if problem is not None:
            # refused by the validator: nothing of it reaches history
            raise ApplicationError(
                f"Run {run_id!r} refused the decision: {problem}.", type="BadDecision"
            )
        taken = self.decisions.get(self._key(decision.call_id))
        if taken is not None:
            verdict = "approved" if taken.approved else "denied"
            raise ApplicationError(
                f"Call {quoted(decision.call_id)} of run {run_id!r} was already {verdict}"
                f"{' by ' + printable(taken.by) if taken.by else ''}; the decision stands.",
                type="AlreadyDecided",
            )
        if decision.call_id not in self.awaiting:
            # quoted cut: the refusal goes back in the workflow task's completion,
            # and a megabyte id quoted whole made Temporal refuse that, task after task
            # and one that is not printable (a model's id holding a newline) quoted
            shown = [
                c if len(c) <= QUOTED_CHARS and c.isprintable() else quoted(c)
                for c in sorted(self.awaiting)
            ]
            waiting = ", ".join(shown) or "none"
            raise ApplicationError(
                f"Run {run_id!r} has no tool call {quoted(decision.call_id)} waiting for approval "
                f"(waiting: {waiting}).",
                type="UnknownCall",
            )

    def take(self, decision: Decision, update_id: str | None = None) -> dict[str, Any]:
        """Record a decision (checked again: two updates in one task both pass the validator).

        Not its turn: the validator did, and no turn can begin between it and
        this handler (that takes a model reply, so another workflow task). On
        replay validators do not run, and a build that ignored `turn` may have
        taken a decision naming another turn: it must replay as taken.

        Args:
            update_id: the id of the `decide` update bringing it, kept with
                what it took (`updated`).
        """
        self._admissible(decision)
        self.decisions[self._key(decision.call_id)] = decision
        self.taken += 1
        taken = {**self.awaiting[decision.call_id], "approved": decision.approved}
        if update_id is not None:
            self.updated[update_id] = taken
        return taken

    def take_signalled(self, value: Any) -> str | None:
        """The `decide_signal` handler: a decision sent when Temporal refused the update.

        Temporal caps an execution's updates (2,000 in all, 10 in flight), and
        every stream follower's poll is one: a run followed by many, or long,
        could take no decision by update any more, and waited for one for good.
        A signal is never refused for that, but answers nothing: what it came
        to is kept under the sender's request id, for the `signalled_decision`
        query. Checked as the update's validator and handler check, and a
        malformed one is refused, never raised (that would fail the task).

        Returns:
            Why the signal was dropped unread, when it was: it names no request id
            the run can keep its outcome under (`request_id_problem`), so no query
            can read what it came to; the caller says so. None otherwise.
        """
        if not isinstance(value, dict):
            return f"it takes {SIGNAL_SHAPE}, got {type(value).__name__}"
        request_id = value.get("request_id")
        problem = request_id_problem(request_id)
        if problem is not None or not isinstance(request_id, str):
            return f"{problem}; it takes {SIGNAL_SHAPE}"
        if request_id in self.signalled or request_id in self.carried:
            return None  # delivered twice (or again, after the run continued as new)
        if (
            "decided" in self.signalled_briefly.get(request_id, {})
            and level() >= policies.SIGNAL_REPEATS_KEPT
        ):
            # delivered twice, its outcome since kept in brief (a crowd deciding
            # meanwhile): checked again, it was refused as decided by its own
            # sender, and the refusal replaced what its sender must be told. (Only
            # a decision taken: one refused may be taken now, as it always was)
            return None
        try:
            decision = signalled(value.get("decision"))
            own = self.updated.get(request_id)
            if own is not None and own.get("call_id") == decision.call_id:
                # the sender's own update took it: Temporal admitted the update, lost
                # it (an execution's state reloaded under a crowd of updates: "aborted")
                # and refused its second sending for its cap on updates, while the
                # worker it had reached took it; the sender was told it came too late
                outcome: dict[str, Any] = {"decided": own}
            else:
                self.check(decision, replayed=True)
                outcome = {"decided": self.take(decision)}
        except ApplicationError as exc:
            outcome = {"refused": str(exc.message), "type": exc.type}
        self.signalled[request_id] = outcome
        while len(self.signalled) > policies.SIGNALLED_DECISIONS_KEPT:
            # its sender may not have asked yet: 150 people deciding a turn's calls
            # at once, those whose outcome was dropped asked "not taken yet" until
            # their patience ran out, then were told no worker took the decision
            oldest = next(iter(self.signalled))
            self.signalled_briefly[oldest] = brief_outcome(self.signalled.pop(oldest))
        return None

    def signalled_outcome(self, request_id: str) -> dict[str, Any] | None:
        """What the decision sent by signal under `request_id` came to; None until taken.

        The latest SIGNALLED_DECISIONS_KEPT whole, older ones in brief: an
        execution takes at most Temporal's 10,000 signals, so every sender's
        outcome is kept (a few hundred bytes each, in the worker's memory).
        """
        return (
            self.signalled.get(request_id)
            or self.signalled_briefly.get(request_id)
            or self.carried.get(request_id)
        )

    def end_waiting(self, why: str) -> None:
        """The run fails: calls waiting for a person are answered as not run.

        A decision sent from now on is refused (no call waiting), never taken
        for a call that will not run.
        """
        self.ended = why
        self.awaiting.clear()

    def _not_run(self, name: str, args: dict[str, Any], call_id: str) -> Event:
        return Event(
            type="tool_result",
            name=name,
            args=args,
            call_id=call_id,
            error=NOT_RUN,
            result=f"Error: the run failed before this call was decided ({self.ended}); "
            "it did not run.",
        )

    def details(self) -> str:
        """The run's current details while calls wait: what for, by call id.

        The first `DETAILS_CALLS` only, each summarised once: every call that
        begins to wait sets the details again, and naming every call cost a turn
        of 400 such calls 80,000 summaries in one workflow task, past the SDK's
        2 s deadlock limit (the task failed on every retry and the run hung).
        """
        if len(self._summaries) > 2 * len(self.awaiting) + DETAILS_CALLS:
            self._summaries = {k: v for k, v in self._summaries.items() if k in self.awaiting}
        shown = []
        for r in itertools.islice(self.awaiting.values(), DETAILS_CALLS):
            call_id = r["call_id"]
            if call_id not in self._summaries:
                self._summaries[call_id] = (
                    f"{call_summary(r['tool'], r['args'])} [{fit(call_id, SUMMARY_BYTES)}]"
                )
            shown.append(self._summaries[call_id])
        more = len(self.awaiting) - len(shown)
        waiting = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
        return f"**Waiting for approval:** {waiting}"

    async def gate(
        self,
        journal: Journal,
        agent: str,
        mirror: bool,
        tool: ToolSpec,
        args: dict[str, Any],
        call_id: str,
        turn: int,
        fingerprint: str = "",
        key: str | None = None,
    ) -> Event | None:
        """Wait durably for a person; None means approved (run the tool).

        Returns the `tool_result` that answers the model when the call is
        denied or its approval expired (on_approval_timeout="deny").

        Args:
            key: the call's use key: only a decision taken while this call
                waits decides it. None: decided by call id (runs recorded
                before `PATCH_CALL_USES`).

        Raises:
            ApprovalExpired: when the approval expired and the tool says "fail".
        """
        name = tool.name
        if tool.approval == "predicate":
            self.checking += 1
            try:
                needed = await self._needed(agent, name, args, fingerprint)
            finally:
                self.checking -= 1
            if not needed:
                return None
        if self.ended is not None:
            # the run failed while the predicate was asked: nobody is asked now
            return self._not_run(name, args, call_id)
        timeout = tool_wait(tool, "approval_timeout")
        requested = journal.now()
        journal.record(
            Event(
                type="approval_request",
                name=name,
                args=args,
                call_id=call_id,
                turn=turn,
                started_at=requested,
            )
        )
        self.awaiting[call_id] = {"call_id": call_id, "tool": name, "args": args, "turn": turn}
        self._summaries.pop(call_id, None)  # another call with this id may have waited
        self.turns[call_id] = turn
        if key is not None:
            self.keys[call_id] = key
            # no decision under this key can be this call's: it was not waiting yet
            self.decisions.pop(key, None)
        decided_by = key if key is not None else call_id
        workflow.set_current_details(self.details())
        decision: Decision | None = None
        watched = level() >= policies.PAUSE_WATCHED_ONCE
        if watched:
            self._watch.start(lambda: bool(self.awaiting) and self.ended is None)
        try:
            await journal.flush(agent, mirror)
            await workflow.wait_condition(
                lambda: (
                    decided_by in self.decisions
                    or self.ended is not None
                    or (self._watch.why if watched else pause_overgrown()) is not None
                ),
                timeout=timeout,
            )
            decision = self.decisions.get(decided_by)
            if decision is None:
                # `end_waiting`: the run fails, and this call is not decided
                self.awaiting.pop(call_id, None)
                # from PAUSE_COUNTS_TASKS the watcher's reason, which counts the
                # wait's own tasks too
                tasks = watched and level() >= policies.PAUSE_COUNTS_TASKS
                overgrown = None
                if self.ended is None:
                    overgrown = self._watch.why if tasks else pause_overgrown()
                if overgrown is not None:
                    # the first call to see it ends every call's wait; the
                    # other calls waiting are answered as not run
                    self.end_waiting(overgrown)
                    raise PauseOvergrown(
                        stopped_waiting(overgrown, by_tasks=tasks and self._watch.by_tasks),
                        self._not_run(name, args, call_id),
                    )
                return self._not_run(name, args, call_id)
        except asyncio.TimeoutError:
            pass
        except asyncio.CancelledError:
            if level() >= policies.CANCEL_ENDS_WAITING:
                # the run was cancelled: the call is answered as not run, and a
                # decision sent now is told it waits no more (not "approved")
                self.awaiting.pop(call_id, None)
            raise
        # pop, not del: two calls sharing an id in one turn (runs recorded
        # before PATCH_CALL_USES) both waited under it
        self.awaiting.pop(call_id, None)
        workflow.set_current_details(
            self.details() if self.awaiting else f"Turn {turn}: running tools"
        )
        decided = self._decided_at(journal, tool, requested, decision)
        if decision is None:
            return self._expired(journal, tool, args, call_id, decided_by, turn, requested, decided)
        journal.record(
            Event(
                type="approval_decision",
                name=name,
                args=args,
                call_id=call_id,
                turn=turn,
                status="approved" if decision.approved else "denied",
                text=decision.reason,
                result=decision.by,
                started_at=requested,
                ended_at=decided,
            )
        )
        if decision.approved:
            return None
        return denied_answer(name, args, call_id, decision.by, decision.reason)

    async def _needed(
        self, agent: str, name: str, args: dict[str, Any], fingerprint: str = ""
    ) -> bool:
        """Ask the worker whether the tool's predicate wants a person for this call."""
        try:
            needed: bool = await steady.local(
                workflow.start_local_activity(
                    policies.NEEDS_APPROVAL,
                    plain(
                        ApprovalCheckInput(
                            agent=agent, name=name, args=args, fingerprint=fingerprint
                        )
                    ),
                    result_type=bool,
                    start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
                    retry_policy=policies.LOCAL_RETRY_POLICY,
                    summary=fit(f"needs approval? {call_summary(name, args)}", SUMMARY_BYTES),
                )
            )
        except (ActivityError, ApplicationError, TemporalTimeoutError):
            # local activity failures arrive unwrapped; a predicate that
            # cannot decide asks a person
            needed = True
        return needed

    @staticmethod
    def _decided_at(
        journal: Journal, tool: ToolSpec, requested: float, decision: Decision | None
    ) -> float:
        """When the call was decided: the person's own time, or the approval's deadline.

        Both are in history (the decision's input, the tool's timeout), so a
        retried workflow task stamps the decision as its first attempt did.
        The sender's time is taken no earlier than the request and no later
        than the task taking it (a clock far ahead would stamp every later
        event of the run after it). A decision from a sender that gives no
        time is stamped when its task started.
        """
        now = workflow.now().timestamp()
        if level() < policies.STABLE_EVENT_TIMES:
            return now
        if decision is None and tool.approval_timeout:
            return requested + tool.approval_timeout
        if decision is not None and decision.at is not None:
            return max(requested, min(decision.at, now))
        return max(journal.now(), now)

    def _expired(
        self,
        journal: Journal,
        tool: ToolSpec,
        args: dict[str, Any],
        call_id: str,
        key: str,
        turn: int,
        requested: float,
        decided: float,
    ) -> Event:
        assert tool.approval_timeout is not None
        message = f"no decision within {tool.approval_timeout:g} s"
        # a decision arriving now is refused: the timeout already decided
        self.decisions[key] = Decision(call_id, False, message, "timeout")
        journal.record(
            Event(
                type="approval_decision",
                name=tool.name,
                args=args,
                call_id=call_id,
                turn=turn,
                status="expired",
                text=message,
                started_at=requested,
                ended_at=decided,
            )
        )
        answer = Event(
            type="tool_result",
            name=tool.name,
            args=args,
            call_id=call_id,
            error="approval expired",
            result=f"Error: the call was not approved ({message}).",
        )
        if tool.on_approval_timeout == "fail":
            raise ApprovalExpired(
                f"Approval of {call_summary(tool.name, args)} expired: {message}", answer
            )
        return answer


def brief_outcome(outcome: dict[str, Any]) -> dict[str, Any]:
    """A decision-by-signal's outcome without what may be large: the call's args, and a
    refusal's message past REFUSAL_CHARS (it lists the calls waiting)."""
    decided = outcome.get("decided")
    if isinstance(decided, dict):
        return {"decided": {k: v for k, v in decided.items() if k != "args"}}
    refused = str(outcome.get("refused", ""))
    if len(refused) > REFUSAL_CHARS:
        refused = refused[:REFUSAL_CHARS] + "..."
    return {**outcome, "refused": refused}


#: how much of a refusal's message a brief outcome keeps
REFUSAL_CHARS = 500


def denied_answer(name: str, args: Any, call_id: Any, by: str | None, reason: str | None) -> Event:
    """The `tool_result` of a call a person denied (`by`, for `reason`), as the model reads it.

    Also what a fork of a run waiting for a person keeps for such a call
    (`agentor_temporal._history_answers`), from its `approval_decision`.
    """
    who = f" ({by})" if by else ""
    why = f": {reason}" if reason else ""
    return Event(
        type="tool_result",
        name=name,
        args=args,
        call_id=call_id,
        error="denied",
        result=f"{DENIED_ANSWER}{who}{why}. Do not call it again "
        "for the same purpose; answer without it or explain what you cannot do.",
    )
