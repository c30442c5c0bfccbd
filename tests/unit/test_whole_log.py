"""A run's whole log for its result payload: all its events, or none past the limit."""

from __future__ import annotations

import json

from temporalio.api.common.v1 import Payload

from agentor_temporal._closed import whole_log as read_whole_log
from agentor_temporal.store import Event
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.journaling import whole_log


def test_the_whole_log_reads_back_as_the_events_it_was_made_from() -> None:
    events = [
        Event(type="run_start", agent="A", model="m", messages=[{"role": "user", "content": "é"}]),
        Event(type="run_end", text="done", status="completed", turn=1),
    ]
    encoded = whole_log(events)
    assert encoded is not None
    assert json.loads(encoded) == [e.to_dict() for e in events]
    payload = Payload(metadata={policies.RESULT_EVENTS: encoded})
    assert read_whole_log(payload) == events


def test_a_log_past_the_limit_is_left_out() -> None:
    big = "x" * (policies.MAX_RESULT_EVENTS_BYTES // 4)
    events = [Event(type="tool_result", result=big, call_id=str(i)) for i in range(5)]
    assert whole_log(events[:3]) is not None
    assert whole_log(events) is None


def test_a_payload_without_a_usable_log_gives_none() -> None:
    assert read_whole_log(None) is None
    assert read_whole_log(Payload()) is None
    for raw in (b"not json", b'{"type": "run_end"}', b"[1, 2]"):
        assert read_whole_log(Payload(metadata={policies.RESULT_EVENTS: raw})) is None
