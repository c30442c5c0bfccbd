"""The `generate` activity: one chat-completions request through `openai`.

Temporal owns retries, so the client's own are off and provider errors are
sorted here: 408/409/429/5xx, connection errors and timeouts are retryable
(honouring `Retry-After`); any other 4xx is the caller's mistake and fails the
run at once with the provider's own message.
"""

from __future__ import annotations

import email.utils
import inspect
import json
import logging
import time
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentor_temporal.activities._private import clip, heartbeating
from agentor_temporal.activities.conversations import full_messages, remember
from agentor_temporal.activities.registry import AgentRegistry, UnknownAgentError
from agentor_temporal.workflows.activity_types import GenerateInput, GenerateResult

logger = logging.getLogger(__name__)

#: Retry-After values above this are capped: a provider asking for an hour
#: should not silently park a run; the retry policy's attempts bound the rest.
MAX_RETRY_AFTER = timedelta(minutes=5)


def _retry_after(headers: Any) -> timedelta | None:
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return min(timedelta(milliseconds=float(millis)), MAX_RETRY_AFTER)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return min(timedelta(seconds=max(float(value), 0.0)), MAX_RETRY_AFTER)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    delay = when.timestamp() - time.time()
    return min(timedelta(seconds=max(delay, 0.0)), MAX_RETRY_AFTER)


def _provider_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return str(getattr(exc, "message", None) or exc)


def model_error(exc: Exception) -> ApplicationError | None:
    """Map an `openai` exception to the error Temporal should see (None: not ours)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = clip(_provider_message(exc))
        if status in (408, 409, 429) or status >= 500:
            return ApplicationError(
                f"Model endpoint answered {status}: {message}",
                type="ModelUnavailable",
                next_retry_delay=_retry_after(exc.response.headers),
            )
        return ApplicationError(
            f"Model request failed with {status}: {message}",
            type="ModelRequestError",
            non_retryable=True,
        )
    if isinstance(exc, openai.APIConnectionError):
        url = getattr(getattr(exc, "request", None), "url", None)
        kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "unreachable"
        return ApplicationError(
            f"Model endpoint {kind}{f' at {url}' if url else ''}: {exc}",
            type="ModelUnavailable",
        )
    return None


def _usage(raw: Any) -> dict[str, int]:
    usage = getattr(raw, "usage", None)
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {
        "input_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "output_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "total_tokens": int(getattr(usage, "total_tokens", 0) or 0),
    }


def _reasoning(message: Any) -> str | None:
    # not in the OpenAI spec; compatible servers use one of these names
    for attr in ("reasoning_content", "reasoning"):
        value = getattr(message, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def _request(inp: GenerateInput, messages: list[dict[str, Any]]) -> dict[str, Any]:
    request: dict[str, Any] = {"model": inp.model, **inp.model_settings}
    # The openai client walks every message through its type-driven transform
    # before encoding: about 1 ms a message (measured: 570 ms for a 600-message
    # conversation, 35 ms for 20), so each turn of a long run would be slower
    # than the last. These messages are wire-format JSON already (they came
    # through history), so they go into the body as they are.
    request["messages"] = []
    request["extra_body"] = {**(request.get("extra_body") or {}), "messages": messages}
    if inp.tools:
        request["tools"] = inp.tools
    return request


async def generate(registry: AgentRegistry, inp: GenerateInput) -> GenerateResult:
    """Ask the model once; heartbeat while waiting (and stream deltas if asked)."""
    try:
        agent = registry.get(inp.agent)
        client = registry.openai_client(agent)
    except (UnknownAgentError, ValueError) as exc:
        raise ApplicationError(str(exc), type="ModelRequestError", non_retryable=True) from None
    started = time.time()
    try:
        async with heartbeating():
            messages, encoded = inp.messages, None
            if inp.conversation is not None:
                # sent by reference: the base is in this worker's cache or the run's history
                known = await full_messages(
                    inp.run_id, inp.conversation, inp.messages, inp.position
                )
                messages, encoded = known.messages, known.encoded
            else:
                # sent whole: the run's first request by reference will name it
                remember(inp.run_id, messages, inp.position)
            request = _request(inp, messages)
            if inp.stream_text:
                from agentor_temporal.activities.streaming import stream_with_deltas

                result = await stream_with_deltas(
                    client, request, inp, create=lambda r: create(client, r, encoded)
                )
            else:
                result = _result(await create(client, request, encoded))
    except ApplicationError:
        raise
    except Exception as exc:
        mapped = model_error(exc)
        if mapped is None:
            raise
        if activity.in_activity():
            logger.warning(
                "generate %s turn %d attempt %d: %s",
                inp.run_id,
                inp.turn,
                activity.info().attempt,
                mapped.message,
            )
        raise mapped from None
    result.started_at, result.ended_at = started, time.time()
    return result


#: create() arguments that are not fields of the request body.
_CLIENT_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})


async def create(client: Any, request: dict[str, Any], encoded: bytes | None = None) -> Any:
    """`client.chat.completions.create(**request)`, with the messages pre-encoded if given.

    `encoded` is the request's messages as JSON array elements (the worker
    keeps a long conversation encoded, see `conversations`): the body is then
    those bytes and the other fields, and only they are encoded now.
    """
    if encoded is None or _CLIENT_OPTIONS & request.keys():
        return await client.chat.completions.create(**request)
    from openai import AsyncStream
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    fields = {k: v for k, v in request.items() if k not in ("messages", "extra_body")}
    fields.update({k: v for k, v in (request.get("extra_body") or {}).items() if k != "messages"})
    rest = json.dumps(fields, separators=(",", ":")).encode()
    body = b'{"messages":[' + encoded + b"]" + (b"," + rest[1:] if len(rest) > 2 else b"}")
    # openai 1.x takes raw bytes as `body`; later versions as `content`
    raw = "content" if "content" in inspect.signature(client.post).parameters else "body"
    return await client.post(
        "/chat/completions",
        cast_to=ChatCompletion,
        **{raw: body},
        stream=bool(fields.get("stream")),
        stream_cls=AsyncStream[ChatCompletionChunk],
    )


def _result(raw: Any) -> GenerateResult:
    choices = getattr(raw, "choices", None)
    if not choices:
        raise ApplicationError("Model answered with no choices", type="ModelUnavailable")
    message = choices[0].message
    calls = [
        {
            "id": tc.id,
            "type": "function",
            "function": {"name": tc.function.name, "arguments": tc.function.arguments or ""},
        }
        for tc in (message.tool_calls or [])
    ]
    return GenerateResult(
        text=message.content,
        reasoning=_reasoning(message),
        calls=calls,
        usage=_usage(raw),
    )
