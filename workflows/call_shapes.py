"""The shapes of a model's calls a run reads in what a plain client may send it.

A run's input can come from any Temporal client. What the run then reads
without a check raises in its workflow task, which Temporal retries for ever:
the run wedges. So what it reads is checked where the input is, and a wrong
shape fails the run at once as `InvalidInput`, naming it.
"""

from __future__ import annotations

from typing import Any


def check_answer_call(index: int, call: dict[str, Any]) -> None:
    """Validate one call of `AgentRunInput.answer`: the run reads its function's arguments.

    A plain client's `"function": 5` or `"arguments": {...}` (not the JSON text
    a model sends) raised as the run recorded the call, in every workflow task.
    A name or id of another type is read as text, as it always was.

    Raises:
        ValueError: naming the call and what is wrong.
    """
    function = call.get("function")
    if function is not None and not isinstance(function, dict):
        raise ValueError(f'"answer"."calls"[{index}]."function" must be an object (set by resume)')
    arguments = (function or {}).get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        raise ValueError(
            f'"answer"."calls"[{index}]."function"."arguments" must be JSON text, as a model '
            "sends it (set by resume)"
        )
