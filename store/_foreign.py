"""Values another writer's log gives in shapes this format does not: read as it means them.

A log written by another tool, or edited by hand, loads here (`Event.from_dict`)
and is resumed, shown and mirrored. A value of another kind kept as it came
passed the load and failed a reader far from it, on every reading: a run whose
outcome could never be read again, or a resume every provider refused.
"""

from __future__ import annotations

from types import NoneType
from typing import Any

from agentor_temporal.store.encoding import standard_json

#: Text fields replay does not rebuild the conversation from: another writer's
#: value of another type (an error as an object or `true`, a reasoning as its
#: parts) is kept as its JSON text, not met by every reader as a TypeError.
_TEXT_FIELDS = ("error", "reasoning", "name", "status", "agent", "model", "forked_from")


def as_text(data: dict[str, Any]) -> None:
    """Give each of `_TEXT_FIELDS` that holds another JSON value as its JSON text, and drop a
    time or turn that is no number.

    A log written elsewhere or edited by hand may say `"error": true` or
    `"error": {"message": ...}`: kept as it was, the event loaded, the run even
    resumed and completed, but every reading of its result (`resume`, `run`
    with its id, `show`) raised `TypeError` while masking it, for good. An
    error of `false` says there was none.
    """
    for key in _TEXT_FIELDS:
        value = data.get(key)
        if value is None or isinstance(value, str):
            continue
        if key == "error" and value is False:
            data[key] = None
        else:
            data[key] = standard_json(value)
    # a time as text ("2024-05-01T12:00:00Z") or a turn as text: each reader
    # subtracts times and compares turns; such a value is unknown here
    for key in ("started_at", "ended_at"):
        at = data.get(key)
        if isinstance(at, bool) or not isinstance(at, (int, float, NoneType)):
            data[key] = None
    turn = data.get("turn")
    if isinstance(turn, float) and turn.is_integer():
        data["turn"] = int(turn)
    elif isinstance(turn, bool) or not isinstance(turn, (int, NoneType)):
        data["turn"] = None


def _call_with_text_arguments(call: Any) -> Any:
    """`call` with its function's arguments as JSON text when they were given as a value."""
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, (dict, list)):
        return call
    return {**call, "function": {**function, "arguments": standard_json(arguments)}}  # type: ignore[dict-item]


def text_arguments(data: dict[str, Any]) -> None:
    """Write the arguments of the calls replay sends to the model as JSON text.

    Another writer's log may keep a call's arguments as the object they parse
    to: replayed as they were, a provider refuses the request ("expected a
    string, but got an object"), on every resume. Model replies are read so
    too (`_reply_json`). The caller's dicts are left as they were.
    """
    calls = data.get("calls")
    if isinstance(calls, list):
        data["calls"] = [_call_with_text_arguments(c) for c in calls]
    messages = data.get("messages")
    if isinstance(messages, list):
        data["messages"] = [
            {**m, "tool_calls": [_call_with_text_arguments(c) for c in m["tool_calls"]]}
            if isinstance(m, dict) and isinstance(m.get("tool_calls"), list)
            else m
            for m in messages
        ]
