"""Continuing a long run as new between turns, and the execution that carries it on.

A base of the workflow's class, sharing its state (continuing as new is one
way an execution ends, so it builds on `Closing`). The history budget, not
Temporal's own suggestion, decides when (`HistoryGauge`); what the next
execution takes over is the `Carry` in its input.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.approvals import Approvals
from agentor_temporal.workflows.budget import FailureBudget
from agentor_temporal.workflows.carried_outcomes import carried_outcomes
from agentor_temporal.workflows.carry import Carry, HistoryGauge, carried_decisions, emptied
from agentor_temporal.workflows.closing import Closing
from agentor_temporal.workflows.conversation import Conversation
from agentor_temporal.workflows.deadline import chain_expiry
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.run_ids import reset_execution
from agentor_temporal.workflows.segment import Setup
from agentor_temporal.workflows.tool_calls import ToolCalls
from agentor_temporal.workflows.types import AgentRunInput
from agentor_temporal.workflows.versions import adopted, level


class Continuing(Closing):
    """Continue-as-new between turns (`AgentRunWorkflow` sets the state below)."""

    _tools: ToolCalls
    _approvals: Approvals
    #: executions the run has had, this one included
    _executions: int
    #: whether requests may go by reference (versions.adopted, asked once)
    _refs: bool | None
    #: whether new events go with the next request (versions.adopted, asked once)
    _fold: bool | None

    async def _maybe_continue(
        self,
        inp: AgentRunInput,
        seg: Setup,
        conversation: Conversation,
        failures: FailureBudget,
        turn: int,
    ) -> str | None:
        """Continue as new if history is due for it; called between turns only.

        Between turns no tool is in flight and no approval waits; every event
        must also be in history (a journal step that failed is retried first)
        and requests must be able to go by reference. Otherwise the run goes
        on and asks again after the next turn.

        Returns:
            Why the run ends instead, when what it would carry over is more
            than one payload holds.
        """
        self._history = gauge = HistoryGauge.now()
        if not gauge.due(seg.history_budget) or self._tools.running or self._approvals.awaiting:
            return None
        # patched before any new command: runs recorded before this replay as they were
        if not adopted(policies.PATCH_CONTINUE_AS_NEW):
            return None
        await self._journal.flush(seg.spec.name, seg.spec.mirror)
        if not self._journal.settled:
            return None
        if not self._refs_allowed() or not conversation.switch():
            return None
        size = encoded_size(self._following(inp, seg, conversation, failures, turn))
        # asked only for such a carry: other runs' histories replay unchanged
        if size > policies.MAX_PAYLOAD_BYTES and adopted(policies.PATCH_CARRY_LIMIT):
            return (
                f"The run could not continue as new after turn {turn}: what it carries over "
                f"(the last turn's messages, and the calls and decisions it keeps) is "
                f"{size / 1e6:.1f} MB as Temporal encodes it, over the "
                f"{policies.MAX_PAYLOAD_BYTES / 1e6:.1f} MB it can hand on (Temporal accepts at "
                "most 2 MB in one payload). Have tools return less; a model reusing short "
                "call ids keeps it small."
            )
        workflow.set_current_details(
            f"Turn {turn} of {seg.budget}: continuing as new ({gauge.describe()})"
        )
        self._status = "continued_as_new"
        await self._release_handlers()
        workflow.continue_as_new(self._following(inp, seg, conversation, failures, turn))

    def _following(
        self,
        inp: AgentRunInput,
        seg: Setup,
        conversation: Conversation,
        failures: FailureBudget,
        turn: int,
    ) -> dict[str, Any]:
        """The next execution's input (JSON), carrying the run on after `turn`."""
        bounded = level() >= policies.BOUNDED_CARRY
        uses, seen = (
            self._tools.uses.compacted() if bounded else (dict(self._tools.uses.counts), None)
        )
        carry = Carry(
            turn=turn,
            budget=seg.budget,
            started=seg.started,
            conversation=conversation.to_dict(),
            usage=asdict(self._usage),
            failures=dict(failures.failures),
            disabled=list(failures.disabled),
            decisions=carried_decisions(self._approvals.decisions, bounded=bounded),
            uses=uses,
            seen=seen,
            stream=emptied(self._stream.get_state()),
            executions=self._executions + 1,
            reset=reset_execution(),
            # what the next execution goes on with if its worker is built otherwise
            # (by level from CARRIED_SPEC_TAKEN: asked after the journal step, the
            # patch could replay unknown, as `policies.CARRIED_SPEC_TAKEN` says)
            spec=asdict(seg.spec) if adopted(policies.PATCH_CARRIED_SPEC) else None,
        )
        if level() >= policies.OUTCOMES_CARRIED:
            carry.outcomes = (
                carried_outcomes(
                    self._approvals.carried,
                    {k: {"decided": v} for k, v in self._approvals.updated.items()},
                    self._approvals.refusals,
                    self._approvals.signalled_briefly,
                    self._approvals.signalled,
                )
                or None
            )
        if level() >= policies.DEADLINE_SETTLES:
            expiry = chain_expiry(seg.carry)
            carry.deadline = expiry.timestamp() if expiry is not None else None
        return AgentRunInput(
            agent=inp.agent,
            input=[],
            max_turns=inp.max_turns,
            event_offset=self._journal.position,
            prior_usage=asdict(self._prior),
            stream_text=seg.stream_text,
            carry=carry.to_dict(),
            # the next execution is described again: only by the same definition
            fingerprint=seg.spec.fingerprint or None,
        ).to_dict()

    def _journal_in_activities(self) -> bool:
        """Whether new events go with the next activity (runs recorded before journaled first)."""
        if self._fold is None:
            self._fold = adopted(policies.PATCH_JOURNAL_IN_ACTIVITIES)
        return self._fold

    def _refs_allowed(self) -> bool:
        """Whether requests may go by reference (runs recorded before could not)."""
        if self._refs is None:
            self._refs = adopted(policies.PATCH_CONVERSATION_REFS)
        return self._refs
