"""Activity summaries are cut by their size as Temporal encodes them, not by characters."""

from __future__ import annotations

import json

from agentor_temporal.workflows.formatting import SUMMARY_BYTES, call_summary, fit


def _bytes(text: str) -> int:
    return len(json.dumps(text)) - 2


def test_a_short_summary_is_kept_and_a_long_one_cut_with_its_closing_paren() -> None:
    assert call_summary("get_weather", {"city": "London"}) == "get_weather(city='London')"
    long = call_summary("pad", {"data": "x" * 1000})
    assert long.endswith("...)") and len(long) == _bytes(long) == SUMMARY_BYTES


def test_a_summary_of_multibyte_text_stays_under_the_cap_in_bytes() -> None:
    """200 emoji are 200 characters but 2,400 bytes as Temporal encodes them (before: kept)."""
    for text in ("\U0001f600" * 300, "é" * 300, "\\" * 300, "日本" * 150):
        summary = call_summary("get_weather", {"city": text})
        assert _bytes(summary) <= SUMMARY_BYTES and summary.endswith("...)")
    assert _bytes(fit("a" * 10 + "\U0001f600" * 100, 30)) <= 30


def test_a_huge_agent_name_makes_a_short_describe_summary() -> None:
    assert _bytes(fit("describe " + "a" * 1_900_000, SUMMARY_BYTES)) <= SUMMARY_BYTES


def test_a_summary_writes_the_arguments_only_as_far_as_it_shows_them() -> None:
    """A call given 500 arguments writes out the first few (before: every one, for each
    call of a wide turn, twice, in one workflow task); the summary is the same."""
    written: list[int] = []

    class Value:
        def __init__(self, n: int) -> None:
            self.n = n

        def __repr__(self) -> str:
            written.append(self.n)
            return f"v{self.n:03}"

    args = {f"arg{n}": Value(n) for n in range(500)}
    summary = call_summary("load", args)
    whole = "load(" + ", ".join(f"arg{n}=v{n:03}" for n in range(500)) + ")"
    assert summary == fit(whole, SUMMARY_BYTES, "...)")
    assert len(written) < 30, len(written)
    assert call_summary("load", {"a": 1, "b": "x"}) == "load(a=1, b='x')"


def test_arguments_of_another_shape_are_shown_as_they_are() -> None:
    """A log written elsewhere may hold a call's arguments as a list or a text."""
    assert call_summary("load", [1, 2]) == "load([1, 2])"
    assert call_summary("load", "x" * 1000).endswith("...)")
