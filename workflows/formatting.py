"""How runs read for people: tool calls as one line, failures by their cause.

Shared by the workflow (UI summaries and current details), the facade and the
CLI, so a call reads the same in the Temporal UI, `agentor-temporal show` and
an error message. Pure functions over plain values.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import FailureError

#: Longest call summary: the UI shows one line per activity.
SUMMARY_CHARS = 200


def call_summary(name: str, args: dict[str, Any] | None) -> str:
    """How a tool call reads in the UI: `get_weather(city='London')`."""
    inner = ", ".join(f"{k}={v!r}" for k, v in (args or {}).items())
    text = f"{name}({inner})"
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 4] + "...)"


#: Characters of a caller's name or id quoted in an error message.
QUOTED_CHARS = 100


def quoted(value: str, limit: int = QUOTED_CHARS) -> str:
    """`value` as an error message quotes it (`repr`), cut when long.

    A name a client sent can be megabytes long; a failure quoting it whole is
    recorded in history, and one over Temporal's limits fails every
    workflow task after it.
    """
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


def failure_message(exc: BaseException) -> str:
    """The innermost failure's message: what actually went wrong."""
    cause: BaseException | None = exc
    message = str(exc)
    while cause is not None:
        if isinstance(cause, FailureError) and cause.message:
            message = cause.message
        cause = cause.__cause__
    return message


def plural(count: int, noun: str) -> str:
    """`1 turn`, `2 turns`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


#: Prompt characters shown in a run's UI summary.
PREVIEW_CHARS = 80


def preview_input(input: str | list[dict[str, Any]]) -> str:
    """A run's input as one short line: the prompt, or the last user message."""
    if isinstance(input, str):
        text = input
    else:
        users = [m.get("content") for m in input if m.get("role") == "user"]
        text = str(users[-1] if users else "")
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
