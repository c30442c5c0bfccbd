"""Run persistence: the event model, the `Store` protocol and its stores.

Temporal's history is the durable record of every run; a store is the
documented JSONL mirror of it (and the way in for logs Agentor wrote). This
layer knows nothing of Temporal: `TemporalStore`, the projection of a run's
history, lives with the workflow (`agentor_temporal.workflows.projection`).
"""

from agentor_temporal.store.base import Store, new_run_id, validate_run_id
from agentor_temporal.store.events import (
    Event,
    EventType,
    PendingApproval,
    RunResult,
    RunStatus,
    Usage,
)
from agentor_temporal.store.file import FileStore
from agentor_temporal.store.memory import MemoryStore
from agentor_temporal.store.replay import (
    final_event,
    initial_messages,
    is_complete,
    pending_approvals,
    replay_messages,
    segment_events,
    total_usage,
)

__all__ = [
    "Event",
    "EventType",
    "FileStore",
    "MemoryStore",
    "PendingApproval",
    "RunResult",
    "RunStatus",
    "Store",
    "Usage",
    "final_event",
    "initial_messages",
    "is_complete",
    "new_run_id",
    "pending_approvals",
    "replay_messages",
    "segment_events",
    "total_usage",
    "validate_run_id",
]
