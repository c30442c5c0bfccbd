"""Reading a remote activity's result, which any Temporal client may have written.

`temporal activity complete --activity-id tool-1-0 --result '"done"'` (or
the SDK's async activity handle) ends a running activity with whatever JSON
it is given, and the SDK decodes an activity's result into its type before
the workflow's own code runs: a result of another shape raised there
("Failed decoding arguments", or an AttributeError on a null), which failed
every workflow task of the run, for good. So the run's remote activities
(model requests and tool calls; local activities cannot be completed from
outside) are asked for their payload as it is and read here, and a result
the run cannot take raises `ForeignResult`, which its caller turns into the
run's failure, saying what came and what to do. Nothing here is a command:
a result our own workers wrote reads as before, on replay too.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue

from agentor_temporal.store.events import Usage
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import fit

T = TypeVar("T")

#: Bytes of a foreign result's description a failure quotes.
SHOWN_BYTES = 300


class ForeignResult(Exception):
    """An activity result the run cannot take: completed from outside with another shape."""


def read_result(raw: Any, cls: type[T], what: str) -> T:
    """`raw` (the activity's payload) as a `cls`, checked as the run records it.

    Args:
        raw: the awaited activity's result, asked for as `RawValue`.
        cls: the activity's result dataclass.
        what: the activity, for the message ("get_weather(city='Oslo')").

    Raises:
        ForeignResult: naming what is wrong and what to do.
    """
    problem: str | None
    value: Any = raw
    try:
        if isinstance(raw, RawValue):
            value = workflow.payload_converter().from_payload(raw.payload, cls)
    except Exception as exc:  # the converter's own errors, of any type
        problem = f"{type(exc).__name__}: {exc}"
    else:
        problem = None if isinstance(value, cls) else f"a {type(value).__name__}"
        if problem is None:
            problem = _field_problem(value)
    if problem is None:
        result: T = value
        return result
    raise ForeignResult(
        f"{what} was completed with a result the run cannot take "
        f"({fit(problem, SHOWN_BYTES)}): it was not answered by an agentor-temporal worker "
        "(an activity completed by hand, `temporal activity complete`, must give the "
        "activity's own result shape). Resume the run to go on from before it."
    )


def _field_problem(value: Any) -> str | None:
    """What in a decoded result the run cannot record: times no clock holds, token counts
    past AgentTokens' range, calls not shaped as the model's (the run's workers never
    send any of these: they check the model's reply as it comes)."""
    for index, call in enumerate(getattr(value, "calls", None) or []):
        function = call.get("function")
        if not isinstance(function, dict):
            return f"calls[{index}] has no function object"
        for where, key in ((call, "id"), (function, "name"), (function, "arguments")):
            if not isinstance(where.get(key), (str, type(None))):
                return f"calls[{index}]'s {key} is not text"
    for name in ("started_at", "ended_at"):
        at = getattr(value, name, None)
        if at is None:
            continue
        try:
            datetime.fromtimestamp(at, timezone.utc)
        except (OverflowError, ValueError, OSError, TypeError):
            return f"{name} is {fit(repr(at), 40)}, not a time in seconds since the epoch"
    usage = getattr(value, "usage", None)
    if usage is not None:
        try:
            counts = vars(Usage.from_dict(usage))
        except (TypeError, ValueError, OverflowError, AttributeError) as exc:
            return f"usage is not token counts: {exc}"
        for name, count in counts.items():
            if not 0 <= count <= policies.MAX_TOKEN_COUNT:
                return f"usage.{name} is {count}, outside 0 to {policies.MAX_TOKEN_COUNT}"
    return None
