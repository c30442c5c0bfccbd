"""`show --timeline` of a long run draws in time proportional to what can be seen.

A 1,000-turn run has 2,000 bars: drawn as a patch and a label each (labels
placed among all the others), the picture took minutes (seen: 145 s for
`show --timeline` of a 1,000 x 1 KB run). Bars are drawn as one collection
per lane and look, and a crowded picture labels only what fits in its bar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentor_temporal._timeline import Bar, Timeline, draw

pytest.importorskip("matplotlib")


def _long_run(turns: int) -> Timeline:
    timeline = Timeline(run_id="long", title="long", start=0.0, end=turns * 0.1)
    timeline.bars.append(Bar("run", "segment", 0.0, turns * 0.1, "segment 1"))
    for turn in range(turns):
        at = turn * 0.1
        timeline.bars.append(Bar("model", "generation", at, at + 0.05, f"turn {turn + 1}", "w1"))
        timeline.bars.append(Bar("call 1", "tool", at + 0.05, at + 0.09, "read_chunk", "w1"))
    timeline.bars.append(Bar("call 1", "tool", 1.0, 1.01, "failed", "w1", failed=True))
    return timeline


def test_a_long_runs_timeline_draws_a_bounded_number_of_artists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    drawn: list[int] = []
    save = Figure.savefig

    def counted(fig: Figure, *args: Any, **kwargs: Any) -> None:
        ax = fig.axes[0]
        drawn.append(len(ax.patches) + len(ax.texts) + len(ax.collections))
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", counted)
    path = draw(_long_run(1000), tmp_path / "long.png")
    assert path.stat().st_size > 0
    assert drawn and drawn[0] < 100, drawn


def test_a_short_runs_bars_keep_their_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    texts: list[str] = []
    save = Figure.savefig

    def seen(fig: Figure, *args: Any, **kwargs: Any) -> None:
        texts.extend(t.get_text() for t in fig.axes[0].texts)
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", seen)
    draw(_long_run(3), tmp_path / "short.png")
    assert "read_chunk [w1]" in texts and "turn 3 [w1]" in texts, texts
