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
