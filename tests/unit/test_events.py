"""The event model round-trips and matches Agentor 0.1.1's format field for field."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from agentor_temporal.store import Event, RunResult, Usage

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

AGENTOR_EVENT_FIELDS = [
    "type",
    "text",
    "reasoning",
    "name",
    "args",
    "result",
    "error",
    "call_id",
    "turn",
    "usage",
    "status",
    "agent",
    "model",
    "messages",
    "calls",
    "started_at",
    "ended_at",
    "forked_from",
]


def test_event_and_usage_have_exactly_the_documented_fields() -> None:
    """Event and Usage carry Agentor's fields, in Agentor's order, and nothing else."""
    assert [f.name for f in fields(Event)] == AGENTOR_EVENT_FIELDS
    assert [f.name for f in fields(Usage)] == ["input_tokens", "output_tokens", "total_tokens"]


def test_to_dict_drops_none_and_round_trips() -> None:
    """to_dict omits None fields; from_dict(to_dict()) is the same event."""
    event = Event(
        type="tool_result",
        name="get_weather",
        args={"city": "London"},
        result="sunny",
        call_id="c1",
        turn=1,
        usage=Usage(1, 2, 3),
    )
    data = event.to_dict()
    assert "error" not in data and data["usage"] == {
        "input_tokens": 1,
        "output_tokens": 2,
        "total_tokens": 3,
    }
    assert Event.from_dict(json.loads(event.to_json())) == event


def test_to_dict_is_asdict_in_agentors_key_order_and_a_copy() -> None:
    """What `dataclasses.asdict` gave (which the dict is now built without), and a copy:
    changing the dict, however deep, leaves the event as it was."""
    calls = [{"name": "f", "id": "c1", "type": "function", "arguments": '{"n": 1}'}]
    event = Event(
        type="generation",
        messages=[{"content": "hi", "role": "user"}],
        calls=calls,
        args={"a": [1, (2, {"b": None})], "u": Usage(1, 2, 3)},
        usage=Usage(4, 5, 9),
        started_at=1.0,
    )
    data = event.to_dict()
    expected = {k: v for k, v in asdict(event).items() if v is not None}
    assert data == expected
    assert list(data) == list(expected)
    assert list(data["calls"][0]) == ["id", "type", "name", "arguments"]
    assert list(data["messages"][0]) == ["role", "content"]
    assert data["args"]["u"] == {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
    data["args"]["a"].append(3)
    data["args"]["a"][1][1]["b"] = 1
    data["calls"][0]["name"] = "g"
    data["messages"].append({})
    data["usage"]["input_tokens"] = 0
    assert event.args is not None and event.args["a"] == [1, (2, {"b": None})]
    assert calls[0]["name"] == "f" and event.messages == [{"content": "hi", "role": "user"}]
    assert event.usage == Usage(4, 5, 9)


def test_to_dict_without_leaves_those_fields_out_and_the_rest_as_it_was() -> None:
    """A caller that drops a generation's request asks for the dict without it: the
    same dict the whole one gives with the field popped, in the same order."""
    event = Event(
        type="generation",
        messages=[{"content": "hi", "role": "user"}],
        calls=[{"name": "f", "id": "c1", "type": "function", "arguments": "{}"}],
        usage=Usage(1, 2, 3),
        turn=2,
    )
    whole = event.to_dict(share_args=True)
    whole.pop("messages")
    data = event.to_dict(share_args=True, without=frozenset(("messages",)))
    assert data == whole and list(data) == list(whole)
    assert "messages" in event.to_dict() and event.messages == [{"content": "hi", "role": "user"}]


def test_from_dict_ignores_unknown_keys_also_inside_usage() -> None:
    """A newer writer's extra fields load instead of losing the event."""
    event = Event.from_dict(
        {"type": "generation", "surprise": 1, "usage": {"input_tokens": 4, "cached_tokens": 9}}
    )
    assert event.type == "generation" and event.usage == Usage(input_tokens=4)


def test_from_dict_without_type_is_refused() -> None:
    with pytest.raises(ValueError, match="type"):
        Event.from_dict({"text": "hi"})


@pytest.mark.parametrize(
    "data, field",
    [
        ({"type": 5}, "type"),
        ({"type": "generation", "messages": "oops"}, "messages"),
        ({"type": "run_start", "messages": [1, 2]}, "messages"),
        ({"type": "generation", "calls": "get_weather"}, "calls"),
        ({"type": "tool_result", "call_id": {"id": 1}}, "call_id"),
        ({"type": "tool_result", "result": ["a"]}, "result"),
        ({"type": "message", "text": 42}, "text"),
    ],
)
def test_from_dict_refuses_fields_of_the_wrong_type(data: dict[str, object], field: str) -> None:
    """A field replay relies on, of the wrong type, is refused by name (not loaded to crash)."""
    with pytest.raises(ValueError, match=f"'{field}'"):
        Event.from_dict(data)


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ({"error": True}, {"error": "true"}),
        ({"error": False}, {"error": None}),
        ({"error": {"message": "boom"}}, {"error": '{"message": "boom"}'}),
        (
            {"reasoning": [{"text": "hm"}], "name": 7},
            {"reasoning": '[{"text": "hm"}]', "name": "7"},
        ),
        ({"status": 1, "agent": 2, "model": 3.5}, {"status": "1", "agent": "2", "model": "3.5"}),
        ({"started_at": "2024-05-01T12:00:00Z", "ended_at": True}, {"started_at": None}),
        ({"started_at": 5, "ended_at": 6.5}, {"started_at": 5, "ended_at": 6.5}),
        ({"turn": "1"}, {"turn": None}),
        ({"turn": 2.0}, {"turn": 2}),
        ({"turn": 2.5}, {"turn": None}),
    ],
)
def test_from_dict_reads_another_writers_values_of_other_fields_as_their_kind(
    data: dict[str, object], read: dict[str, object]
) -> None:
    """A text field holding another value is its JSON text; a time or turn no number is
    unknown: each reader (masking, show's durations) met them as a TypeError, for good."""
    event = Event.from_dict({"type": "tool_result", **data})
    for name, value in read.items():
        assert getattr(event, name) == value, name
    assert type(event.turn) in (int, type(None))


@pytest.mark.parametrize("name", ["completed-weather-run.jsonl", "failing-tool-run.jsonl"])
def test_agentor_fixtures_round_trip_byte_for_byte(name: str) -> None:
    """Every line Agentor wrote re-serialises to the same JSON object, key order included."""
    for line in (FIXTURES / name).read_text().splitlines():
        event = Event.from_dict(json.loads(line))
        assert event.to_json() == line


def test_messages_keep_agentor_key_order_after_a_sorted_round_trip() -> None:
    """Temporal's converter sorts keys; events restore role/content/tool_calls order."""
    sorted_msg = json.loads(
        json.dumps(
            {
                "tool_calls": [
                    {"type": "function", "id": "c", "function": {"arguments": "{}", "name": "f"}}
                ],
                "role": "assistant",
                "content": None,
            },
            sort_keys=True,
        )
    )
    text = Event(type="generation", messages=[sorted_msg]).to_json()
    assert text.index('"role"') < text.index('"content"') < text.index('"tool_calls"')
    call = text[text.index('"tool_calls"') :]
    assert call.index('"id"') < call.index('"type"') < call.index('"function"')
    assert call.index('"name"') < call.index('"arguments"')


def test_run_result_defaults() -> None:
    result = RunResult()
    assert str(result) == "" and result.tool_calls == [] and result.usage == Usage()


def test_run_result_to_dict_is_standard_json() -> None:
    """NaN in recorded tool arguments and a lone surrogate come out as the JSONL log has them."""
    call = Event(type="tool_call", name="f", args={"x": float("nan"), "y": [float("inf")]})
    result = RunResult(final_output="ok \udcff", events=[call], run_id="r")
    text = json.dumps(result.to_dict(), allow_nan=False, ensure_ascii=False).encode("utf-8")
    data = json.loads(text)
    assert data["events"][0]["args"] == {"x": None, "y": [None]}
    assert data["events"][0] == json.loads(call.to_json())
    assert data["final_output"] == "ok \ufffd"
