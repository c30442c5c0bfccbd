"""A streamed reply's deltas at a pace its run's history can hold (`PacedDeltas`).

Each batch of deltas is a signal: four history events with its workflow task.
A reply streamed for 30 minutes at the full pace would have added 72,000
events, past the 51,200 at which Temporal terminates a run. Each item costs
history ~190 bytes besides its text: a reply streamed a word a chunk, one
item each, put 14.7 MB in history for 480 kB of text.
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


GATHER = policies.DELTA_BATCH_INTERVAL.total_seconds()


def test_a_short_reply_goes_out_as_it_comes_an_item_per_batch_interval() -> None:
    sent, came = stream(5.0)  # 100 deltas a second, ten a batch interval
    assert "".join(sent) == came
    assert len(sent) <= 5.0 / GATHER + 1
    assert all(len(item) <= round(GATHER / 0.01) + 1 for item in sent)


def test_a_slow_reply_goes_out_a_delta_an_item() -> None:
    sent, came = stream(5.0, every=0.25)
    assert sent == list(came)


def test_text_held_within_an_interval_goes_out_when_no_more_comes() -> None:
    sent: list[str] = []

    async def sink(text: str) -> None:
        sent.append(text)

    async def main() -> None:
        paced = PacedDeltas(sink)
        await paced("a")
        await paced("b")
        await paced("c")
        assert sent == ["a"]  # the rest waits for the interval
        for _ in range(200):
            if len(sent) == 2:
                break
            await asyncio.sleep(0.05)
        assert sent == ["a", "bc"]
        await paced.flush()
        assert sent == ["a", "bc"]

    asyncio.run(main())


def test_a_long_reply_slows_then_stops_and_its_items_stay_bounded() -> None:
    sent, came = stream(1800.0)  # 30 minutes, 100 deltas a second
    live = round(policies.DELTAS_LIVE_FOR / 0.01)
    slow = (policies.DELTAS_UNTIL - policies.DELTAS_LIVE_FOR) / policies.DELTAS_SLOW_INTERVAL
    # as they came for the first minute (an item per batch interval), then one
    # item a second, then none
    live_items = round(policies.DELTAS_LIVE_FOR / GATHER)
    first_minute = "".join(sent[:live_items])
    assert came.startswith(first_minute) and len(first_minute) >= live - 2 * GATHER / 0.01
    assert len(sent) <= live_items + slow + 1
    # nothing lost before the stop: what was sent is the reply's beginning
    assert came.startswith("".join(sent))
    assert len("".join(sent)) >= round(policies.DELTAS_UNTIL / 0.01) - 100
