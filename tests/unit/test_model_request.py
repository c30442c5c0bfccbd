"""A model request sent as bytes and its reply read as JSON: what the client would do, cheaper.

`activities.model.create` sends the body through `client.post` and reads the
reply's JSON itself, skipping the openai client's transform of the body and
its pydantic models (`bench/openai_overhead.py` measures the difference).
These tests hold it to the client's own `chat.completions.create`: the same
body on the wire, the same `GenerateResult` from the same reply, and the
same refusal of a setting the client does not know.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI, Timeout

from agentor_temporal.activities.conversations import encode
from agentor_temporal.activities.model import ReplyView, create, parse_reply, prepared_request
from agentor_temporal.testing import Raw, Reply, ScriptedModelServer
from agentor_temporal.workflows.activity_types import GenerateInput

MESSAGES = [
    {"role": "system", "content": "You are a helpful weather assistant."},
    {"role": "user", "content": "Quel temps fait-il à Zürich? ☀"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def _request(**settings: Any) -> dict[str, Any]:
    inp = GenerateInput(
        run_id="r",
        agent="A",
        model="gpt-4o-mini",
        messages=MESSAGES,
        tools=TOOLS,
        model_settings=settings,
    )
    request, _ = prepared_request(inp, MESSAGES)
    return request


@pytest.mark.parametrize(
    "settings",
    [{}, {"temperature": 0.2, "max_tokens": 50}, {"extra_body": {"top_k": 3}}, {"seed": 7}],
)
@pytest.mark.parametrize("pre_encoded", [False, True])
async def test_the_body_on_the_wire_is_the_clients(
    settings: dict[str, Any], pre_encoded: bool
) -> None:
    with ScriptedModelServer([Reply("a"), Reply("a")]) as model:
        client = AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0)
        request = _request(**settings)
        await client.chat.completions.create(**request)
        await create(client, request, encode(MESSAGES) if pre_encoded else None)
        theirs, ours = model.requests
        await client.close()
    assert ours == theirs
    assert ours["messages"] == MESSAGES and ours["tools"] == TOOLS


@pytest.mark.parametrize(
    "step",
    [
        Reply("Sunny in Zürich."),
        Reply("Thinking done.", reasoning="first, the city"),
        Raw(
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "call_1",
                                    "type": "function",
                                    "function": {"name": "get_weather", "arguments": "{}"},
                                },
                                {"type": "function", "function": {"name": "f", "arguments": ""}},
                            ],
                        }
                    }
                ]
            }
        ),
        Raw({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}),  # no usage
        Raw(
            {
                "id": "x",
                "choices": [
                    {
                        "message": {"role": "assistant", "content": None, "reasoning": "r"},
                        "extra_field": [1, {"a": 2}],
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            }
        ),
    ],
)
async def test_a_reply_reads_as_the_clients_models_read(step: Any) -> None:
    with ScriptedModelServer([step, step]) as model:
        client = AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0)
        request = _request()
        theirs = parse_reply(await client.chat.completions.create(**request))
        ours = parse_reply(await create(client, request))
        await client.close()
    assert ours == theirs


async def test_a_setting_the_client_does_not_know_is_refused_by_the_client() -> None:
    """A typo in model_settings fails at once (the client's TypeError), never reaching the model."""
    with ScriptedModelServer([Reply("never")]) as model:
        client = AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0)
        with pytest.raises(TypeError, match="temprature"):
            await create(client, _request(temprature=0.5))
        await client.close()
        assert model.request_count == 0


def test_a_view_reads_by_attribute_and_misses_like_an_object() -> None:
    view = ReplyView.of({"a": {"b": [1, {"c": None}]}, "s": "x"})
    assert view.a.b[0] == 1 and view.a.b[1].c is None and view.s == "x"
    assert getattr(view, "missing", "default") == "default"
    assert "x" in str(view)


def test_a_timeout_given_as_a_number_still_connects_within_the_connect_limit() -> None:
    """`timeout=600` for a slow model bounds the reply, not the connect: an endpoint dropping
    connection attempts (a firewall) is given MODEL_CONNECT_LIMIT (30 s) a try, not 600 s
    (the kernel's SYN retries, ~127 s, each). A shorter number and a Timeout are kept."""
    slow = _request(timeout=600)["timeout"]
    assert isinstance(slow, Timeout)
    assert (slow.connect, slow.read, slow.write) == (30, 600, 600)
    assert _request(timeout=0.5)["timeout"] == 0.5
    own = Timeout(900, connect=120)
    assert _request(timeout=own)["timeout"] is own
    assert "timeout" not in _request()


def test_a_denials_known_key_is_masked_in_the_messages_and_their_encoding() -> None:
    """A plain client's denial reaches history unmasked: the request masks the key the
    worker knows in it, in a pre-encoded conversation too; other messages are left as
    they came (masked where they came in), and the caller's list is not changed."""
    from agentor_temporal.activities import _redact

    key = "sk-denial-key-0123456789abcdef"
    _redact.remember(key)
    denial = f"Error: a person denied this call (ops): {key} is revoked. Do not call it again"
    messages = [*MESSAGES, {"role": "tool", "tool_call_id": "c", "content": denial}]
    inp = GenerateInput(run_id="r", agent="A", model="gpt-4o-mini", messages=messages)
    request, encoded = prepared_request(inp, messages, encode(messages))
    sent = request["extra_body"]["messages"]
    assert sent[-1]["content"] == (
        "Error: a person denied this call (ops): *** is revoked. Do not call it again"
    )
    assert sent[:-1] == MESSAGES
    assert encoded is not None and key.encode() not in encoded and b"***" in encoded
    assert messages[-1]["content"] == denial


@pytest.mark.parametrize(
    "content, text",
    [
        ([{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "x"}, "b"], "ab"),
        ([{"type": "thinking", "thinking": "x"}], None),
        ([{"type": "output_text", "text": "out"}], "out"),
    ],
    ids=["text-parts", "thinking-only", "output-text"],
)
def test_content_parts_are_read_as_their_text(content: Any, text: str | None) -> None:
    reply = {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
    assert parse_reply(ReplyView.of(reply)).text == text


@pytest.mark.parametrize("content", [[5], [None], 5, {"type": "text"}], ids=str)
def test_content_of_no_known_shape_is_malformed(content: Any) -> None:
    from agentor_temporal.activities.model import MalformedReply

    reply = {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
    with pytest.raises(MalformedReply, match="content"):
        parse_reply(ReplyView.of(reply))


@pytest.mark.parametrize(
    "message, says",
    [
        ({"content": [{"type": "image_url", "image_url": {"url": "u"}}]}, "'image_url'"),
        ({"content": None, "audio": {"id": "a", "data": "UklGRg=="}}, "audio (no transcript)"),
        ({"content": [{"type": "input_audio", "input_audio": {}}]}, "'input_audio'"),
    ],
    ids=["images", "audio-no-transcript", "audio-part"],
)
def test_a_reply_of_no_text_and_no_call_but_other_parts_fails_naming_them(
    message: dict[str, Any], says: str
) -> None:
    """Recorded, it would pass as the model having nothing to say (it did say something)."""
    from agentor_temporal.activities._provider_errors import StoppedEmpty

    reply = {"choices": [{"message": message, "finish_reason": "stop"}]}
    with pytest.raises(StoppedEmpty, match="no text and no tool call") as raised:
        parse_reply(ReplyView.of(reply))
    assert says in str(raised.value)


def test_an_audio_reply_is_its_transcript_and_a_legacy_function_call_a_tool_call() -> None:
    audio = {"id": "a", "data": "UklGRg==", "transcript": "Sunny."}
    spoken = {"choices": [{"message": {"content": None, "audio": audio}}]}
    assert parse_reply(ReplyView.of(spoken)).text == "Sunny."
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    legacy = {"content": None, "function_call": call}
    reply = {"choices": [{"message": legacy, "finish_reason": "function_call"}]}
    assert parse_reply(ReplyView.of(reply)).calls == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    # a server repeating its first tool call in function_call: the call runs once
    both = {"tool_calls": [{"id": "c1", "type": "function", "function": call}], **legacy}
    assert len(parse_reply(ReplyView.of({"choices": [{"message": both}]})).calls) == 1
