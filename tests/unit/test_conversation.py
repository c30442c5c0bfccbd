"""Conversations by reference and the state a continued execution carries (no server)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from agentor_temporal.activities import conversations
from agentor_temporal.activities.conversations import (
    ConversationCache,
    Known,
    full_messages,
    remember,
)
from agentor_temporal.store.events import Event
from agentor_temporal.workflows.carry import Carry
from agentor_temporal.workflows.conversation import (
    Conversation,
    ConversationRef,
    canonical,
    chain_digest,
)
from agentor_temporal.workflows.projection import Segment, resolve_requests
from agentor_temporal.workflows.types import parse_run_input


def msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": text}


def test_switch_names_the_last_request_and_keeps_the_rest_as_tail() -> None:
    """Switching keeps what was sent whole as the base; messages after it become the tail."""
    conv = Conversation([msg("system", "s"), msg("user", "u")])
    assert conv.switch() is False  # nothing recorded whole yet
    conv.recorded(0)  # run_start
    first = conv.request()
    conv.recorded(1)  # the generation at position 1 sent those whole
    conv.append(msg("assistant", "a"))
    conv.append(msg("tool", "t"))
    size = conv.size
    assert conv.switch() and conv.by_reference
    assert conv.base == ConversationRef(1, 2, chain_digest("", first), conv.base.size)
    assert conv.tail == [msg("assistant", "a"), msg("tool", "t")]
    assert conv.size == size


def test_workflow_and_worker_compute_the_same_chain() -> None:
    """The digest the workflow gives a base is the one the worker caches the full request under."""
    history = [msg("system", "s"), msg("user", "u")]
    conv = Conversation(copy.deepcopy(history))
    conv.recorded(0)
    conv.switch()
    run = "r1"
    remember(run, copy.deepcopy(history))
    for turn in range(3):
        conv.append(msg("assistant", f"call {turn}"))
        conv.append(msg("tool", f"result {turn} é"))
        base, tail = conv.base, conv.request()
        assert base is not None
        full = asyncio.run(full_messages(run, base.to_dict(), tail))
        history += tail
        assert full.messages == history
        assert json.loads(b"[" + full.encoded + b"]") == history
        conv.recorded(10 + turn)
        assert conv.base is not None and conv.base.count == len(history)
        cached = conversations.CACHE.get(run, conv.base.digest)
        assert cached is not None and cached.messages == history


def test_a_miss_reads_history_and_a_wrong_digest_is_a_miss(monkeypatch: Any) -> None:
    """Without the base cached the worker reads it from the run's history (by position)."""
    reads: list[int] = []

    async def from_history(run_id: str, ref: ConversationRef) -> list[dict[str, Any]]:
        reads.append(ref.position)
        return [msg("user", "from history")]

    monkeypatch.setattr(conversations, "_from_history", from_history)
    ref = ConversationRef(position=7, count=1, digest="not-cached", size=10)
    full = asyncio.run(full_messages("r2", ref.to_dict(), [msg("tool", "x")]))
    assert full.messages == [msg("user", "from history"), msg("tool", "x")] and reads == [7]
    # the same request again (a retried call, or the mirror): no second read
    asyncio.run(full_messages("r2", ref.to_dict(), [msg("tool", "x")]))
    assert reads == [7]


def test_a_base_history_cannot_gain_is_not_retried(monkeypatch: Any) -> None:
    """Only a base past the end of a running run's history is retried, and only a few times."""
    ref = ConversationRef(position=3, count=2, digest="d")
    running, closed = Segment("e1", status="running"), Segment("e1", status="completed")
    start = Event(type="run_start", messages=None)
    # the event is recorded without those messages: history will never have them
    assert conversations._missing("r", ref, start, [running]).non_retryable
    # no event there yet: the running run may still record it, the closed one cannot
    assert not conversations._missing("r", ref, None, [running]).non_retryable
    assert conversations._missing("r", ref, None, [closed]).non_retryable
    monkeypatch.setattr(conversations, "_attempt", lambda: conversations.BASE_MISSING_ATTEMPTS)
    final = conversations._missing("r", ref, None, [running])
    assert final.non_retryable and "retrying cannot change that" in final.message


def test_cache_keeps_one_conversation_per_run_within_its_bytes() -> None:
    """A run's older conversation goes when a newer one comes; the oldest runs go past the bound."""
    cache = ConversationCache(max_bytes=100)

    def known(text: str) -> Known:
        return Known([msg("user", text)], b"x" * 40)

    cache.put("a", "d1", known("1"))
    cache.put("a", "d2", known("2"))
    assert cache.get("a", "d1") is None and cache.get("a", "d2") is not None
    cache.put("b", "d3", known("3"))
    cache.put("c", "d4", known("4"))
    assert cache.get("a", "d2") is None  # least recently used, dropped
    assert cache.get("c", "d4") is not None


def test_projection_resolves_references_across_executions() -> None:
    """A generation sent by reference gets its base's messages, even from an earlier execution."""
    start = [msg("system", "s"), msg("user", "u")]
    first = Segment("e1", input={"agent": "a", "input": "u"})
    first.events = [Event(type="run_start", messages=start), Event(type="generation")]
    first.pending[1] = ({"position": 0, "count": 2, "digest": "x"}, [])
    second = Segment("e2", input={"agent": "a", "input": [], "event_offset": 2})
    second.events = [Event(type="generation")]
    tail = [msg("assistant", "a"), msg("tool", "t")]
    second.pending[0] = ({"position": 1, "count": 2, "digest": "y"}, tail)
    resolve_requests([first, second])
    assert first.events[1].messages == start
    assert second.events[0].messages == start + tail


def test_carry_round_trips_and_bad_carry_is_refused() -> None:
    """The carried state survives JSON; a malformed one is refused by name."""
    carry = Carry(
        turn=12,
        budget=300,
        started=1.5,
        conversation={"base": ConversationRef(5, 3, "d", 9).to_dict(), "tail": [msg("tool", "t")]},
        usage={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        failures={"flaky": 1},
        disabled=["broken"],
        decisions={"c1": {"call_id": "c1", "approved": False, "reason": None, "by": "x"}},
        executions=3,
    )
    assert Carry.from_dict(carry.to_dict()) == carry
    inp = parse_run_input({"agent": "A", "input": [], "carry": carry.to_dict()})
    assert inp.carry == carry.to_dict() and inp.input == []
    with pytest.raises(ValueError, match="carry"):
        Carry.from_dict({"turn": 1})
    with pytest.raises(ValueError, match="carry"):
        parse_run_input({"agent": "A", "input": "x", "carry": 5})
    with pytest.raises(ValueError, match="empty"):
        parse_run_input({"agent": "A", "input": []})


def test_canonical_ignores_key_order() -> None:
    assert canonical({"b": 1, "a": "é"}) == canonical({"a": "é", "b": 1})


def test_a_known_base_is_used_only_for_the_digest_it_has() -> None:
    """A worker's cached conversation seeds a rebuild only where history names its digest."""
    tail = [msg("tool", "t")]

    def later() -> Segment:
        segment = Segment("e2", input={"agent": "a", "input": [], "event_offset": 5})
        segment.events = [Event(type="generation")]
        segment.pending[0] = ({"position": 4, "count": 1, "digest": "d4"}, tail)
        return segment

    known = {4: [msg("user", "u")]}
    ok = later()
    resolve_requests([ok], known, {4: "d4"})
    assert ok.events[0].messages == [msg("user", "u"), msg("tool", "t")]
    other = later()
    resolve_requests([other], known, {4: "another conversation"})
    assert other.events[0].messages is None


def test_the_carried_stream_state_reads_back_as_the_sdk_type() -> None:
    """The stream's offsets and publisher dedup state survive the JSON of continue-as-new."""
    from datetime import datetime, timezone

    from temporalio.contrib.workflow_streams import WorkflowStreamState
    from temporalio.contrib.workflow_streams._types import PublisherState
    from temporalio.converter import default

    from agentor_temporal.workflows.carry import emptied

    seen = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    state = WorkflowStreamState(base_offset=5, publishers={"p": PublisherState(3, seen)})
    state.log = [object(), object()]  # type: ignore[list-item]  # only counted
    converter = default().payload_converter
    carried = emptied(state)
    back = converter.from_payload(converter.to_payload(carried), WorkflowStreamState)
    assert back == WorkflowStreamState(
        log=[], base_offset=7, publishers={"p": PublisherState(3, seen)}
    )
