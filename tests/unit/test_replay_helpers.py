"""Replaying a log into a conversation, a status and a cost."""

from __future__ import annotations

import json
from pathlib import Path

from agentor_temporal.store import (
    Event,
    FileStore,
    Usage,
    initial_messages,
    is_complete,
    pending_approvals,
    replay_messages,
    total_usage,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_crashed_fixture_replays_to_the_tool_result() -> None:
    """Agentor's torn log replays to the request that asks for the final answer."""
    events = FileStore(FIXTURES).load("crashed-after-tool")
    assert [e.type for e in events] == ["run_start", "generation", "tool_call", "tool_result"]
    messages = replay_messages(events)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[-1]["content"] == "The weather in London is sunny and 22C."
    assert not is_complete(events)


def test_completed_fixture_is_complete_with_summed_usage() -> None:
    events = FileStore(FIXTURES).load("completed-weather-run")
    assert is_complete(events)
    assert total_usage(events) == Usage(20, 10, 30)


def test_half_finished_tool_batch_is_rewound() -> None:
    """Calls without recorded results drop the assistant turn, so the model decides again."""
    gen = Event(
        type="generation",
        messages=[{"role": "user", "content": "hi"}],
        calls=[
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        ],
    )
    events = [
        Event(type="run_start", messages=[{"role": "user", "content": "hi"}]),
        gen,
        Event(type="tool_result", call_id="a", result="ok"),
    ]
    assert replay_messages(events) == [{"role": "user", "content": "hi"}]


def test_later_run_start_opens_a_new_segment() -> None:
    """A segment that crashed before its first generation restarts from its own run_start."""
    lines = (FIXTURES / "completed-weather-run.jsonl").read_text().splitlines()
    events = [Event.from_dict(json.loads(line)) for line in lines]
    events.append(Event(type="run_start", messages=[{"role": "user", "content": "new"}]))
    assert replay_messages(events) == [{"role": "user", "content": "new"}]
    assert not is_complete(events)


def test_initial_messages() -> None:
    assert initial_messages("sys", "hi") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    history = [{"role": "system", "content": "old"}, {"role": "user", "content": "x"}]
    assert initial_messages("sys", history) == history
    assert initial_messages(None, "hi") == [{"role": "user", "content": "hi"}]


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_calls_sharing_an_id_in_one_turn_get_their_own_answers_in_order() -> None:
    """Two calls of a turn with one id are each answered by their own result, as the run did."""
    hi = [{"role": "user", "content": "hi"}]
    events = [
        Event(type="run_start", messages=hi),
        Event(type="generation", messages=hi, calls=[_call("c"), _call("c")]),
        Event(type="tool_result", call_id="c", result="first"),
        Event(type="tool_result", call_id="c", result="second"),
    ]
    assert [m["content"] for m in replay_messages(events)[2:]] == ["first", "second"]
    # one of them unanswered: the batch is rewound, as any half-finished one
    assert replay_messages(events[:3]) == hi


def test_a_call_id_decided_in_one_turn_can_wait_again_in_a_later_one() -> None:
    """A request reusing a decided call's id is pending until its own decision."""
    events = [
        Event(type="run_start"),
        Event(type="approval_request", call_id="call_0", turn=1, name="pay"),
        Event(type="approval_decision", call_id="call_0", turn=1, status="approved"),
        Event(type="approval_request", call_id="call_0", turn=2, name="pay"),
    ]
    assert [(e.call_id, e.turn) for e in pending_approvals(events)] == [("call_0", 2)]
    events.append(Event(type="approval_decision", call_id="call_0", turn=2, status="denied"))
    assert pending_approvals(events) == []


def test_a_call_id_that_is_not_a_string_rewinds_its_batch() -> None:
    """A damaged log's call id no result can name (a list) rewinds the batch, never raises."""
    hi = [{"role": "user", "content": "hi"}]
    call = {**_call("c"), "id": ["c"]}
    events = [
        Event(type="run_start", messages=hi),
        Event(type="generation", messages=hi, calls=[call]),
        Event(type="tool_result", call_id="c", result="sunny"),
    ]
    assert replay_messages(events) == hi
