"""A streamed reply's deltas at a pace its run's history can hold (`PacedDeltas`).

Each batch of deltas is a signal: four history events with its workflow task.
A reply streamed for 30 minutes at the full pace would have added 72,000
events, past the 51,200 at which Temporal terminates a run.
"""

from __future__ import annotations

import asyncio

from agentor_temporal.activities.streaming import PacedDeltas
from agentor_temporal.workflows import policies


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stream(seconds: float, every: float = 0.01) -> tuple[list[str], str]:
    """Feed one character each `every` seconds for `seconds`; what was sent, and what came."""
    clock, sent = Clock(), []

    async def sink(text: str) -> None:
        sent.append(text)

    async def main() -> str:
        paced, came = PacedDeltas(sink, clock), []
        for i in range(round(seconds / every)):
            char = "abcdefghij"[i % 10]
            came.append(char)
            await paced(char)
            clock.now += every
        await paced.flush()
        return "".join(came)

    return sent, asyncio.run(main())


def test_a_short_reply_goes_out_as_it_comes() -> None:
    sent, came = stream(5.0)
    assert len(sent) == 500 and "".join(sent) == came


def test_a_long_reply_slows_then_stops_and_its_items_stay_bounded() -> None:
    sent, came = stream(1800.0)  # 30 minutes, 100 deltas a second
    live = round(policies.DELTAS_LIVE_FOR / 0.01)
    slow = (policies.DELTAS_UNTIL - policies.DELTAS_LIVE_FOR) / policies.DELTAS_SLOW_INTERVAL
    # as they came for the first minute, then one item a second, then none
    assert sent[:live] == list(came[:live])
    assert len(sent) <= live + slow + 1
    # nothing lost before the stop: what was sent is the reply's beginning
    assert came.startswith("".join(sent))
    assert len("".join(sent)) >= round(policies.DELTAS_UNTIL / 0.01) - 100
