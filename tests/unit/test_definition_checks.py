"""An agent no run of it could record is refused when it is built, not at its first run.

Each of these used to start runs that failed later: a name or model over the
search attribute limit (every run failed after it started), settings that
are not JSON (every run failed in its first step), `stream=True` (a stream
where a reply was expected), instructions and settings over what one payload
holds (every workflow task of every run failed, for ever), a budget of `True`,
a setting of NaN or Infinity (sent as no provider can read), instructions
that are not text (a TypeError from deep inside), a name or model holding a
lone surrogate (a worker with metrics failed every workflow task of its runs).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentor_temporal import Agentor

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "long name": ({"name": "é" * 600}, "the agent's name is 3,602 bytes as Temporal records"),
    # 1,024 bytes of UTF-8, but Temporal measures its JSON: 3,074 bytes, and runs failed
    "escaped name": ({"name": "é" * 512}, "the agent's name is 3,074 bytes as Temporal records"),
    "long model": ({"model": "m" * 1500}, "the agent's model is 1,502 bytes"),
    # a metric label: with metrics on, every workflow task of every run failed
    "surrogate name": ({"name": "Agent \udcff"}, "the agent's name 'Agent \\udcff' holds a lone"),
    "surrogate model": ({"model": "gpt\ud800"}, "the agent's model 'gpt\\ud800' holds a lone"),
    "stream": ({"stream": True}, "model setting(s) stream are set by the run itself"),
    "messages": ({"messages": []}, "model setting(s) messages are set by the run itself"),
    "object setting": ({"temperature": object()}, "model setting 'temperature' must be a JSON"),
    # sent as NaN, which is not JSON: the provider refused every request, naming nothing
    "nan setting": ({"temperature": math.nan}, "model setting 'temperature' holds NaN or Infinity"),
    "infinite setting": (
        {"metadata": {"budget": -math.inf}},
        "model setting 'metadata' holds NaN or Infinity",
    ),
    "oversize": (
        {"instructions": "i" * 1_400_000, "metadata": {"notes": "n" * 700_000}},
        "The agent is too large: its instructions, tool schemas and model settings come to 2.10 MB",
    ),
    "max_turns True": ({"max_turns": True}, "max_turns must be a positive integer, got True"),
    "max_turns None": ({"max_turns": None}, "max_turns must be a positive integer, got None"),
    "failures True": ({"max_tool_failures": True}, "max_tool_failures must be a positive"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_agent_no_run_could_record_is_refused_when_built(case: str) -> None:
    options, says = CASES[case]
    with pytest.raises(ValueError) as info:
        Agentor(base_url="http://unused", api_key="k", **options)
    assert says in str(info.value)
    assert len(str(info.value)) < 500


def test_what_a_run_can_record_is_built() -> None:
    """The limits leave room: a 1,022-character name, 1.4 MB of instructions, JSON settings."""
    agent = Agentor(
        name="n" * 1022,
        instructions="i" * 1_400_000,
        base_url="http://unused",
        api_key="k",
        temperature=0.2,
        metadata={"team": "ops"},
    )
    assert agent.definition.model_settings == {"temperature": 0.2, "metadata": {"team": "ops"}}


@pytest.mark.parametrize("instructions", [lambda: "Be brief.", 5, ["Be", "brief."]])
def test_instructions_that_are_not_text_are_refused_naming_them(instructions: Any) -> None:
    """One clear line, not "argument of type 'function' is not iterable" from inside."""
    with pytest.raises(TypeError) as info:
        Agentor(base_url="http://unused", api_key="k", instructions=instructions)
    assert str(info.value).startswith("instructions must be text (a str) or None, not ")
