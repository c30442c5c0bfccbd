"""`MemoryStore`: runs in a dict for the life of the process.

Useful in tests and when you want events without a filesystem. It cannot
survive the crash it would be recovering from; Temporal's history can, which
is why every run here stays resumable from Temporal regardless of the store.
"""

from __future__ import annotations

import threading

from agentor_temporal.store.base import validate_run_id
from agentor_temporal.store.events import Event


class MemoryStore:
    """In-process store."""

    def __init__(self) -> None:
        self.runs: dict[str, list[Event]] = {}
        #: logs set aside because they did not match their run, by new name
        self.set_aside_runs: dict[str, list[Event]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self.runs)} runs)"

    def append(self, run_id: str, event: Event) -> None:
        """Save one event."""
        with self._lock:
            self.runs.setdefault(validate_run_id(run_id), []).append(event)

    def load(self, run_id: str) -> list[Event]:
        """Every event of the run, in order."""
        with self._lock:
            return list(self.runs.get(run_id, []))

    def count(self, run_id: str) -> int:
        """How many events the run has."""
        with self._lock:
            return len(self.runs.get(run_id, []))

    def list_runs(self) -> list[str]:
        """Every run id, sorted."""
        with self._lock:
            return sorted(self.runs)

    def set_aside(self, run_id: str) -> str | None:
        """Move a run's log out of the way (never drop it); return its new name."""
        with self._lock:
            events = self.runs.pop(run_id, None)
            if events is None:
                return None
            name = f"{run_id}.damaged-{len(self.set_aside_runs) + 1}"
            self.set_aside_runs[name] = events
            return name

    def retract(self, run_id: str, keep: int) -> str | None:
        """Move the run's events from position `keep` on aside; return their new name."""
        with self._lock:
            events = self.runs.get(run_id, [])
            if len(events) <= keep:
                return None
            name = f"{run_id}.unconfirmed-{len(self.set_aside_runs) + 1}"
            self.set_aside_runs[name] = events[keep:]
            del events[keep:]
            return name

    def delete(self, run_id: str) -> None:
        """Forget a run."""
        with self._lock:
            self.runs.pop(run_id, None)
