"""How an execution of `AgentRunWorkflow` ends: its `run_end`, its events kept, its outcome.

A base of the workflow's class, sharing its state: `agent_run` keeps the
loop, this the end. A run closing with no mirror on its worker puts its last
events in its result's payload instead of a journal step
(`policies.JOURNAL_IN_RESULT`); that is decided once per execution, and a
refusal is recorded where a replay reads it (`PATCH_JOURNAL_AT_CLOSE`).
"""

from __future__ import annotations

from typing import Any, cast

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from agentor_temporal.store.events import Event, Usage
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.carry import HistoryGauge
from agentor_temporal.workflows.formatting import plural
from agentor_temporal.workflows.journaling import Journal, whole_log
from agentor_temporal.workflows.journaling import in_result as in_result_payload
from agentor_temporal.workflows.segment import Setup
from agentor_temporal.workflows.types import AgentSpec, RunOutcome
from agentor_temporal.workflows.versions import level


class Closing:
    """The end of an execution (`AgentRunWorkflow` sets the state below)."""

    _journal: Journal
    _stream: WorkflowStream
    #: set when the run is about to close; releases waiting handlers
    _closing: bool
    _status: str
    _turn: int
    #: usage spent before this segment, and in it
    _prior: Usage
    _usage: Usage
    _history: HistoryGauge | None
    #: whether the worker's payloads keep their metadata (no codec, no external
    #: storage): a closing run may then put its last events in its result
    plain_results: bool
    #: `plain_results` as the execution's first workflow task recorded it
    #: (`results_kept`): what a closing run decides by, whichever worker closes it
    results_kept: bool
    #: whether this execution holds the run's whole log (a new run's only one)
    _whole_run: bool

    def _tokens(self) -> int:
        return (self._prior + self._usage).total_tokens

    async def _release_handlers(self) -> None:
        """Let followers' polls and pause-waiters return before the run closes."""
        self._closing = True
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _end(
        self,
        status: str,
        seg: Setup,
        *,
        turn: int | None = None,
        text: str | None = None,
        error: str | None = None,
        returning: bool = True,
    ) -> dict[str, Any]:
        """Record the segment's `run_end`, make sure it is kept, and return the outcome.

        `returning`: the run returns the outcome (False: it raises, cancelled).
        """
        self._journal.record(
            Event(
                type="run_end",
                text=text,
                status=status,
                error=error,
                turn=turn,
                usage=self._usage,
                started_at=seg.started,
                ended_at=self._journal.now(),
            )
        )
        return await self._close(status, seg, text=text, error=error, returning=returning)

    async def _close(
        self,
        status: str,
        seg: Setup,
        *,
        text: str | None = None,
        error: str | None = None,
        details: str | None = None,
        returning: bool = True,
    ) -> dict[str, Any]:
        """Make sure the segment's events are kept, release handlers, return the outcome."""
        spec = seg.spec
        in_result = returning and self._journal_in_result(spec)
        self._status = status
        self._history = HistoryGauge.now()
        workflow.set_current_details(
            details
            or f"Finished: {status} after {plural(self._turn, 'turn')} · {self._tokens()} tokens"
            f" · {self._history.describe()}"
        )
        if not in_result:
            await self._journal.flush(spec.name, spec.mirror)
        await self._release_handlers()
        if self._journal.unmirrored(spec.mirror):
            await self._journal.flush(spec.name, spec.mirror, strict=True)
            missing = self._journal.unmirrored(spec.mirror)
            if missing:
                workflow.logger.warning(
                    "The store mirror of run %s is missing its last %d events; Temporal has "
                    "them all (`agentor-temporal export` or `resume` with the store catches up)",
                    workflow.info().workflow_id,
                    missing,
                )
        outcome = RunOutcome(
            run_id=workflow.info().workflow_id,
            status=status,
            final_output=text,
            usage=self._prior + self._usage,
            error=error,
        ).to_dict()
        # the contract's result, its payload carrying the last events and the
        # whole log where readers may take them from it
        record = None
        if in_result and not self._journal.settled:
            record = self._journal.closing_record(spec.name)
        return cast(dict[str, Any], in_result_payload(outcome, record, self._whole_log(returning)))

    def _whole_log(self, returning: bool) -> bytes | None:
        """The run's every event, encoded for the caller waiting on it (`policies.RESULT_EVENTS`).

        None unless this execution holds the whole run, no request went by
        reference (the events would lack its messages), the worker's payloads
        keep their metadata, the events fit (`journaling.whole_log`), and the
        run is no child (`_child`).
        """
        if not (returning and self.plain_results and self._whole_run) or _child():
            return None
        if self._journal.by_reference:
            return None
        return whole_log(self._journal.events)

    def _journal_in_result(self, spec: AgentSpec) -> bool:
        """Whether the run's last events go in its result (`policies.JOURNAL_IN_RESULT`).

        From `policies.JOURNAL_CHOICE_RECORDED` read from what history holds
        (no patch asked here: this often follows a local activity).
        """
        if spec.mirror or level() < policies.JOURNAL_IN_RESULT:
            return False
        if level() >= policies.JOURNAL_CHOICE_RECORDED:
            return (
                self.results_kept
                and self._journal.pending_bytes() <= policies.MAX_RESULT_JOURNAL_BYTES
                and not _child()
            )
        if workflow.unsafe.is_replaying():
            return not workflow.patched(policies.PATCH_JOURNAL_AT_CLOSE)
        pending = self._journal.pending_bytes()
        if self.plain_results and pending <= policies.MAX_RESULT_JOURNAL_BYTES and not _child():
            return True
        workflow.patched(policies.PATCH_JOURNAL_AT_CLOSE)
        return False


def _child() -> bool:
    """Whether this run is a child (`run_agent`): its result goes into its parent's history.

    There only the outcome is read, and each child's last events and whole log
    in its result's metadata (up to `MAX_RESULT_JOURNAL_BYTES` and
    `MAX_RESULT_EVENTS_BYTES`, 7 times a 20 KB answer) grew the parent's history
    by as much again per call, towards Temporal's 50 MB: its events go in a
    journal step instead (in the child's own history), its whole log nowhere.
    A replay reads the choice from `PATCH_JOURNAL_AT_CLOSE`, as before.
    """
    return workflow.info().parent is not None


def results_kept(plain: bool) -> bool:
    """Whether this execution's result payload keeps its metadata, as its history says.

    Asked in the execution's first workflow task, before any local activity
    (whose result a replay can hand over a task early, before a later task's
    patch marker is known): a worker whose payloads may lose their metadata
    (`plain` False) marks it (`policies.PATCH_RESULTS_UNKEPT`); a replay reads
    the mark, whatever its own worker's payloads do. No marker for a run on a
    worker without a codec, and none read from histories recorded before it.
    """
    if workflow.unsafe.is_replaying():
        return not workflow.patched(policies.PATCH_RESULTS_UNKEPT)
    return plain or not workflow.patched(policies.PATCH_RESULTS_UNKEPT)
