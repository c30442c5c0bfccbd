"""`refusals.counted`: which kept refusals count against a waiting run's task budget."""

from __future__ import annotations

import pytest

from agentor_temporal.workflows import policies, refusals


@pytest.fixture
def at_level(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(refusals, "level", lambda: policies.REFUSALS_UNCOUNTED)
    return monkeypatch


def test_one_refusal_per_decision_taken_goes_uncounted(at_level: pytest.MonkeyPatch) -> None:
    assert not refusals.counted(0, 1)
    assert not refusals.counted(2, 3)
    assert refusals.counted(3, 3)  # a third reviewer's
    assert refusals.counted(0, 0)  # nothing decided: a flood of refused decisions


def test_no_more_uncounted_than_a_turn_has_decisions(at_level: pytest.MonkeyPatch) -> None:
    most = policies.MAX_CALLS_PER_REPLY
    assert not refusals.counted(most - 1, 3 * most)
    assert refusals.counted(most, 3 * most)  # earlier turns' decisions lend no more


def test_runs_recorded_before_the_level_count_every_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(refusals, "level", lambda: policies.REFUSALS_UNCOUNTED - 1)
    assert refusals.counted(0, 5)
