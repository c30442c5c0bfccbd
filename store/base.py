"""The `Store` protocol and the run-id rule every entry point shares.

A store is any object with `append`, `load` and `list_runs`: the seed's
three-method contract, so a Postgres or S3 store is a small class. Run ids
become file names and Temporal workflow ids, so one validator guards both.
"""

from __future__ import annotations

import uuid
from typing import Protocol, runtime_checkable

from agentor_temporal.store.events import Event

#: Longest run id accepted: a file name and a workflow id must both hold it.
MAX_RUN_ID_LENGTH = 200


@runtime_checkable
class Store(Protocol):
    """Append-only event log per run."""

    def append(self, run_id: str, event: Event) -> None:
        """Save one event. Called once per event, in order."""

    def load(self, run_id: str) -> list[Event]:
        """Return every event of a run, in order ([] for an unknown run)."""
        ...

    def list_runs(self) -> list[str]:
        """Return every known run id."""
        ...


def new_run_id() -> str:
    """A fresh run id: uuid4 hex, as Agentor makes them."""
    return uuid.uuid4().hex


def validate_run_id(run_id: object) -> str:
    """Return `run_id` if it is safe as a file name and a workflow id.

    Refuses what could land a file outside a runs directory (`../x`,
    `/tmp/x`, `a\\b`, `C:x`), hide it (`.x`), or break a terminal or a
    visibility query (control characters, quotes). Real ids are uuid hex, so
    this refuses nothing legitimate.

    Raises:
        ValueError: naming the id and the rule it breaks.
    """
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"Invalid run id {run_id!r}: it must be a non-empty string.")
    if run_id.startswith("."):
        raise ValueError(f"Invalid run id {run_id!r}: it must not start with '.'.")
    bad = [c for c in run_id if c in "/\\:'\"" or ord(c) < 32 or ord(c) == 127]
    if bad:
        raise ValueError(
            f"Invalid run id {run_id!r}: it must not contain {''.join(sorted(set(bad)))!r} "
            "(path separators, ':', quotes and control characters are refused)."
        )
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise ValueError(
            f"Invalid run id {run_id[:20]!r}...: longer than {MAX_RUN_ID_LENGTH} characters."
        )
    return run_id
