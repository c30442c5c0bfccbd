"""`StreamWindow`: a run's stream keeps a bounded tail, not every item it ever published.

`WorkflowStream` is an append-only log held in the workflow's memory: every
recorded event (a tool result of up to 256 KB, a generation's request) and
every text delta stays there until the execution ends. A long run cached in
a worker therefore held each event twice (the journal's list and the
stream's serialized copy), and a worker serving long runs grew by the sum of
their streams. The window drops the oldest items once the retained ones pass
`STREAM_WINDOW_BYTES`, but only items whose events are already in history:
a follower that was behind gets "truncated" from its poll, starts again from
the window's base, and reads the events it missed from history, exactly as
after a continue-as-new (see `carry.emptied`). Deltas are never persisted,
so a follower that far behind skips those of finished generations.
Truncation changes no command, so replays are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import PollInput, PollResult, PublishInput, WorkflowStream
from temporalio.exceptions import ApplicationError

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.task_answers import TaskAnswers


class StreamWindow:
    """The retained part of one execution's stream, by offset and encoded size.

    Args:
        stream: the run's stream.
        max_bytes: encoded bytes kept before the oldest history-backed items go.
    """

    def __init__(self, stream: WorkflowStream, max_bytes: int = policies.STREAM_WINDOW_BYTES):
        self._stream = stream
        self.max_bytes = max_bytes
        #: encoded size of each retained item, oldest first (filled lazily)
        self._sizes: list[int] = []

    def _log(self) -> tuple[list[Any], int] | None:
        # the stream has no public size accessor; without these (a future SDK
        # that renamed them) the window does nothing and the stream is whole
        log = getattr(self._stream, "_log", None)
        base = getattr(self._stream, "_base_offset", None)
        if not isinstance(log, list) or not isinstance(base, int):
            return None
        return log, base

    def end(self) -> int:
        """The offset the next published item will take."""
        found = self._log()
        return found[1] + len(found[0]) if found is not None else 0

    def release(self, recorded_before: int) -> int:
        """Let items before offset `recorded_before` go while the window is over its bound.

        Args:
            recorded_before: items before this offset hold only events in history.

        Returns:
            the number of items dropped.
        """
        found = self._log()
        if found is None:
            return 0
        log, base = found
        if len(self._sizes) > len(log):  # not ours to explain: start counting afresh
            self._sizes = []
        self._sizes.extend(item.data.ByteSize() for item in log[len(self._sizes) :])
        total = sum(self._sizes)
        if total <= self.max_bytes:
            return 0
        # down to half the bound, so a long run truncates now and then, not every step
        drop, limit = 0, min(recorded_before - base, len(self._sizes))
        while drop < limit and total > self.max_bytes // 2:
            total -= self._sizes[drop]
            drop += 1
        if drop:
            self._stream.truncate(base + drop)
            del self._sizes[:drop]
        return drop


def guard_publish(signalled: Callable[[], None]) -> Callable[[Sequence[RawValue]], bool]:
    """Take the stream's publish signal from its handler: the run's dynamic handler passes it on.

    `WorkflowStream` takes items by the `__temporal_workflow_stream_publish`
    signal, and any Temporal client can send it: one whose item is not
    base64 made its handler raise, which failed every workflow task of the
    run from then on, and so did one sent with no argument or with two (the
    SDK called the handler with what came). So the named handler is removed
    (the run's dynamic signal handler gets the publish, its arguments as
    sent) and the function returned reads one: a publish it cannot read is
    dropped, never raised. Our own publishers (activities sending deltas)
    never send such items, so what this drops was never a delta a follower
    wanted. Called once the stream is built, before the dynamic handler is
    set; it adds no command. Each publish read is counted by calling
    `signalled` (Temporal caps an execution's signals).

    Returns:
        the publish taker: False when the arguments are not one publish it
        could read (the caller counts those, `AgentRunWorkflow._other_signal`).
    """
    publish = workflow.get_signal_handler(policies.STREAM_PUBLISH_SIGNAL)
    if publish is not None:
        workflow.set_signal_handler(policies.STREAM_PUBLISH_SIGNAL, None)

    def take(args: Sequence[RawValue]) -> bool:
        if publish is None or len(args) != 1:
            return False
        try:
            payload = workflow.payload_converter().from_payload(args[0].payload, PublishInput)
        except Exception:
            return False
        signalled()
        try:
            publish(payload)
        except Exception as exc:
            workflow.logger.warning("Dropped a stream publish the run cannot read: %s", exc)
        return True

    return take


class PollGuard:
    """Keeps the stream's poll answers within what a workflow task and a history can take.

    Every follower's poll is an update, answered with up to 1 MB of items
    (the stream's own cap), and all the polls waiting when an event is
    published are answered in one workflow task, whose completion gRPC
    takes up to 4 MB: ten followers of a turn of 250 kB results made one
    past it, and Temporal terminated the run ("GrpcMessageTooLarge"). Each
    answer is also recorded in history, once per follower: so the answers
    of one workflow task share POLL_BYTES_PER_TASK (a poll past it is
    answered with fewer items, or none, and polls again at once, in the
    next task), and once an execution's answers pass POLL_BYTES_PER_EXECUTION
    new polls are refused, and their followers read history instead (as
    past Temporal's update cap); so are they once its history passes
    POLL_EVENTS_PER_EXECUTION events (every poll adds five, and a long
    streamed reply's followers poll every delta batch, all in one generation
    that no continue-as-new can split). Neither changes a command: answers are not
    compared on replay, and validators do not run then.

    Args:
        stream: the run's stream.
        answers: the task's budget, shared with the run's other update
            answers (`task_answers`); its own when not given.
    """

    def __init__(self, stream: WorkflowStream, answers: TaskAnswers | None = None) -> None:
        self._stream = stream
        self._answers = answers if answers is not None else TaskAnswers()
        #: bytes of poll answers this execution has recorded
        self.answered = 0

    def install(self) -> None:
        """Wrap the stream's poll handler and validator (adds no command)."""
        poll = workflow.get_update_handler(policies.STREAM_POLL_UPDATE)
        validate = getattr(self._stream, "_validate_poll", None)
        if poll is None or validate is None:
            return  # a stream that polls otherwise: left as it is

        async def guarded(payload: PollInput) -> PollResult:
            return self._fit(payload, await poll(payload))

        def validator(payload: PollInput) -> None:
            validate(payload)
            if self.answered > policies.POLL_BYTES_PER_EXECUTION or (
                workflow.info().get_current_history_length() > policies.POLL_EVENTS_PER_EXECUTION
            ):
                raise ApplicationError(
                    "This execution's stream answers have filled their share of its history; "
                    "read the run's events from history.",
                    type="StreamHistoryFull",
                )

        workflow.set_update_handler(policies.STREAM_POLL_UPDATE, guarded, validator=validator)

    def _fit(self, payload: PollInput, result: PollResult) -> PollResult:
        used = self._answers.used()
        kept: list[Any] = []
        size = 0
        for item in result.items:
            item_size = len(item.data) + len(item.topic) + 32
            # the task's first answer keeps one item, however large (the stream caps it)
            if used + size + item_size > self._answers.budget and (kept or used):
                break
            kept.append(item)
            size += item_size
        self._answers.add(size)
        self.answered += size
        if len(kept) == len(result.items):
            return result
        resume = result.items[len(kept)].offset if result.items else payload.from_offset
        return PollResult(items=kept, next_offset=resume, more_ready=True)
