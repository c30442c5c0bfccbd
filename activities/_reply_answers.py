"""A reply's answer found outside its `content` text and `tool_calls`.

A reply calling a tool through the legacy `function_call` field (servers
speaking the older functions API answer so, finish_reason "function_call"),
one whose only content is audio, and one whose content parts are images only
completed the run with an empty final output: the call silently dropped (the
model never told its result), the spoken answer lost, and the images taken as
the model having nothing to say. The legacy call is read as a tool call
(`call_<n>` by its position, as a call without an id); an audio answer's
transcript is the reply's text; and a reply holding neither text nor a call
but parts of other kinds (images, audio with no transcript) fails the run at
once naming them (asked again, the same input draws the same), never recorded
as an empty answer.
"""

from __future__ import annotations

from typing import Any

from agentor_temporal.activities._private import clip
from agentor_temporal.activities._provider_errors import MalformedReply, StoppedEmpty, json_kind
from agentor_temporal.activities._reply_json import TEXT_PARTS, ReplyView, arguments_text

#: The types of a content part holding the model's thinking, not its answer: a reply of
#: thinking alone is the model saying nothing, as a reply of reasoning alone is.
THOUGHT_PARTS = ("thinking", "redacted_thinking", "reasoning")


def _field(value: Any, name: str) -> Any:
    """`value[name]` of a reply's object, whether a dict or read by attribute."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def legacy_call(function_call: Any, position: int) -> dict[str, Any] | None:
    """A message's legacy `function_call` as a tool call (None: there is none).

    Raises:
        MalformedReply: when it is not an object with a name and text arguments.
    """
    if function_call is None:
        return None
    if json_kind(ReplyView.plain(function_call)) != "an object":
        raise MalformedReply(f"the message's function_call is {json_kind(function_call)}")
    name = _field(function_call, "name")
    if not isinstance(name, str) or not name:
        raise MalformedReply("the message's function_call has no name")
    arguments = arguments_text(_field(function_call, "arguments"))
    if arguments is None:
        raise MalformedReply("the arguments of the message's function_call are not a string")
    return {
        "id": f"call_{position}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def transcript(audio: Any) -> str | None:
    """An audio answer's transcript, when it has one as text."""
    if audio is None or json_kind(ReplyView.plain(audio)) != "an object":
        return None
    text = _field(audio, "transcript")
    return text if isinstance(text, str) and text else None


def other_parts(content: Any) -> list[str]:
    """The types of `content`'s parts that hold neither text nor thinking (images, audio), in
    order, once each."""
    if not isinstance(content, list):
        return []
    kinds: list[str] = []
    for part in content:
        if isinstance(part, str) or json_kind(ReplyView.plain(part)) != "an object":
            continue
        kind = _field(part, "type")
        kind = kind if isinstance(kind, str) and kind else "untyped"
        if kind not in TEXT_PARTS and kind not in THOUGHT_PARTS and kind not in kinds:
            kinds.append(clip(kind, 40))
    return kinds


def no_text(kinds: list[str], audio: bool) -> StoppedEmpty | None:
    """The failure of a reply with neither text nor a call but parts of `kinds` (or audio)."""
    if audio and "audio" not in kinds:
        kinds = [*kinds, "audio (no transcript)"]
    if not kinds:
        return None
    held = ", ".join(f"'{kind}'" for kind in kinds)
    return StoppedEmpty(
        f"it held no text and no tool call, only content of type {held}, which a run cannot "
        "record as its answer; ask the model for text (its instructions, or the modalities in "
        "the agent's model_settings), then resume the run"
    )
