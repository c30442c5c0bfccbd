"""A person's decision carries its own time: checked where it arrives, never carried on."""

from __future__ import annotations

import math

import pytest
from temporalio.exceptions import ApplicationError

from agentor_temporal.workflows.approvals import signalled
from agentor_temporal.workflows.carry import carried_decisions
from agentor_temporal.workflows.types import Decision


@pytest.mark.parametrize("at", [None, 0, 1_796_000_000, 1_796_000_000.25])
def test_a_decision_may_say_when_it_was_made(at: float | None) -> None:
    assert Decision("call_1", True, at=at).problem() is None
    assert signalled({"call_id": "call_1", "approved": True, "at": at}).at == at


@pytest.mark.parametrize("at", ["now", True, math.nan, math.inf, [1.0]])
def test_a_decision_time_that_is_not_a_time_is_refused(at: object) -> None:
    problem = Decision("call_1", True, at=at).problem()  # type: ignore[arg-type]
    assert problem is not None and problem.startswith("at must be a time")
    if not isinstance(at, float):  # JSON has no nan or inf: a signal cannot carry them
        with pytest.raises(ApplicationError, match="at must be a time"):
            signalled({"call_id": "call_1", "approved": True, "at": at})


def test_a_carried_decision_leaves_its_time_behind() -> None:
    """A worker of a build before `at` existed may take the next execution."""
    carried = carried_decisions({"call_1": Decision("call_1", True, "ok", "al", 2, 1.5)})
    assert carried["call_1"] == {"call_id": "call_1", "approved": True, "reason": None, "by": "al"}
