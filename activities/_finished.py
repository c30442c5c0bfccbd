"""`FinishedCalls`: answers of tool calls this worker process already finished.

When a finished call's completion does not reach the server (the server
restarted meanwhile, or the worker's event loop was blocked past the heartbeat
timeout), Temporal runs the call again. If that retry lands on the process
that finished it, the recorded answer is returned instead of running the tool
a second time. Bounded: the latest calls only, and only answers of modest size.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from temporalio import activity

from agentor_temporal.workflows.activity_types import CallToolResult


class FinishedCalls:
    """Answers of calls this process finished, by workflow execution and activity id."""

    MAX_CALLS = 256
    MAX_ANSWER_BYTES = 16_000

    def __init__(self) -> None:
        self._answers: OrderedDict[tuple[str, ...], CallToolResult] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(call_id: str) -> tuple[str, ...] | None:
        """(workflow execution, activity id, call id) of the running call; None outside a worker."""
        if not activity.in_activity():
            return None
        info = activity.info()
        return (info.workflow_run_id or "", info.activity_id, call_id)

    def get(self, call_id: str) -> CallToolResult | None:
        """The answer of the running call, if this process already finished it."""
        key = self.key(call_id)
        with self._lock:
            return self._answers.get(key) if key is not None else None

    def put(self, call_id: str, answer: CallToolResult) -> None:
        """Remember the running call's answer."""
        key = self.key(call_id)
        if key is None or len(answer.result or "") > self.MAX_ANSWER_BYTES:
            return
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self.MAX_CALLS:
                self._answers.popitem(last=False)
