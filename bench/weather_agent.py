"""The agent every benchmark runs: the seed's weather agent (2 generations, 1 tool)."""

from __future__ import annotations

import os

from agentor_temporal import Agentor, function_tool


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    return f"The weather in {city} is sunny and 22C."


weather = Agentor(
    name="Weather Agent",
    model="gpt-4o-mini",
    instructions="You are a helpful weather assistant.",
    tools=[get_weather],
    embedded_worker=False,
    # a worker process of `bench/run.py`'s in-flight scenario may be asked for it
    local_model_calls=os.environ.get("BENCH_LOCAL_MODEL_CALLS") == "1",
)
