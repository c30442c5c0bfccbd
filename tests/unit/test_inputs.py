"""Workflow input validation: every malformed input gets a message, never a crash."""

from __future__ import annotations

import pytest

from agentor_temporal.workflows.types import AgentRunInput, ForkOrigin, parse_run_input


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


def test_fork_input_round_trips() -> None:
    """A fork's first segment references its parent's events and carries only the tail."""
    raw = {
        "agent": "A",
        "input": [{"role": "user", "content": "x"}],
        "event_offset": 3,
        "fork": {
            "run_id": "parent",
            "at": 3,
            "execution": "e",
            "events": [{"type": "tool_result", "call_id": "c1", "result": "r"}],
        },
    }
    inp = parse_run_input(raw)
    assert inp.fork == ForkOrigin(
        run_id="parent",
        at=3,
        execution="e",
        events=[{"type": "tool_result", "call_id": "c1", "result": "r"}],
    )
    assert inp.to_dict() == raw
    assert parse_run_input(inp) == inp
    snapshot = {**raw, "fork": {"run_id": "p", "at": 3, "snapshot": True, "final_output": "a"}}
    assert parse_run_input(snapshot).to_dict() == snapshot


@pytest.mark.parametrize(
    "fork, fragment",
    [
        ("parent", '"fork" must be an object'),
        ({"run_id": "p", "at": 3, "extra": 1}, 'unknown "fork" field'),
        ({"at": 3}, '"fork"."run_id"'),
        ({"run_id": "p", "at": -1}, '"fork"."at"'),
        ({"run_id": "p", "at": True}, '"fork"."at"'),
        ({"run_id": "p", "at": 3, "execution": 5}, '"fork"."execution"'),
        ({"run_id": "p", "at": 3, "events": [{"no": "type"}]}, '"fork"."events"'),
        ({"run_id": "p", "at": 3, "final_output": 1}, '"fork"."final_output"'),
        (
            {"run_id": "p", "at": 3, "events": [{"type": "generation", "messages": "x"}]},
            '"fork"."events"[0] is not an event',
        ),
        ({"run_id": "p", "at": 4}, '"event_offset" (3) must equal "fork"."at" (4)'),
    ],
)
def test_malformed_fork_inputs(fork: object, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_run_input({"agent": "A", "input": "x", "event_offset": 3, "fork": fork})
    assert fragment in str(info.value)


def _answered(results: object) -> dict[str, object]:
    """An input going on from a one-call answer whose calls' results are `results`."""
    call = {"id": "c", "function": {"name": "f", "arguments": "{}"}}
    return {"agent": "A", "input": "x", "answer": {"calls": [call], "results": results}}


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
        (_answered([None, None]), "one per call"),
        (_answered({"0": None}), "one per call"),
        (_answered([{"type": "message"}]), "[0] is not one"),
        (
            {"agent": "A", "input": "x", "answer": {"calls": [{"id": "c", "function": 5}]}},
            '"answer"."calls"[0]."function" must be an object',
        ),
        (
            {
                "agent": "A",
                "input": "x",
                "answer": {"calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]},
            },
            '"answer"."calls"[0]."function"."arguments" must be JSON text',
        ),
    ],
)
def test_malformed_inputs(raw: object, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_run_input(raw)
    assert fragment in str(info.value)


@pytest.mark.parametrize("usage", [{"total_tokens": "many"}, {"input_tokens": [1]}])
def test_prior_usage_that_is_not_token_counts_is_refused(usage: object) -> None:
    """Read in the run's first task: before, a bad count failed every task after it."""
    with pytest.raises(ValueError, match="prior_usage"):
        parse_run_input({"agent": "A", "input": "hi", "prior_usage": usage})
