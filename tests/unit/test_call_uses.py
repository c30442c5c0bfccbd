"""Use keys: every call of a run has its own, and an id's first use keeps the id."""

from __future__ import annotations

import json

import pytest

from agentor_temporal.activities import ToolContext
from agentor_temporal.workflows.call_uses import CallUses, count_key, parse_key, use_key
from agentor_temporal.workflows.carry import Carry, carried_decisions
from agentor_temporal.workflows.policies import LONG_CALL_ID_CHARS, MAX_DECISION_TEXT
from agentor_temporal.workflows.types import Decision, parse_run_input


def test_first_use_keeps_the_id_and_repeats_are_numbered() -> None:
    assert [use_key("call_0", n) for n in (1, 2, 3)] == ["call_0", "call_0#2", "call_0#3"]


def test_keys_never_collide_and_parse_back() -> None:
    """Ids containing `#` are numbered from their first use, so no two uses share a key."""
    ids = ["call_0", "a", "a#2", "a#b", "#", "x#1#1", ""]
    uses = [(i, n) for i in ids for n in (1, 2, 3)]
    keys = [use_key(i, n) for i, n in uses]
    assert len(set(keys)) == len(uses)
    assert [parse_key(k) for k in keys] == uses


def test_counts_follow_calls_and_seed_from_keys_and_messages() -> None:
    uses = CallUses()
    assert [uses.next("c"), uses.next("c"), uses.next("d")] == [1, 2, 1]
    uses.seed_keys(["c#5", "e"])
    assert uses.counts == {"c": 5, "d": 1, "e": 1}
    uses.seed_messages(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "d"}, {"id": "f"}]},
        ]
    )
    assert uses.counts == {"c": 5, "d": 2, "e": 1, "f": 1}


@pytest.mark.parametrize("calls", [5, True, 1.5, "call_9", {"id": "g"}, None])
def test_messages_whose_calls_are_no_list_seed_nothing(calls: object) -> None:
    """A plain client's `tool_calls` of 5 raised here, in every workflow task of its run."""
    uses = CallUses()
    uses.seed_messages([{"role": "assistant", "tool_calls": calls}])
    assert uses.counts == {}


def test_idempotency_key_names_the_use() -> None:
    ctx = ToolContext(run_id="r", call_id="call_0", agent="A", turn=3, attempt=1, use=2)
    assert ctx.idempotency_key == "r:call_0#2"
    assert ToolContext("r", "call_0", "A", 1, 1).idempotency_key == "r:call_0"


def test_a_run_input_may_carry_call_counts_and_bad_ones_are_refused() -> None:
    inp = parse_run_input({"agent": "A", "input": "hi", "call_uses": {"call_0": 3}})
    assert inp.call_uses == {"call_0": 3} and inp.to_dict()["call_uses"] == {"call_0": 3}
    for bad in ([1], {"call_0": -1}, {"call_0": "3"}, {"call_0": True}):
        with pytest.raises(ValueError, match="call_uses"):
            parse_run_input({"agent": "A", "input": "hi", "call_uses": bad})


def test_long_ids_are_counted_by_digest_with_the_same_uses() -> None:
    """A 40 KB id is counted under a short digest; its uses number as a short id's do."""
    long = "c" * 40_000
    uses = CallUses()
    assert [uses.next(long), uses.next("call_0"), uses.next(long)] == [1, 1, 2]
    assert max(len(key) for key in uses.counts) <= LONG_CALL_ID_CHARS
    assert count_key("call_0") == "call_0" and count_key(long) != count_key(long + "d")
    # counts carried by a build that kept ids whole, and counts carried by digest
    assert CallUses({long: 2}).counts == {count_key(long): 2}
    assert CallUses(uses.counts).counts == {count_key(long): 2, "call_0": 1}
    again = CallUses(uses.counts)
    assert again.next(long) == 3 and again.next("call_0") == 2
    assert use_key(long, 3) == f"{long}#3"  # keys are made from the id itself


def test_carried_decisions_keep_the_verdict_and_drop_what_is_never_read() -> None:
    """Between turns a decision only refuses a second one: no reason, a short name, short keys."""
    long = "c" * 40_000
    big = "\U0001f600" * MAX_DECISION_TEXT
    decisions = {
        "call_0": Decision("call_0", True, big, big),
        "call_0#2": Decision("call_0", False, "no", "carol"),
        use_key(long, 2): Decision(long, True, big, None),
    }
    carried = carried_decisions(decisions)
    assert carried["call_0#2"] == {
        "call_id": "call_0",
        "approved": False,
        "reason": None,
        "by": "carol",
    }
    assert carried["call_0"]["reason"] is None and len(carried["call_0"]["by"]) <= 103
    assert carried[f"{count_key(long)}#2"]["call_id"] == count_key(long)
    assert len(json.dumps(carried)) < 2_000
    # read back as the next execution restores them
    assert Carry(1, 2, 0.0, {}, decisions=carried).decision_objects()["call_0"].approved


def test_bounded_carried_decisions_keep_the_latest_turns_worth() -> None:
    """From `policies.BOUNDED_CARRY`: 2,000 decisions with long names carry 500, in ~100 kB."""
    name = "\U0001f600" * 333
    decisions = {f"call_{n}": Decision(f"call_{n}", True, None, name) for n in range(2_000)}
    carried = carried_decisions(decisions, bounded=True)
    assert list(carried) == [f"call_{n}" for n in range(1_500, 2_000)]
    assert all(len(json.dumps(d["by"])) - 2 <= 40 for d in carried.values())
    assert len(json.dumps(carried)) < 100_000
    # unbounded (runs recorded before the level): every one, 1.2 kB of name each
    assert len(json.dumps(carried_decisions(decisions))) > 2_000_000


def test_many_ids_used_once_are_carried_in_a_fixed_size() -> None:
    """50,000 unique ids carry in ~175 kB (one by one: 1.8 MB); reused ids stay counted exactly."""
    uses = CallUses()
    ids = [f"call_{n:024d}" for n in range(50_000)]
    for call_id in ids:
        uses.next(call_id)
    uses.next("call_0")
    uses.next("call_0")
    assert len(json.dumps(uses.counts)) > 1_700_000
    counts, seen = uses.compacted()
    assert counts == {"call_0": 2} and seen is not None
    assert len(json.dumps(counts)) + len(seen) < 200_000
    again = CallUses(counts, seen=seen)
    # every id used before is a later use, never a first one again
    assert all(again.next(call_id) == 2 for call_id in ids[::1000])
    assert again.next("call_0") == 3
    fresh = [f"new_{n}" for n in range(10_000)]
    assert sum(again.next(call_id) == 1 for call_id in fresh) > 9_950  # ~1 in 1,000 taken for seen
    # a compacted carry compacts again, keeping what it saw
    counts, seen_again = again.compacted()
    assert CallUses(counts, seen=seen_again).next(ids[1000]) == 3
    assert CallUses(counts, seen=seen_again).next(ids[2]) == 2
