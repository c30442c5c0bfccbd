"""`TaskAnswers`: the update answers one workflow task's completion carries, within a budget.

Every update a workflow answers goes back to the server in the completion of
the workflow task that answered it, and gRPC refuses a completion past 4 MB:
the SDK then fails the task as `GrpcMessageTooLarge`, which Temporal answers
by terminating the run. A run answers many updates in one task when many
callers wait on the same thing: stream followers' polls as an event is
published (`stream_window.PollGuard`), or callers' `wait_paused` as the run
pauses, each answered with every pending call's arguments (up to
`policies.MAX_REPLY_BYTES`): nine callers waiting on a turn of 500 calls made
one completion pass 4 MB, and the run was terminated. So the answers of one
task share `policies.POLL_BYTES_PER_TASK`; an answer past it says less, and
its caller asks again (a query, or its next poll), outside the completion.
Nothing here changes a command: answers are not compared on replay.
"""

from __future__ import annotations

from temporalio import workflow

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.types import PausedState


class TaskAnswers:
    """Bytes of update answers given in the current workflow task, against a shared budget.

    Args:
        budget: what one task's answers may carry together.
    """

    def __init__(self, budget: int = policies.POLL_BYTES_PER_TASK) -> None:
        self.budget = budget
        #: (history length of the workflow task, bytes answered in it)
        self._task: tuple[int, int] = (-1, 0)

    def used(self) -> int:
        """Bytes answered in the current workflow task so far."""
        task, used = self._task
        return used if task == workflow.info().get_current_history_length() else 0

    def add(self, size: int) -> None:
        """Count an answer of `size` bytes given in the current workflow task."""
        self._task = (workflow.info().get_current_history_length(), self.used() + size)

    def pause(self, state: PausedState) -> PausedState:
        """`state` as a `wait_paused` answer in this task: whole while the budget holds it.

        The task's first answer is whole (a turn's arguments are at most
        `policies.MAX_REPLY_BYTES`); past the budget the calls go without
        their arguments, or, when even that does not fit, none go, and the
        answer is `partial`: its caller reads the pause by the `paused` query.
        """
        used = self.used()
        size = encoded_size(state.pending)
        if not used or used + size <= self.budget:
            self.add(size)
            return state
        bare = [{k: v for k, v in p.items() if k != "args"} for p in state.pending]
        size = encoded_size(bare)
        if used + size > self.budget:
            bare, size = [], 0
        self.add(size)
        return PausedState(state.status, bare, partial=True)
