"""The event model: the one description of what happened during a run.

Field for field the format Agentor 0.1.1 writes (and its documentation shows),
so a JSONL log moves between the two projects in either direction. Events are
plain dataclasses that import nothing heavy: the workflow sandbox, activities,
worker, facade and tests all share this one definition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

from agentor_temporal.store._foreign import as_text, text_arguments
from agentor_temporal.store.encoding import encodable, standard_json

EventType = Literal[
    "run_start",
    "text_delta",
    "generation",
    "message",
    "tool_call",
    "tool_result",
    "run_end",
    "error",
    "fork",
    "approval_request",
    "approval_decision",
]

RunStatus = Literal["completed", "max_turns", "failed"]

#: Key order of chat messages and tool calls as Agentor writes them. Temporal's
#: JSON converter sorts keys; restoring this order keeps our logs reading (and
#: diffing) like Agentor's.
_KEY_ORDER = {
    k: i
    for i, k in enumerate(
        (
            "role",
            "tool_call_id",
            "content",
            "tool_calls",
            "id",
            "type",
            "function",
            "name",
            "arguments",
        )
    )
}


def _canonical(value: Any) -> Any:
    if type(value) in _ATOMIC:
        return value
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in _ordered(tuple(value))}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return _copied(value)


#: key orders already worked out: a long run's messages have a handful of shapes
#: between them, and sorting each message's keys again was most of the copy's cost
_ORDERS: dict[tuple[Any, ...], list[Any]] = {}


def _ordered(keys: tuple[Any, ...]) -> list[Any]:
    order = _ORDERS.get(keys)
    if order is None:
        order = sorted(keys, key=lambda k: (_KEY_ORDER.get(k, len(_KEY_ORDER)), k))
        if len(_ORDERS) < 1024:  # odd keys (a tool's own) must not grow it for ever
            _ORDERS[keys] = order
    return order


_ATOMIC = (str, int, float, bool, type(None))


def json_copy(value: Any) -> Any:
    """A copy of a JSON-like value (messages, arguments) whose containers a caller may change.

    `copy.deepcopy` gives the same for JSON, at several times the cost: a
    long run copied its whole conversation for each request that way, and
    that copy was most of what replaying the run's history cost.
    """
    return _copied(value)


def _copied(value: Any) -> Any:
    """A copy of a JSON-like value as `dataclasses.asdict` makes one, without copying strings.

    Containers are new (a caller may change them), dataclasses become dicts,
    everything else is shared (strings and numbers cannot change).
    """
    if type(value) in _ATOMIC:
        return value
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


@dataclass
class Usage:
    """Token counts of one generation, or summed over a run."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        """Build from a mapping, ignoring keys a newer writer may have added."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v or 0) for k, v in data.items() if k in known})


def with_readable_counts(data: dict[str, Any]) -> dict[str, Any]:
    """A logged event's `data` with each token count no int holds read as 0.

    Counts are accounting: one no int holds (NaN and Infinity, which Agentor's
    `json.dumps` writes; text; a list) must not cost the event it counts. A
    store skipped such a generation whole, and resume asked the model that
    turn again and lost the tool calls it had asked for. Only a log's reader
    is this lenient: a run's input still refuses such counts (InvalidInput).
    """
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return data
    return {**data, "usage": {k: _count(v) for k, v in usage.items()}}


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


#: Fields that replay builds the conversation from: one of the wrong type
#: (a damaged or foreign log line) would crash a resume far from its cause.
_STRING_FIELDS = ("text", "result", "call_id")
_OBJECT_LIST_FIELDS = ("messages", "calls")


def _check_types(data: dict[str, Any]) -> None:
    """Refuse a field that replay relies on if it has the wrong type.

    Raises:
        ValueError: naming the field (FileStore skips such a line, with a warning).
    """
    if not isinstance(data["type"], str):
        raise ValueError(f"field 'type' must be a string, got {type(data['type']).__name__}")
    for key in _STRING_FIELDS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"field '{key}' must be a string, got {type(value).__name__}")
    for key in _OBJECT_LIST_FIELDS:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise ValueError(f"field '{key}' must be a list of objects, got {type(value).__name__}")
        if not all(isinstance(item, dict) for item in value):
            raise ValueError(f"field '{key}' must be a list of objects")


@dataclass
class Event:
    """One step of a run, as written to the JSONL log."""

    type: EventType
    #: assistant text: the full message for `message`, one chunk for `text_delta`
    text: str | None = None
    #: the model's reasoning text, on `generation`, when the provider returns it
    reasoning: str | None = None
    #: tool name for `tool_call` / `tool_result` (and the approval events)
    name: str | None = None
    #: parsed tool arguments
    args: dict[str, Any] | None = None
    #: stringified tool return value
    result: str | None = None
    #: set on `tool_result` when the tool raised, and on a failed `run_end`
    error: str | None = None
    #: links a tool_result back to its tool_call
    call_id: str | None = None
    #: 1-based turn number within the segment
    turn: int | None = None
    usage: Usage | None = None
    status: str | None = None
    agent: str | None = None
    model: str | None = None
    #: the exact request messages, on `generation`; the full input on `run_start`
    messages: list[dict[str, Any]] | None = None
    #: tool calls the model asked for, on `generation` (OpenAI `tool_calls` shape)
    calls: list[dict[str, Any]] | None = None
    #: epoch seconds bounding the work this event describes
    started_at: float | None = None
    ended_at: float | None = None
    #: parent run id, on the `fork` marker
    forked_from: str | None = None

    def to_dict(
        self, *, share_args: bool = False, without: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """The event as a JSON-ready dict, without the fields that are None.

        Args:
            share_args: give `args` as it is, not a copy: for a caller that
                encodes the dict at once and changes nothing inside it (a
                workflow journaling a turn of 500 calls with long arguments
                spent most of a workflow task copying them, item by item).
            without: fields to leave out, for a caller that would drop them:
                a generation's `messages` is the whole request, and copying it
                only to drop it made each turn of a long run cost more than
                the last (the run's replay grew with the square of its turns).
        """
        # by hand: `asdict` deep-copied every string too, and a turn of 500
        # calls spent most of its workflow task in it (past the SDK's 2 s
        # deadlock limit on a loaded worker, every retry of the task)
        data: dict[str, Any] = {}
        for name in _EVENT_FIELDS:
            value = getattr(self, name)
            if value is None or name in without:
                continue
            if name in _ORDERED:
                data[name] = _canonical(value)
            elif share_args and name == "args":
                data[name] = value
            else:
                data[name] = _copied(value)
        return data

    def to_json(self) -> str:
        """One JSONL line (without the newline), in standard JSON any parser reads.

        A lone surrogate (a file name decoded with surrogateescape) is written
        as U+FFFD and a non-finite number as null: `json.dumps` would write
        `\\udcff` and `NaN`, which strict parsers refuse.
        """
        return standard_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        """Build from a dict, ignoring unknown keys (also inside `usage`).

        Tolerance is the point: a log written by a newer version, or by Agentor
        itself, must load rather than lose the event. The fields replay reads
        must have their types, though.

        Raises:
            ValueError: without a `type`, or with a replayed field of the wrong type.
        """
        data = dict(data)
        usage = data.get("usage")
        if isinstance(usage, dict):
            data["usage"] = Usage.from_dict(usage)
        elif usage is not None and not isinstance(usage, Usage):
            data["usage"] = None
        known = {f.name for f in fields(cls)}
        if "type" not in data:
            raise ValueError("event has no 'type'")
        _check_types(data)
        as_text(data)
        text_arguments(data)
        return cls(**{k: v for k, v in data.items() if k in known})


#: the fields `Event.to_dict` writes, in order; messages and calls in Agentor's key order
_EVENT_FIELDS = tuple(f.name for f in fields(Event))
_ORDERED = frozenset(("messages", "calls"))


@dataclass
class PendingApproval:
    """A tool call waiting for a person's decision."""

    call_id: str
    tool: str
    args: dict[str, Any] | None = None
    turn: int | None = None
    #: the run's Temporal execution that asked: a decision made from this
    #: pending approval goes to that execution only (a resumed run starts a
    #: new one, whose turns count from 1 again)
    execution_run_id: str | None = None


@dataclass
class RunResult:
    """Terminal (or paused) state of a run, with the events that produced it."""

    final_output: str | None = None
    #: "completed", "max_turns", "failed", or "awaiting_approval"
    status: str = "completed"
    #: always set: every run is durable in Temporal; pass it to resume()
    run_id: str | None = None
    events: list[Event] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    #: the full message list, suitable for feeding back in to continue
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    #: tool calls waiting for approve()/deny() when status is "awaiting_approval"
    pending_approvals: list[PendingApproval] = field(default_factory=list)

    def __str__(self) -> str:
        return self.final_output or ""

    @property
    def tool_calls(self) -> list[Event]:
        """The run's `tool_call` events."""
        return [e for e in self.events if e.type == "tool_call"]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, in standard JSON values (`json_chunks` writes it as text).

        As the JSONL log writes them: a non-finite number (a model's `NaN` in
        a tool call's arguments, which history keeps as it came) is None and
        a lone surrogate U+FFFD. Strict encoders refuse both: the HTTP routes
        answered every request for such a run, resume included, with a 500.
        """
        data = {
            "run_id": self.run_id,
            "status": self.status,
            "final_output": self.final_output,
            "error": self.error,
            "usage": asdict(self.usage),
            "messages": self.messages,
            "events": [e.to_dict() for e in self.events],
            "pending_approvals": [asdict(p) for p in self.pending_approvals],
        }
        result: dict[str, Any] = encodable(data)
        return result

    def json_chunks(self, extra: dict[str, Any] | None = None) -> Iterator[str]:
        """`to_dict()` (plus `extra`'s keys) as JSON text, a piece at a time.

        The same JSON value as `standard_json(to_dict())`, written one message
        and one event a line. Each `generation` event carries its whole request,
        so a run's JSON grows with the square of its turns (a 1,000-turn run's
        is 400 MB): built whole and indented, as the CLI's `--json` and the HTTP
        routes did, it took minutes and gigabytes. Here each piece goes out
        as it is encoded, by the C encoder, and is dropped.
        """
        head = {
            "run_id": self.run_id,
            "status": self.status,
            "final_output": self.final_output,
            "error": self.error,
            "usage": asdict(self.usage),
        }
        yield standard_json(head)[:-1]
        event_json = EventJson()
        lists: list[tuple[str, Iterable[str]]] = [
            ("messages", (standard_json(m) for m in self.messages)),
            ("events", (event_json(e) for e in self.events)),
            ("pending_approvals", (standard_json(asdict(p)) for p in self.pending_approvals)),
        ]
        for key, items in lists:
            yield f', "{key}": ['
            for index, item in enumerate(items):
                yield ("\n" if not index else ",\n") + item
            yield "]"
        for key, value in (extra or {}).items():
            yield f", {standard_json(key)}: {standard_json(value)}"
        yield "}\n"


class EventJson:
    """Events as `standard_json(event.to_dict())`, a request's messages encoded once.

    The `generation` events of one run hold their requests' message objects
    in common (each request is the one before it plus the turn's new
    messages), so a message already encoded for the previous event is not
    copied and encoded again: a run's events are then written in time that
    follows their text, not the square of its turns times Python's work per
    message. Only the latest request's messages are kept (objects held, so
    an id is never taken for another object's).
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[Any, str]] = {}

    def __call__(self, event: Event) -> str:
        """The event's JSON text."""
        if not event.messages:
            return standard_json(event.to_dict())
        data = replace(event, messages=None).to_dict()
        at = _EVENT_FIELDS.index("messages")
        before = {k: v for k, v in data.items() if _EVENT_FIELDS.index(k) < at}
        known, self._known = self._known, {}
        parts = []
        for message in event.messages:
            entry = known.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, standard_json(_canonical(message)))
            self._known[id(message)] = entry
            parts.append(entry[1])
        text = standard_json(before)[:-1] + (", " if before else "")
        text += '"messages": [' + ", ".join(parts) + "]"
        for key, value in data.items():
            if _EVENT_FIELDS.index(key) > at:
                text += f", {standard_json(key)}: {standard_json(value)}"
        return text + "}"
