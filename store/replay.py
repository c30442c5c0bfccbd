"""Replay helpers: a run's events back into a conversation, a status, a cost.

Resuming is replaying. Each `generation` records the exact request, so the
latest one plus its reply and the tool results after it is the whole
conversation; a half-finished tool batch is rewound to the request that
produced it so the model decides again (Agentor's documented behaviour). The
workflow builds its live message list with the same functions, so a replay
and the live run cannot disagree.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from agentor_temporal.store.events import Event, Usage


def assistant_message(text: str | None, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The assistant message a generation adds to the conversation."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = copy.deepcopy(calls)
    return message


def tool_message(event: Event) -> dict[str, Any]:
    """The `tool` message that answers one call with its recorded result."""
    return {"role": "tool", "tool_call_id": event.call_id, "content": event.result or ""}


def initial_messages(
    instructions: str | None, input: str | list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The first request of a segment: instructions, then the input.

    A message list that already carries a system message (a replayed run, or a
    caller's own history) is used as it is: sending instructions twice changes
    behaviour and some providers reject it.
    """
    if isinstance(input, str):
        messages: list[dict[str, Any]] = []
        if instructions:
            messages.append({"role": "system", "content": instructions})
        messages.append({"role": "user", "content": input})
        return messages
    messages = [dict(m) for m in input]
    if instructions and not any(m.get("role") == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": instructions})
    return messages


def replay_messages(events: list[Event]) -> list[dict[str, Any]]:
    """Rebuild the model's message list from a recorded run.

    A later `run_start` opens a new segment and snapshots the request as it
    stood then. If the last generation asked for tools whose results were not
    all recorded, the assistant turn is dropped (rewound): replaying it would
    send tool_calls with no answers, which providers reject.
    """
    start: Event | None = None
    last: Event | None = None
    trailing: list[Event] = []
    for event in events:
        if event.type == "run_start":
            start, last, trailing = event, None, []
        elif event.type == "generation":
            last, trailing = event, []
        elif event.type == "tool_result" and last is not None:
            trailing.append(event)

    if last is None:
        return [dict(m) for m in (start.messages or [])] if start else []

    messages = [dict(m) for m in (last.messages or [])]
    # the results of each call id in the order they were recorded: a model may
    # give two calls of one turn the same id, answered in the order it asked
    by_id: dict[Any, list[Event]] = {}
    for event in trailing:
        by_id.setdefault(event.call_id, []).append(event)
    ids = [c.get("id") for c in (last.calls or [])]
    if any(cid is not None and not isinstance(cid, str) for cid in ids):
        # an id no result can name (a damaged or foreign log): unanswerable
        return messages
    asked = Counter(cid for cid in ids if cid)
    if any(len(by_id.get(cid, [])) < n for cid, n in asked.items()):
        return messages
    messages.append(assistant_message(last.text, last.calls))
    # one answer per call, in the order the model asked: a duplicate result
    # (a log written twice by a buggy store) must not send two answers
    taken: Counter[Any] = Counter()
    for call in last.calls or []:
        cid = call.get("id")
        answers = by_id.get(cid, [])
        if taken[cid] < len(answers):
            messages.append(tool_message(answers[taken[cid]]))
            taken[cid] += 1
    return messages


def replay_base(events: list[Event]) -> int | None:
    """Index of the event whose messages `replay_messages` starts from, or None.

    The last `generation` of the latest segment (its request), else that
    segment's `run_start`: the replayed conversation is its messages, then
    whatever `replay_messages` adds after them.
    """
    base: int | None = None
    for index, event in enumerate(events):
        if event.type in ("run_start", "generation"):
            base = index
    if base is None or events[base].messages is None:
        return None
    return base


def segment_events(events: list[Event]) -> list[Event]:
    """The events of the latest segment (from its `run_start` on)."""
    for index in range(len(events) - 1, -1, -1):
        if events[index].type == "run_start":
            return events[index:]
    return list(events)


def final_event(events: list[Event]) -> Event | None:
    """The latest `run_end`, if the latest segment has one."""
    for event in reversed(events):
        if event.type == "run_start":
            return None
        if event.type == "run_end":
            return event
    return None


def is_complete(events: list[Event]) -> bool:
    """Whether the latest segment finished with status `completed`."""
    end = final_event(events)
    return end is not None and end.status == "completed"


def total_usage(events: list[Event]) -> Usage:
    """Sum every generation in the log, across segments.

    Deliberately not the terminal event's usage: a resumed run has one
    `run_end` per segment, each counting only its own generations.
    """
    total = Usage()
    for event in events:
        if event.type == "generation" and event.usage:
            total = total + event.usage
    return total


def pending_approvals(events: list[Event]) -> list[Event]:
    """`approval_request` events of the latest segment that have no decision yet."""
    # a decision answers the request of its call id before it: models reuse
    # ids, so an id decided in one turn may be waiting again in a later one
    waiting: dict[Any, Event] = {}
    for event in segment_events(events):
        if event.type == "approval_request":
            waiting[event.call_id] = event
        elif event.type == "approval_decision":
            waiting.pop(event.call_id, None)
    return list(waiting.values())
