"""What a closed execution's decisions came to, read from its history, for its resume.

A decision named by its sender (serve's Idempotency-Key, an A2A messageId) is
sent again under that name when its answer was lost. The execution that took
it answers it with what it came to: Temporal keeps an update's outcome with
its execution, and one taken by signal (`decide_signal`, a run past Temporal's
updates) is kept in the execution's memory (`Approvals.signalled`). A run
cancelled, failed or terminated and then resumed starts an execution of its
own, which knew none of them: the decision sent again was taken there for the
call waiting under that id, a later turn's reusing it (`call_0`), which nobody
had seen, and it ran.

So resume reads them here and hands them to the execution it starts
(`AgentRunInput.outcomes`, read as `carried_outcomes` are): the outcomes the
closed execution was itself handed, its `decide` and `decision_refused`
updates' outcomes as Temporal recorded them, and the request ids of its
decision signals. A signal's outcome is not in history (the workflow kept
it in memory), so a decision sent again under one of those ids is refused,
saying it was taken before the run was resumed: never taken anew.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.api.enums.v1 import EventType

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.carried_outcomes import handed_outcomes
from agentor_temporal.workflows.request_ids import request_id_problem

Decode = Callable[[Any], Awaitable[Any]]

#: the `decide` update's name (`AgentRun.decide`)
_DECIDE_UPDATE = "decide"

#: the refusal a decision sent by signal to a closed execution is answered with after
#: a resume: what it came to there is not in history
SIGNALLED_BEFORE = (
    "This decision was sent to the run before it was resumed, and that execution "
    "took it (or refused it) then; it is not taken again. Read the run's pending "
    "approvals and decide the calls they show."
)


class OutcomeReader:
    """Gathers a closed execution's decision outcomes as its history is read."""

    def __init__(self) -> None:
        #: request id -> outcome, oldest first (`Carry.outcomes`' shape)
        self.outcomes: dict[str, dict[str, Any]] = {}
        #: update id -> name, of the updates the execution accepted
        self._names: dict[str, str] = {}

    def read_all(self, raw_input: Any) -> dict[str, dict[str, Any]]:
        """All the execution's outcomes, oldest first: those it was handed (by
        continue-as-new or by a resume: `raw_input`), then its own."""
        merged = handed_outcomes(raw_input)
        for request_id, outcome in self.outcomes.items():
            merged.pop(request_id, None)
            merged[request_id] = outcome
        return merged

    async def read(self, event: Any, decode: Decode) -> None:
        """Take one history event (any kind: those that are no decision are passed over)."""
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name != policies.DECIDE_SIGNAL or not attrs.input.payloads:
                return
            try:
                value = await decode(attrs.input.payloads[0])
            except Exception:
                return  # unreadable: the run dropped it too
            request_id = value.get("request_id") if isinstance(value, dict) else None
            if isinstance(request_id, str) and request_id_problem(request_id) is None:
                # its first delivery is what it came to; a repeat changes nothing
                self.outcomes.setdefault(
                    request_id, {"refused": SIGNALLED_BEFORE, "type": "DecidedBefore"}
                )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = event.workflow_execution_update_accepted_event_attributes
            request = accepted.accepted_request
            self._names[request.meta.update_id] = request.input.name
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            completed = event.workflow_execution_update_completed_event_attributes
            update_id = completed.meta.update_id
            name = self._names.get(update_id)
            if name not in (_DECIDE_UPDATE, policies.REFUSED_DECISION_UPDATE):
                return
            if request_id_problem(update_id) is not None:
                return
            outcome = completed.outcome
            if outcome.HasField("failure"):
                failure = outcome.failure
                kind_name = failure.application_failure_info.type or "BadDecision"
                self.outcomes[update_id] = {"refused": failure.message, "type": kind_name}
            elif outcome.success.payloads:
                try:
                    decided = await decode(outcome.success.payloads[0])
                except Exception:
                    return
                if isinstance(decided, dict):
                    self.outcomes[update_id] = {"decided": decided}
