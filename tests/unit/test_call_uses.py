"""Use keys: every call of a run has its own, and an id's first use keeps the id."""

from __future__ import annotations

import pytest

from agentor_temporal.activities import ToolContext
from agentor_temporal.workflows.call_uses import CallUses, parse_key, use_key
from agentor_temporal.workflows.types import parse_run_input


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
