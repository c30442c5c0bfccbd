"""A run's own time limit: it stops shortly before Temporal would time it out.

A start may give the run a limit (`execution_timeout`, spanning its
continue-as-new chain, or `run_timeout`, one execution's); the server times
the run out at it wherever it is, and a turn cut off so records nothing of
what its calls did. So from `policies.DEADLINE_SETTLES` the run sets a timer
`policies.DEADLINE_MARGIN` before its limit and, when it fires, stops its loop
as a cancel would (`agent_run`), settling the turn before the server's
deadline. The chain's deadline is carried over continue-as-new (`Carry`),
since `workflow.info()` gives each execution its own start but not the
chain's expiry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.carry import Carry


@dataclass(frozen=True)
class Deadline:
    """When a run must have settled by, and the limit that sets it."""

    #: when the server times the run out
    at: datetime
    #: the limit the start gave (execution_timeout or run_timeout)
    limit: timedelta

    @property
    def margin(self) -> timedelta:
        """How long before `at` the run stops itself."""
        return min(policies.DEADLINE_MARGIN, self.limit * policies.DEADLINE_MARGIN_SHARE)

    @property
    def stop_at(self) -> datetime:
        """When the run stops itself: the margin before `at`."""
        return self.at - self.margin

    @property
    def settle_by(self) -> datetime:
        """When the stopped run's calls must have answered, to leave its closing time."""
        return self.at - min(policies.DEADLINE_CLOSE, self.margin / 2)

    def error(
        self, cut_off: int | None = None, *, kept: int | None = None, waited: float | None = None
    ) -> str:
        """The `run_end` error of a run stopped by it.

        Args:
            cut_off: the turn whose model request was in flight, unanswered.
            kept: the turn whose request was answered after the stop, and recorded
                (`policies.GENERATION_KEPT`).
            waited: with `cut_off`, the seconds its answer was waited for.
        """
        return (
            f"The run reached its time limit of {_duration(self.limit)} (the timeout it was "
            "started with) and stopped; the calls that ran are recorded, and resume(run_id) "
            f"continues it.{model_request(cut_off, kept=kept, waited=waited)}"
        )


def model_request(
    cut_off: int | None, *, kept: int | None = None, waited: float | None = None
) -> str:
    """What a stopped run's error adds about its model request in flight, if it had one."""
    if kept is not None:
        return (
            f" Turn {kept}'s model answer came after the stop and is recorded: resume goes on "
            "from it without asking the model again."
        )
    if cut_off is None:
        return ""
    within = (
        f" (its answer did not come within the {round(waited, 1):g} s the run waited for it)"
        if waited is not None
        else ""
    )
    return (
        f" Turn {cut_off}'s model request was cut off unanswered{within}: resume sends it "
        "again (a second paid request)."
    )


def chain_expiry(carry: Carry | None) -> datetime | None:
    """When the run's `execution_timeout` times out its continue-as-new chain, if it has one.

    A continued execution's `execution_timeout` runs from the chain's start,
    which only the carry knows; a carry from a build that kept none leaves
    that limit to the server, as before.
    """
    info = workflow.info()
    if not info.execution_timeout:
        return None
    if carry is None:
        return info.workflow_start_time + info.execution_timeout
    if carry.deadline is None:
        return None
    return datetime.fromtimestamp(carry.deadline, timezone.utc)


def run_deadline(carry: Carry | None) -> Deadline | None:
    """The execution's earliest time limit, or None when it was started with none."""
    info = workflow.info()
    limits: list[Deadline] = []
    if info.run_timeout:
        limits.append(Deadline(info.workflow_start_time + info.run_timeout, info.run_timeout))
    expiry = chain_expiry(carry)
    if expiry is not None and info.execution_timeout:
        limits.append(Deadline(expiry, info.execution_timeout))
    return min(limits, key=lambda d: d.at) if limits else None


def _duration(limit: timedelta) -> str:
    seconds = limit.total_seconds()
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"
