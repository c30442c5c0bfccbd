"""What a workflow task says of the history, read alike live and in a replay.

A local activity's result can reach the workflow a task after the one that
recorded its marker (`tests/late_results.py`: seen when queries came as the
task completed), and a replay hands it over in the task that recorded it.
Code right after a local activity (a model request with `local_model_calls`,
a journal step, an approval predicate) thus reads a later task's figures
live than in a replay: the history's length (about three events more), its
size, Temporal's continue-as-new suggestion. A budget falling in that gap
continued a run as new live and not in the replay, and every replay of it
(each query of the run, a worker that did not have it cached) failed with
TMPRL1100.

So from `policies.STEADY_READINGS`, in the workflow task a local activity's
result came in, the figures read are those of the task it was started in,
which live and replay share. Nothing here issues a command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.versions import level

T = TypeVar("T")


@dataclass(frozen=True)
class Reading:
    """The history's figures as of a workflow task (`history_watch.history_now`)."""

    size: int
    events: int
    suggested: bool


@dataclass
class _Held:
    #: the history length naming the task a local activity's result came in
    task: int
    #: the reading of the task the activity was started in
    reading: Reading


def _fresh() -> Reading:
    """The current task's figures, its signals counted (`policies.SIGNALS_SIZED`).

    The server's figures (the task's started event) can leave out signals: a
    task it starts as the one before completes reports the history before
    the signals that came while that one ran. From `policies.SIGNALS_SIZED`
    each is at least what the execution's first task saw plus what the
    signals taken since add (`AgentRunWorkflow.sized_signal`): a floor, never
    more than the history holds.
    """
    info = workflow.info()
    size, events = info.get_current_history_size(), info.get_current_history_length()
    suggested = info.is_continue_as_new_suggested()
    if level() >= policies.SIGNALS_SIZED:
        run = workflow.instance()
        first_size, first_events = getattr(run, "first_history", (0, 0))
        signal_bytes = int(getattr(run, "signal_bytes", 0))
        signals = int(getattr(run, "signals", 0))
        size, events = max(size, first_size + signal_bytes), max(events, first_events + signals)
    return Reading(size=size, events=events, suggested=suggested)


def reading() -> Reading:
    """The current task's figures; in the task a local activity's result came in, those
    of the task it was started in (from `policies.STEADY_READINGS`)."""
    held: _Held | None = getattr(workflow.instance(), "steady_held", None)
    if (
        held is None
        or held.task != workflow.info().get_current_history_length()
        or level() < policies.STEADY_READINGS
    ):
        return _fresh()
    return held.reading


def local(handle: workflow.ActivityHandle[T]) -> workflow.ActivityHandle[T]:
    """`handle` (a local activity just started), its result's task read as its start's.

    Noted as the result (or failure, or cancel) reaches the workflow, before
    the code awaiting it runs on (its callback comes first), and before any
    condition is checked again.
    """
    before = reading()
    run: Any = workflow.instance()

    def _came(_: object) -> None:
        now = workflow.info().get_current_history_length()
        held: _Held | None = getattr(run, "steady_held", None)
        if held is not None and held.task == now:
            # several results in one task: the reading of the earliest start, the
            # same whichever result the task handed over first
            if held.reading.events <= before.events:
                return
        run.steady_held = _Held(task=now, reading=before)

    handle.add_done_callback(_came)
    return handle
