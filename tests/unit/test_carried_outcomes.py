"""What a continue-as-new carries of decisions sent by signal stays bounded."""

from __future__ import annotations

import json

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.carried_outcomes import carried_outcomes, outcomes_in


def _decided(n: int, args: object) -> dict[str, object]:
    return {"decided": {"call_id": "call_0", "tool": "transfer", "args": args, "turn": n}}


def test_only_the_latest_are_carried_oldest_first() -> None:
    before = {f"old-{n}": _decided(n, {}) for n in range(150)}
    now = {f"new-{n}": _decided(n, {}) for n in range(30)}
    carried = carried_outcomes(before, {}, now)
    assert len(carried) == policies.CARRIED_OUTCOMES
    assert list(carried)[-30:] == list(now)
    assert "old-149" in carried and "old-0" not in carried


def test_a_request_id_taken_again_counts_as_its_latest() -> None:
    carried = carried_outcomes({"a": _decided(1, {}), "b": _decided(1, {})}, {"a": _decided(2, {})})
    assert list(carried) == ["b", "a"]
    assert carried["a"]["decided"]["turn"] == 2


def test_a_large_outcome_is_carried_in_brief() -> None:
    huge = _decided(1, {"memo": "x" * 100_000})
    huge["decided"]["call_id"] = "c" * 10_000  # type: ignore[index]
    refused = {"refused": "no " * 10_000, "type": "UnknownCall"}
    carried = carried_outcomes({"big": huge, "no": refused})
    assert "args" not in carried["big"]["decided"]
    assert carried["no"]["type"] == "UnknownCall"
    for outcome in carried.values():
        assert len(json.dumps(outcome).encode()) <= policies.CARRIED_OUTCOME_BYTES
    small = _decided(1, {"amount": 5})
    assert carried_outcomes({"s": small}) == {"s": small}


def test_a_plain_client_s_carry_is_read_without_raising() -> None:
    assert outcomes_in(None) == {}
    assert outcomes_in({"carry": {"outcomes": ["x"]}}) == {}
    raw = {
        "carry": {
            "outcomes": {
                "ok": {"refused": "no", "type": "X"},
                "": {"refused": "no"},
                "k" * 65: {"refused": "no"},
                "bad": "not an outcome",
                "empty": {},
            }
        }
    }
    assert outcomes_in(raw) == {"ok": {"refused": "no", "type": "X"}}
