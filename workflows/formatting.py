"""How runs read for people: tool calls as one line, failures by their cause.

Shared by the workflow (UI summaries and current details), the facade and the
CLI, so a call reads the same in the Temporal UI, `agentor-temporal show` and
an error message. Pure functions over plain values.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import FailureError

from agentor_temporal.workflows.payloads import encoded_size

#: Longest activity summary, in bytes as Temporal encodes it (JSON, non-ASCII
#: escaped: an emoji is 12 bytes): the UI shows one line per activity, and a
#: summary is a payload of the command that schedules the activity, so a
#: name or arguments of megabytes must not make it one.
SUMMARY_BYTES = 200

#: How the answer to a call a person denied begins (the model reads it): the
#: worker masks the keys it knows in such an answer before sending it, since a
#: plain client's decision reaches the run unmasked (`activities._client_text`).
DENIED_ANSWER = "Error: a person denied this call"


def fit(text: str, limit: int, end: str = "...") -> str:
    """`text` cut to at most `limit` bytes as Temporal encodes it, ending with `end` if cut."""
    if len(text) <= limit and encoded_size(text) - 2 <= limit:
        return text
    # every character costs at least one byte, so no longer prefix can fit
    lo, hi = 0, min(len(text), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if encoded_size(text[:mid] + end) - 2 <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + end


def call_summary(name: str, args: Any) -> str:
    """How a tool call reads in the UI: `get_weather(city='London')`.

    `fit` reads no further than `SUMMARY_BYTES` characters of a text it cuts,
    so the arguments are written only that far (the same summary): each call
    of a turn of 500 wrote all its arguments out, twice.
    """
    if args is not None and not isinstance(args, dict):
        # another writer's log may give a call's arguments as a list or a text:
        # shown as they are, where `.items()` failed `show` on them for good
        return fit(f"{name}({args!r})", SUMMARY_BYTES, "...)")
    parts, length = [f"{name}("], len(name) + 1
    for k, v in (args or {}).items():
        part = f"{', ' if len(parts) > 1 else ''}{k}={v!r}"
        parts.append(part)
        length += len(part)
        if length > SUMMARY_BYTES:
            return fit("".join(parts)[: SUMMARY_BYTES + 1], SUMMARY_BYTES, "...)")
    return fit("".join(parts) + ")", SUMMARY_BYTES, "...)")


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


def printable(value: object) -> str:
    """A name a model or client chose (a call id, who decided) as a terminal shows it: as it
    is when it is printable, else as a Python string literal, so a newline in it writes no
    line of its own and an escape sequence does not act on the reader's terminal."""
    text = str(value)
    return text if text.isprintable() else ascii(text)


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
