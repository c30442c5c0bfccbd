"""How often a waiting caller looks at its run for a workflow task failing for ever."""

from __future__ import annotations

import itertools

from agentor_temporal import _stuck


def test_a_long_wait_looks_at_the_run_less_and_less_often() -> None:
    # a thousand callers waiting hours for a person must not cost the server
    # a describe each every 10 s for as long as they wait
    waits = list(itertools.islice(_stuck.poll_intervals(), 20))
    assert waits[0] == _stuck.STUCK_POLL
    assert all(b >= a for a, b in itertools.pairwise(waits))
    assert waits[-1] == _stuck.STUCK_POLL * _stuck.STUCK_POLL_LIMIT == 120.0
    # the first minutes still look often enough to warn soon
    assert sum(waits[:4]) < 90
