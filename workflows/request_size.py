"""Model requests a run cannot make, and the reason it ends with instead.

Scheduling a request over Temporal's payload limit would wedge the run
(Temporal refuses the payload and retries the workflow task forever), and a
request sent by reference can still grow past what any model endpoint
accepts; either way the run ends saying why.
"""

from __future__ import annotations

from typing import Any

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.versions import adopted


def oversized(request: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> str | None:
    """Why a request sent whole cannot be scheduled (too big for one payload), or None."""
    size = encoded_size(request) + encoded_size(schemas)
    if size <= policies.MAX_REQUEST_BYTES or not adopted(policies.PATCH_REQUEST_SIZE_LIMIT):
        return None
    return (
        f"The conversation has grown to {size / 1e6:.1f} MB, over the 2 MB Temporal "
        f"accepts in one payload (runs stop at {policies.MAX_REQUEST_BYTES / 1e6:.1f} MB). "
        "Have tools return less, or start a new run from a summary."
    )


def too_big(size: int) -> str | None:
    """Why a request sent by reference cannot be made: no model endpoint takes it."""
    if size <= policies.MAX_MODEL_REQUEST_BYTES:
        return None
    return (
        f"The conversation has grown to {size / 1e6:.1f} MB, more than a model endpoint "
        f"accepts in one request (runs stop at {policies.MAX_MODEL_REQUEST_BYTES / 1e6:.0f} "
        "MB, far past any model's context window). Have tools return less, or start a "
        "new run from a summary."
    )


def tail_too_big(request: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> str | None:
    """Why a request sent by reference cannot be scheduled: its own messages are too big.

    It carries the messages new since its base (a turn's answer and results)
    and the tool schemas, in one activity input.
    """
    size = encoded_size(request) + encoded_size(schemas)
    if size <= policies.MAX_PAYLOAD_BYTES or not adopted(policies.PATCH_TAIL_BUDGET):
        return None
    return (
        f"The turn's new messages and the tool schemas come to {size / 1e6:.1f} MB as Temporal "
        f"encodes them, over the {policies.MAX_PAYLOAD_BYTES / 1e6:.1f} MB one request may "
        "carry (Temporal accepts at most 2 MB in one payload). Have tools return less, or "
        "offer fewer tools."
    )
