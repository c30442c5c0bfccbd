"""The seed's agent.py: a weather agent whose runs are saved and resumable.

Run it with `python agent.py` (from this directory). Every run is a Temporal
workflow; `runs/<run_id>.jsonl` holds the whole story in Agentor's format.
"""

from agentor_temporal import Agentor, FileStore, function_tool


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    return f"The weather in {city} is sunny and 22C."


agent = Agentor(
    name="Weather Agent",
    model="gpt-4o-mini",
    instructions="You are a helpful weather assistant.",
    tools=[get_weather],
    store=FileStore("runs"),
)

if __name__ == "__main__":
    result = agent.run("What is the weather in London?")

    print(result.run_id)  # cabc9046ac5040298aa362c0d6d2c5c5
    print(result.final_output)  # The weather in London is sunny with a temperature of 22°C.
