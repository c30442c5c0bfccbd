"""`RunObserver`: everything that watches a run from inside its workflow.

Spans (`tracing.RunTrace`), search attributes (`status.RunStatus`) and
run-level metrics (`status.RunMetrics`) all follow the run through the events
it records, so the loop itself only opens the run's span, wraps its two kinds
of activity call, and hands every recorded event here (a `Journal` listener).
"""

from __future__ import annotations

from typing import Any

from agentor_temporal.store.events import Event, Usage
from agentor_temporal.workflows.status import RunMetrics, RunStatus
from agentor_temporal.workflows.tracing import RunTrace
from agentor_temporal.workflows.types import AgentRunInput, AgentSpec


class RunObserver:
    """The spans, search attributes and metrics of one run segment."""

    def __init__(self) -> None:
        self.trace = RunTrace()
        self.status = RunStatus()
        self.metrics = RunMetrics()

    def begin(self, spec: AgentSpec, inp: AgentRunInput, run_id: str, spent: Usage) -> Any:
        """Start watching an execution; returns the context manager of its run span.

        `spent` is what the run used before this execution: earlier segments,
        and this segment's earlier executions when it continued as new.
        """
        self.status.begin(spec, spent)
        self.metrics.begin(spec, new_run=inp.event_offset == 0)
        return self.trace.start(spec.name, spec.model, run_id)

    def on_event(self, event: Event) -> None:
        """A `Journal` listener: called with each event as it is recorded."""
        self.status.on_event(event)
        self.metrics.on_event(event)
        self.trace.on_event(event)
