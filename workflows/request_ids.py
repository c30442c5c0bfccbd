"""The request id a decision sent by signal (`decide_signal`) names.

A `decide_signal` answers nothing: what it came to is kept under its request id
for the sender's `signalled_decision` query. One naming no id the run can keep
(none, not text, longer than `MAX_REQUEST_ID`: a plain client sending the bare
decision, or its own long id) was dropped in silence, and a query naming such
an id answered None ("not taken yet") for ever.
"""

from __future__ import annotations

from typing import Any

#: the longest request id a decision sent by signal may name: the run keeps
#: the outcomes of the latest `policies.SIGNALLED_DECISIONS_KEPT` under theirs
MAX_REQUEST_ID = 64

#: what a `decide_signal` carries, for the messages dropping one that does not
SIGNAL_SHAPE = '{"request_id": text of 1 to 64 characters, "decision": a decision}'


def request_id_problem(request_id: Any) -> str | None:
    """Why `request_id` cannot name a decision sent by signal (None when it can).

    The outcome of such a decision is kept under its request id for the
    `signalled_decision` query; a signal whose id is not one is dropped unread,
    and a query naming such an id is refused rather than answered "not yet".
    """
    if request_id is None:
        return "it names no request_id"
    if not isinstance(request_id, str):
        return f"its request_id must be text, got {type(request_id).__name__}"
    if not 1 <= len(request_id) <= MAX_REQUEST_ID:
        return f"its request_id must be 1 to {MAX_REQUEST_ID} characters, got {len(request_id):,}"
    return None


def query_refusal(request_id: str) -> str | None:
    """Why the `signalled_decision` query refuses `request_id` (None when it takes it):
    no decision sent by signal can be kept under it, so "not taken yet" would never change."""
    problem = request_id_problem(request_id)
    if problem is None:
        return None
    return (
        "The signalled_decision query names a request id no decision can have: "
        f"{problem.removeprefix('its ')}; a decide_signal naming one is dropped unread (the "
        f"state query's unreadable_signals counts it). Send the decision again as {SIGNAL_SHAPE}."
    )
