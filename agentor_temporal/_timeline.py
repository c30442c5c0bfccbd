"""A run drawn as a timeline: `agentor-temporal show RUN_ID --timeline run.png`.

Read from Temporal history alone (no worker), so it works for a run in flight
as for a finished one. History says when each activity was scheduled, when
its last attempt started and on which worker, and when it closed; the run's
events say what each one was and when people were asked and answered. Each
tool call of a turn gets its own lane, so parallel calls sit side by side;
the time an activity spent before its last attempt (failed attempts, backoff,
a dead worker's heartbeat timeout) is drawn hatched, and a change of the
worker running the workflow is a dashed line. Drawing needs matplotlib (the
`timeline` extra); reading does not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal.activities._redact import mask_input, secrets
from agentor_temporal.store import Event
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.formatting import call_summary
from agentor_temporal.workflows.policies import CALL_TOOL, GENERATE
from agentor_temporal.workflows.redaction import redact

#: What each kind of bar is drawn in (colour-blind-safe, and what tests look for).
COLORS = {
    "generation": "#0072B2",
    "tool": "#009E73",
    "approval": "#E69F00",
    "retry": "#F5C6A5",
    "segment": "#999999",
}
#: The hatching and outline of the time before a last attempt.
RETRY_EDGE = "#D55E00"

_TOOL_ID = re.compile(r"^tool-(\d+)-(\d+)$")
_GENERATE_ID = re.compile(r"^generate-(\d+)$")


@dataclass
class Bar:
    """One thing that took time, in one lane."""

    lane: str
    kind: str
    start: float
    end: float
    label: str
    #: short worker name (w1, w2, ...) of the attempt that ran it
    worker: str | None = None
    attempts: int = 1
    failed: bool = False


@dataclass
class Timeline:
    """A run's bars and markers, in epoch seconds."""

    run_id: str
    title: str
    start: float
    end: float
    bars: list[Bar] = field(default_factory=list)
    #: (time, text): the workflow moved to another worker, or a segment began
    markers: list[tuple[float, str]] = field(default_factory=list)
    #: short worker name -> the worker's identity
    workers: dict[str, str] = field(default_factory=dict)

    def lanes(self) -> list[str]:
        """Lanes top to bottom: the run, the model, then one per parallel call."""
        calls = sorted({b.lane for b in self.bars if b.lane.startswith("call")}, key=_lane_key)
        return ["run", "model", *calls]

    def summary(self) -> dict[str, int]:
        """How many of each thing the picture shows (written into the PNG too)."""
        return {
            "segments": sum(b.kind == "segment" for b in self.bars),
            "generations": sum(b.kind == "generation" for b in self.bars),
            "tool_calls": sum(b.kind == "tool" for b in self.bars),
            "approvals": sum(b.kind == "approval" for b in self.bars),
            "retried": sum(b.kind == "retry" for b in self.bars),
            "workers": len(self.workers),
            "worker_changes": sum(m[1].startswith("worker") for m in self.markers),
        }


def _lane_key(lane: str) -> int:
    return int(lane.split()[-1])


def _when(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


def _shown_call(name: str, args: Any) -> str:
    """A call's label, masked of the keys this process knows as every reader shows a call
    (`shown_event`): a run a worker that did not know a key recorded (or an older
    version), in a tool call's bar and in a call waiting for a person's."""
    return call_summary(mask_input(name), mask_input(args))


class _Reader:
    """Builds a `Timeline` from a run's histories and events."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.client = client
        self.timeline = Timeline(run_id=run_id, title=run_id, start=0.0, end=0.0)
        self._last_identity: str | None = None

    def worker(self, identity: str) -> str:
        for short, full in self.timeline.workers.items():
            if full == identity:
                return short
        short = f"w{len(self.timeline.workers) + 1}"
        self.timeline.workers[short] = identity
        return short

    async def segment(self, index: int, segment: Segment) -> None:
        history = await self.client.get_workflow_handle(
            self.timeline.run_id, run_id=segment.execution_run_id
        ).fetch_history()
        scheduled: dict[int, tuple[str, str, float, Any]] = {}
        started: dict[int, tuple[float, int, str, str]] = {}
        last = segment.start_time or 0.0
        for event in history.events:
            kind = event.event_type
            last = max(last, _when(event))
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                identity = event.workflow_task_started_event_attributes.identity
                if not identity:
                    continue  # a task the server started itself (an update's, say)
                if self._last_identity is not None and identity != self._last_identity:
                    self.timeline.markers.append(
                        (_when(event), f"worker {self.worker(identity)} takes over")
                    )
                self.worker(identity)
                self._last_identity = identity
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                payload = attrs.input.payloads[0] if attrs.input.payloads else None
                scheduled[event.event_id] = (
                    attrs.activity_type.name,
                    attrs.activity_id,
                    _when(event),
                    payload,
                )
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attrs_s = event.activity_task_started_event_attributes
                failure = attrs_s.last_failure.message if attrs_s.HasField("last_failure") else ""
                started[attrs_s.scheduled_event_id] = (
                    _when(event),
                    attrs_s.attempt,
                    attrs_s.identity,
                    failure,
                )
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                await self.local_generation(event)
            else:
                closed = _closed(event)
                if closed is not None and closed[0] in scheduled:
                    await self.activity(scheduled.pop(closed[0]), started, closed, segment)
        for event_id, pending in scheduled.items():
            await self.activity(pending, started, (event_id, last, False), segment)
        status = segment.status
        if segment.status == "completed" and segment.result:
            status = str(segment.result.get("status") or status)
        self.timeline.bars.append(
            Bar("run", "segment", segment.start_time or last, segment.close_time or last,
                f"segment {index + 1}: {status}")
        )  # fmt: skip
        if index:
            self.timeline.markers.append((segment.start_time or last, f"segment {index + 1}"))
        self.approvals(segment.events)

    async def activity(
        self,
        scheduled: tuple[str, str, float, Any],
        started: dict[int, tuple[float, int, str, str]],
        closed: tuple[int, float, bool],
        segment: Segment,
    ) -> None:
        kind, activity_id, at, payload = scheduled
        if kind not in (GENERATE, CALL_TOOL):
            return
        event_id, end, failed = closed
        begin, attempt, identity, failure = started.get(event_id, (end, 1, "", ""))
        if kind == GENERATE:
            match = _GENERATE_ID.match(activity_id)
            lane, label, bar_kind = (
                "model",
                f"turn {match.group(1) if match else '?'}",
                "generation",
            )
        else:
            match = _TOOL_ID.match(activity_id)
            index = int(match.group(2)) + 1 if match else 1
            inp = await self._decode(payload)
            name = str(inp.get("name")) if isinstance(inp, dict) else "tool"
            args = inp.get("args") if isinstance(inp, dict) else None
            lane, label, bar_kind = f"call {index}", _shown_call(name, args), "tool"
        worker = self.worker(identity) if identity else None
        if attempt > 1:
            # one label for both parts: the last attempt's bar is often a sliver
            why = f" ({(redact(failure, secrets()))[:60]})" if failure else ""
            done = f"{label} [{worker}]" if worker else label
            text = f"{done}: attempt {attempt} after {attempt - 1} failed{why}"
            self.timeline.bars.append(Bar(lane, "retry", at, begin, text))
            label, worker = "", None
        self.timeline.bars.append(
            Bar(lane, bar_kind, begin if attempt > 1 else at, end, label, worker, attempt, failed)
        )

    async def local_generation(self, event: Any) -> None:
        """A model request made as a local activity (`local_model_calls`): its marker."""
        details = event.marker_recorded_event_attributes.details
        if "data" not in details or "result" not in details:
            return
        try:
            info = json.loads(details["data"].payloads[0].data)
        except (ValueError, IndexError):
            return
        if not isinstance(info, dict) or info.get("activity_type") != GENERATE:
            return
        result = await self._decode(details["result"].payloads[0])
        if not isinstance(result, dict) or result.get("started_at") is None:
            return
        match = _GENERATE_ID.match(str(info.get("activity_id") or ""))
        label = f"turn {match.group(1) if match else '?'} (local)"
        attempt = int(info.get("attempt") or 1)
        worker = self.worker(self._last_identity) if self._last_identity else None
        self.timeline.bars.append(
            Bar("model", "generation", float(result["started_at"]), float(result["ended_at"]),
                label, worker, attempt)
        )  # fmt: skip

    def approvals(self, events: list[Event]) -> None:
        lanes: dict[str, str] = {}
        turn_calls: dict[int, int] = {}
        asked: dict[str, Event] = {}
        for event in events:
            if event.type == "tool_call" and event.call_id:
                turn = event.turn or 0
                turn_calls[turn] = turn_calls.get(turn, 0) + 1
                lanes[str(event.call_id)] = f"call {turn_calls[turn]}"
            elif event.type == "approval_request" and event.call_id:
                asked[str(event.call_id)] = event
            elif event.type == "approval_decision" and str(event.call_id) in asked:
                request = asked.pop(str(event.call_id))
                self._approval(lanes, request, event.ended_at, str(event.status))
        for request in asked.values():
            self._approval(lanes, request, self.timeline.end or None, "waiting")

    def _approval(
        self, lanes: dict[str, str], request: Event, end: float | None, verdict: str
    ) -> None:
        start = request.started_at or 0.0
        self.timeline.bars.append(
            Bar(
                lanes.get(str(request.call_id), "call 1"),
                "approval",
                start,
                end if end is not None else start,
                f"{_shown_call(str(request.name), request.args)}: {verdict}",
            )
        )

    async def _decode(self, payload: Any) -> Any:
        if payload is None:
            return None
        try:
            values = await self.client.data_converter.decode([payload])
        except Exception:
            return None
        return values[0] if values else None


def _closed(event: Any) -> tuple[int, float, bool] | None:
    """(scheduled event id, when, failed) of an activity's closing event."""
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        return (
            event.activity_task_completed_event_attributes.scheduled_event_id,
            _when(event),
            False,
        )
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        return event.activity_task_failed_event_attributes.scheduled_event_id, _when(event), True
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
        return event.activity_task_timed_out_event_attributes.scheduled_event_id, _when(event), True
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
        return event.activity_task_canceled_event_attributes.scheduled_event_id, _when(event), True
    return None


async def read_timeline(client: Client, run_id: str) -> Timeline | None:
    """The run's timeline from Temporal history, or None when Temporal has no such run."""
    segments = await TemporalStore(client).segments(run_id)
    if not segments:
        return None
    reader = _Reader(client, run_id)
    timeline = reader.timeline
    timeline.start = segments[0].start_time or 0.0
    for index, segment in enumerate(segments):
        await reader.segment(index, segment)
    timeline.end = max([timeline.start, *(b.end for b in timeline.bars)])
    for bar in timeline.bars:  # approvals still waiting reach the end of the picture
        if bar.kind == "approval" and bar.end <= bar.start:
            bar.end = timeline.end
    spec = next((s.spec for s in reversed(segments) if s.spec), None) or {}
    tokens = sum(
        e.usage.total_tokens
        for s in segments
        for e in s.events
        if e.type == "generation" and e.usage
    )
    status = next(b.label.split(": ", 1)[1] for b in reversed(timeline.bars) if b.kind == "segment")
    timeline.title = (
        f"run {run_id} · {spec.get('name', '?')} ({spec.get('model', '?')}) · {status} · "
        f"{tokens} tokens · {timeline.end - timeline.start:.1f} s"
    )
    return timeline


class _Labels:
    """Places labels where they fit: inside a wide bar, else beside it where the lane is free.

    Widths are estimated from the character count (7.5 pt text on a
    13-inch figure), which is close enough to keep labels off each other.
    """

    def __init__(self, timeline: Timeline, span: float) -> None:
        self.span = span
        self.t0 = timeline.start
        #: seconds one character takes on the time axis
        self.char = span * 4.7 / 1250
        self.taken: dict[str, list[tuple[float, float]]] = {}
        for bar in timeline.bars:
            self.taken.setdefault(bar.lane, []).append((bar.start - self.t0, bar.end - self.t0))

    def _free(self, lane: str, start: float, end: float, own: tuple[float, float]) -> bool:
        if start < -self.span * 0.01 or end > self.span * 1.02:
            return False
        return all(end <= a or start >= b for a, b in self.taken.get(lane, []) if (a, b) != own)

    def place(self, ax: Any, bar: Bar, y: float, *, inside_only: bool = False) -> None:
        """Label `bar`: inside it when it fits, else beside or above it (unless `inside_only`)."""
        text = bar.label + (f" [{bar.worker}]" if bar.worker else "")
        if not text:
            return
        start, end = bar.start - self.t0, bar.end - self.t0
        width = len(text) * self.char
        pad = self.span * 0.004
        if bar.kind == "segment" or width + 2 * pad <= end - start:
            ax.text(start + pad, y + (0.26 if bar.kind == "segment" else 0.0), text,
                    va="center", ha="left", fontsize=7.5, clip_on=True,
                    color="white" if bar.kind in ("generation", "tool") else "black")  # fmt: skip
            return
        if inside_only:
            return
        own = (start, end)
        for x0, x1, x, align in (
            (end + pad, end + pad + width, end + pad, "left"),
            (start - pad - width, start - pad, start - pad, "right"),
        ):
            if self._free(bar.lane, x0, x1, own):
                self.taken.setdefault(bar.lane, []).append((x0, x1))
                ax.text(x, y, text, va="center", ha=align, fontsize=7.5, clip_on=True)
                return
        # no room on either side: above the bar, small
        near_end = end > self.span * 0.75
        ax.text(end if near_end else start, y + 0.42, text, va="center",
                ha="right" if near_end else "left", fontsize=6.5, clip_on=True)  # fmt: skip


#: Bars past which only the labels that fit inside their bars are drawn: beside or
#: above, 2,000 of them overlap into noise, and placing each among the others was
#: quadratic.
MAX_LABELLED_BARS = 300


def draw(timeline: Timeline, path: str | Path) -> Path:
    """Write the timeline as a PNG; returns the path.

    Raises:
        ImportError: when matplotlib is not installed (the `timeline` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lanes = timeline.lanes()
    row = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    t0 = timeline.start
    span = max(timeline.end - t0, 1e-3)
    fig, ax = plt.subplots(figsize=(13, 1.6 + 0.62 * len(lanes)), dpi=110)
    # one collection per lane and look, not a patch per bar: a 1,000-turn run's 2,000
    # bars (and a label each) took minutes to draw
    groups: dict[tuple[float, str, bool], list[tuple[float, float]]] = {}
    for bar in timeline.bars:
        width = max(bar.end - bar.start, span * 0.004)
        groups.setdefault((row[bar.lane], bar.kind, bar.failed), []).append((bar.start - t0, width))
    for (y, kind, failed), ranges in groups.items():
        retry = kind == "retry"
        height = 0.3 if kind == "segment" else 0.62
        ax.broken_barh(
            ranges, (y - height / 2, height),
            facecolors=COLORS[kind], hatch="///" if retry else None,
            edgecolors="black" if failed else RETRY_EDGE if retry else COLORS[kind],
            linewidth=1.2 if failed else 0.8,
        )  # fmt: skip
    labels = _Labels(timeline, span)
    crowded = len(timeline.bars) > MAX_LABELLED_BARS
    for bar in timeline.bars:
        labels.place(ax, bar, row[bar.lane], inside_only=crowded)
    for at, text in timeline.markers:
        ax.axvline(at - t0, color="#555555", linestyle="--", linewidth=1)
        ax.text(at - t0, len(lanes) - 0.45, f" {text}", fontsize=7.5, color="#333333", va="top")
    ax.set_yticks([row[lane] for lane in lanes], lanes)
    ax.set_ylim(-0.6, len(lanes) - 0.3)
    ax.set_xlim(-span * 0.01, span * 1.02)
    ax.set_xlabel("seconds since the run started")
    ax.set_title(timeline.title, fontsize=10, loc="left")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    legend = [
        Patch(color=COLORS["generation"], label="generation"),
        Patch(color=COLORS["tool"], label="tool call"),
        Patch(color=COLORS["approval"], label="waiting for a person"),
        Patch(
            facecolor=COLORS["retry"],
            edgecolor=RETRY_EDGE,
            hatch="///",
            label="before the last attempt",
        ),  # fmt: skip
        Patch(color=COLORS["segment"], label="run segment"),
    ]
    workers = "  ".join(f"{k} = {v}" for k, v in timeline.workers.items())
    ax.legend(
        handles=legend,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16 - 0.2 / len(lanes)),
        ncol=5,
        fontsize=8,
        frameon=False,
        title=f"workers: {workers}",
        title_fontsize=8,
    )
    fig.tight_layout()
    target = Path(path)
    fig.savefig(
        target,
        metadata={
            "Title": f"agentor-temporal run {timeline.run_id}",
            "Description": json.dumps(timeline.summary()),
        },
    )
    plt.close(fig)
    return target
