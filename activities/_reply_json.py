"""Reading a model reply as servers really send it, before `parse_reply` reads its fields.

A reply's JSON is read with `read_json` (whole replies and each streamed
event alike): an integer past Python's 4300 digits, standard JSON, is its
text, where it failed the run as an error of our own code (a whole reply) or
as "not JSON" after every retry (a streamed one), throwing away an answer
the provider was paid for. The shapes newer servers answer in are read too:
content as a list of parts, tool-call arguments as a JSON object (both were
refused as malformed on every retry). `ReplyView` reads the JSON by
attribute, as the client's models are read; `EndSeen` watches a stream's
events (its `[DONE]`, an `event: error` whatever its data).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from agentor_temporal.activities._private import clip
from agentor_temporal.activities._provider_errors import MalformedReply, json_kind
from agentor_temporal.store.encoding import read_json

__all__ = [
    "TEXT_PARTS",
    "ReplyView",
    "arguments_text",
    "content_text",
    "loads_reply",
    "EndSeen",
    "tolerant_event",
]


#: `json.loads` for a reply: an integer too long for Python read as its text
loads_reply = read_json


class ReplyView:
    """A JSON object read by attribute, as `parse_reply` reads the client's models.

    A missing key is a missing attribute (`getattr(reply, "usage", None)` is
    None); objects inside are views too, lists stay lists.
    """

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @staticmethod
    def of(value: Any) -> Any:
        if isinstance(value, dict):
            return ReplyView(value)
        if isinstance(value, list):
            return [ReplyView.of(v) for v in value]
        return value

    def __getattr__(self, name: str) -> Any:
        try:
            return ReplyView.of(self._data[name])
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return json.dumps(self._data)

    @staticmethod
    def plain(value: Any) -> Any:
        """`value` as the JSON it views (views unwrapped, in lists too)."""
        if isinstance(value, ReplyView):
            return value._data
        if isinstance(value, list):
            return [ReplyView.plain(v) for v in value]
        return value


@functools.cache
def _event_type() -> Any:
    """The `openai` client's SSE event, reading its data with `loads_reply` (made once)."""
    from openai._streaming import ServerSentEvent

    class TolerantEvent(ServerSentEvent):
        def json(self) -> Any:
            return loads_reply(self.data)

    return TolerantEvent


def tolerant_event(event: Any) -> Any:
    """`event` (from the `openai` stream's SSE decoder) whose `json()` reads it so.

    The client reads each streamed chunk with the event's `json()`.
    """
    return _event_type()(event=event.event, data=event.data, id=event.id, retry=event.retry)


#: The types of a content part whose `text` is the reply's text (`output_text`:
#: the Responses API's name, which some chat-completions servers reuse).
TEXT_PARTS = ("text", "output_text")


def _field(value: Any, name: str) -> Any:
    """`value[name]` of a reply's object, whether a dict or read by attribute."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def content_text(content: Any) -> str | None:
    """A reply message's `content` as text.

    Text as it is; a list of content parts (the shape newer servers answer in,
    `[{"type": "text", "text": "..."}, {"type": "thinking", ...}]`) as its text
    parts joined, other parts left out (None when it has no text part). It was
    refused as malformed on every retry, so the run failed on a good answer.

    Raises:
        MalformedReply: when it is neither, or a part is not an object.
    """
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MalformedReply(f"the message content is {json_kind(content)}, not text")
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if json_kind(part) != "an object" or part is None:
            raise MalformedReply(f"content part {index} is {json_kind(part)}, not an object")
        text = _field(part, "text")
        if _field(part, "type") in TEXT_PARTS and isinstance(text, str):
            texts.append(text)
    return "".join(texts) if texts else None


def arguments_text(arguments: Any) -> str | None:
    """A reply's tool-call `arguments` as the JSON text the run reads.

    Servers that answer them as a JSON object (or list) rather than its text
    had the reply refused as malformed on every retry; the object is written
    as JSON (a number no float holds is then caught as in text arguments).
    None when they are something else (a number, a boolean).
    """
    if arguments is None or isinstance(arguments, str):
        return arguments or ""
    arguments = ReplyView.plain(arguments)
    if isinstance(arguments, (dict, list)):
        return json.dumps(arguments, ensure_ascii=False)
    return None


class EndSeen:
    """A stream's SSE decoder, noting whether the reply's `[DONE]` came.

    Its events read their JSON with `loads_reply` (an integer past Python's
    4300 digits read as its text, not failing the reply).

    The client's stream ends its iteration alike at `[DONE]` and at a closed
    connection; only its decoder sees which.
    """

    def __init__(self, decoder: Any, request: Any = None) -> None:
        self.decoder = decoder
        self.request = request
        self.done = False

    @classmethod
    def watch(cls, stream: Any) -> EndSeen | None:
        """Watch `stream`'s events (None: not a client stream; finish_reason tells alone)."""
        decoder = getattr(stream, "_decoder", None)
        if decoder is None or not hasattr(decoder, "aiter_bytes"):
            return None
        watcher = cls(decoder, getattr(getattr(stream, "response", None), "request", None))
        stream._decoder = watcher
        return watcher

    async def aiter_bytes(self, iterator: Any) -> Any:
        async for event in self.decoder.aiter_bytes(iterator):
            if event.data.startswith("[DONE]"):
                self.done = True
            if event.event == "error":
                raise _error_event(event.data, self.request)
            yield tolerant_event(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.decoder, name)


def _error_event(data: str, request: Any) -> Exception:
    """An SSE `event: error`: the provider failed mid-reply, whatever its data holds.

    The client raises only for data holding an `error` key; other data (`{"message":
    ...}`, plain text) it passed on as a chunk with no choices: the reply then
    ended as cut off, retried for minutes with the provider's message never
    shown (a final one, `context_length_exceeded`, too), or, followed by
    `[DONE]`, the text streamed before it was recorded as the whole answer.
    """
    import openai

    try:
        body: Any = loads_reply(data)
    except ValueError:
        body = data
    message = clip(data, 500) if data.strip() else "an error event with no data"
    return openai.APIError(message, request, body=body if isinstance(body, dict) else None)
