"""Workflow input validation: every malformed input gets a message, never a crash."""

from __future__ import annotations

import pytest

from agentor_temporal.workflows.types import AgentRunInput, parse_run_input


def test_minimal_input() -> None:
    inp = parse_run_input({"agent": "A", "input": "hi"})
    assert inp == AgentRunInput(agent="A", input="hi")
    assert inp.to_dict() == {"agent": "A", "input": "hi"}


def test_full_input_round_trips() -> None:
    raw = {
        "agent": "A",
        "input": [{"role": "user", "content": "x"}],
        "max_turns": 3,
        "event_offset": 4,
        "prior_usage": {"input_tokens": 1},
        "previous_execution": "e",
    }
    assert parse_run_input(raw).to_dict() == raw


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (None, "input is NoneType"),
        ([], "input is list"),
        ({"agent": "", "input": "x"}, '"agent"'),
        ({"agent": "A", "input": ""}, "empty prompt"),
        ({"agent": "A", "input": []}, "empty message list"),
        ({"agent": "A", "input": [{"content": "x"}]}, '"input"[0]'),
        ({"agent": "A", "input": 5}, '"input" must be'),
        ({"agent": "A", "input": "x", "max_turns": True}, "max_turns"),
        ({"agent": "A", "input": "x", "event_offset": -1}, "event_offset"),
        ({"agent": "A", "input": "x", "extra": 1}, "unknown input field"),
    ],
)
def test_malformed_inputs(raw: object, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_run_input(raw)
    assert fragment in str(info.value)
