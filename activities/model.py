"""The `generate` activity: one chat-completions request through `openai`.

Temporal owns retries, so the client's own are off and every failure is
sorted here by whose it is. The provider's (see `_provider_errors`):
408/409/429/5xx, connection errors and timeouts are retried (honouring
`Retry-After`) for MODEL_RETRY_BUDGET, any other 4xx fails the run at once
with the provider's own message, and a malformed reply (no choices, a call
without a name) is retried briefly, then fails the run saying what was
wrong. Our machinery's (a stopping worker): the task goes back to Temporal.
Our own code's: fails at once, never retried as if the provider were down.
Text is made encodable before it is sent (a lone surrogate in a tool result
must not poison every request of a run), and every message is redacted: URL
credentials, query values, the API key. A long conversation may come by
reference (see `conversations`): the worker rebuilds it from its cache or
the run's history before sending.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import re
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agentor_temporal.activities import _redact, _starts
from agentor_temporal.activities._client_text import masked_client_text
from agentor_temporal.activities._definition import definition_for
from agentor_temporal.activities._errors import (
    instead_of_cancel,
    internal_error,
    is_machinery,
    safe_str,
    said_once,
    worker_stopping,
)
from agentor_temporal.activities._private import (
    clip,
    heartbeating,
    non_finite_number,
    token_count,
)
from agentor_temporal.activities._provider_errors import (
    MALFORMED_REPLY,
    MAX_RETRY_AFTER,
    MalformedReply,
    SlowReply,
    json_kind,
    malformed,
    model_error,
    stopped_empty,
)
from agentor_temporal.activities._reply_answers import (
    legacy_call,
    no_text,
    other_parts,
    transcript,
)
from agentor_temporal.activities._reply_json import (
    ReplyView,
    arguments_text,
    content_text,
    loads_reply,
)
from agentor_temporal.activities._slow_model import request_of, said_when_silent
from agentor_temporal.activities.conversations import encode, full_messages, remember
from agentor_temporal.activities.registry import AgentRegistry, check_request_settings
from agentor_temporal.store.encoding import encodable, encodable_text
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import GenerateInput, GenerateResult
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.redaction import redact_url

__all__ = [
    "MALFORMED_REPLY",
    "MAX_ARGUMENT_DEPTH",
    "MAX_RETRY_AFTER",
    "MalformedReply",
    "ReplyView",
    "create",
    "generate",
    "malformed",
    "model_error",
    "parse_reply",
    "prepared_request",
]

logger = logging.getLogger(__name__)


def _usage(raw: Any) -> dict[str, int]:
    usage = getattr(raw, "usage", None)
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}

    def count(name: str) -> int:
        return token_count(getattr(usage, name, 0))

    return {
        "input_tokens": count("prompt_tokens"),
        "output_tokens": count("completion_tokens"),
        "total_tokens": count("total_tokens"),
    }


def _reasoning(message: Any) -> str | None:
    # not in the OpenAI spec; compatible servers use one of these names
    for attr in ("reasoning_content", "reasoning"):
        value = getattr(message, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


#: A lone-surrogate escape in encoded JSON (`\\udcff`, `\\ud800`): the cheap test for
#: a pre-encoded conversation that needs cleaning. Pairs match too (rarely: an
#: emoji is escaped as one); cleaning joins them again.
_SURROGATE_ESCAPE = re.compile(rb"\\ud[89a-f][0-9a-f]{2}")


def connect_bounded(timeout: Any) -> Any:
    """A request's `timeout` setting, its connect bounded by MODEL_CONNECT_LIMIT.

    A number bounds every phase in the openai client, connecting too: an agent
    given `timeout=600` for a slow model waited the kernel's SYN retries (~127 s)
    on each try at an endpoint dropping connection attempts, in silence. A
    `Timeout` object (or None) is the user's own choice, kept as it is.
    """
    limit = policies.MODEL_CONNECT_LIMIT.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > limit:
        from openai import Timeout

        return Timeout(float(timeout), connect=limit)
    return timeout


def prepared_request(
    inp: GenerateInput,
    messages: list[dict[str, Any]],
    encoded: bytes | None = None,
    client_options: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], bytes | None]:
    """The request as sent, and its pre-encoded messages, with every text encodable.

    A lone surrogate (a file name decoded with surrogateescape) becomes
    U+FFFD, in the messages and in a pre-encoded conversation alike: it
    cannot be encoded as UTF-8, and escaped it is JSON strict parsers refuse.
    What a client wrote (a prompt, a person's denial) has the keys this process knows
    masked (`masked_client_text`).
    """
    messages = encodable(messages)
    # a prompt or a denial may carry a key a plain client did not mask
    messages, masked = masked_client_text(messages)
    if encoded is not None and (masked or _SURROGATE_ESCAPE.search(encoded)):
        encoded = encode(messages)
    request: dict[str, Any] = {"model": inp.model, **encodable(inp.model_settings)}
    # headers and query values may be credentials: they come from the worker's
    # definition, never through history (runs recorded before may carry them)
    request.update(client_options or {})
    request["timeout"] = connect_bounded(request.get("timeout"))
    if request["timeout"] is None:
        del request["timeout"]
    # The openai client walks every message through its type-driven transform
    # before encoding: about 1 ms a message (measured: 570 ms for a 600-message
    # conversation, 35 ms for 20), so each turn of a long run would be slower
    # than the last. These messages are wire-format JSON already (they came
    # through history), so they go into the body as they are.
    request["messages"] = []
    request["extra_body"] = {**(request.get("extra_body") or {}), "messages": messages}
    if inp.tools:
        request["tools"] = encodable(inp.tools)
    return request, encoded


async def _conversation(inp: GenerateInput) -> tuple[list[dict[str, Any]], bytes | None]:
    """The request's messages (and their encoding, for a conversation the worker holds)."""
    if inp.conversation is None:
        # sent whole: the run's first request by reference will name it
        remember(inp.run_id, inp.messages, inp.position)
        return inp.messages, None
    try:
        # sent by reference: the base is in this worker's cache or the run's history
        known = await full_messages(inp.run_id, inp.conversation, inp.messages, inp.position)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        # our own state, read from Temporal: worth another attempt, never the
        # model's, unless retrying cannot help (a bad reference, a base
        # history provably lacks), which fails the run instead of wedging it
        why, final = safe_str(exc), False
        if isinstance(exc, ApplicationError) and exc.type is not None:
            why, final = f"{exc.type}: {exc.message}", exc.non_retryable
        raise ApplicationError(
            _redact.clean(f"Could not rebuild the conversation: {why}"),
            type="ConversationUnavailable",
            non_retryable=final,
        ) from None
    return known.messages, known.encoded


_T = TypeVar("_T")


async def _within_settle_by(asking: Coroutine[Any, Any, _T], inp: GenerateInput) -> _T:
    """`asking`'s answer; given up at the run's `settle_by` for a bounded local request.

    The run's limit timer cannot stop a local request (it holds its workflow
    task), so the request ends itself, with an error the workflow reads as
    its run stopping at its limit (`policies.LOCAL_REQUEST_BOUNDED`).
    """
    if inp.settle_by is None:
        return await asking
    try:
        return await asyncio.wait_for(asking, max(inp.settle_by - time.time(), 0.0))
    except asyncio.TimeoutError:
        raise ApplicationError(
            f"turn {inp.turn}'s model request was not answered by its run's time limit",
            type=policies.LOCAL_OUT_OF_TIME,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        ) from None


async def generate(registry: AgentRegistry, inp: GenerateInput) -> GenerateResult:
    """Ask the model once; heartbeat while waiting (and stream deltas if asked)."""
    agent = await definition_for(registry, inp.agent, inp.fingerprint, f"turn {inp.turn}")
    if inp.task_started is not None:
        late = time.time() - inp.task_started
        if late > policies.LOCAL_START_LIMIT.total_seconds():
            # its workflow task may time out before the answer is recorded,
            # and the answer would be lost with it: not asked here
            raise ApplicationError(
                f"turn {inp.turn}'s local request would begin {late:.1f} s into its workflow "
                "task; the run asks in an activity instead",
                type=policies.LOCAL_CALL_LATE,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )
    try:
        client = registry.openai_client(agent)
        # a run recorded before its settings were checked, or a key from the environment
        check_request_settings(client.api_key, inp.model_settings, agent.client_options)
    except ValueError as exc:
        raise ApplicationError(str(exc), type="ModelRequestError", non_retryable=True) from None
    started = time.time()
    try:
        async with heartbeating():
            # after the beats hold what this attempt received: they must not erase the count
            starts = await _starts.begin(policies.LOST_MODEL_STARTS, first_send=inp.first_send)
            if starts.lost >= policies.LOST_MODEL_STARTS:
                raise _lost(inp, starts.lost)
            try:
                result = await _within_settle_by(_ask(client, agent, inp), inp)
            except BaseException:
                # an answer (an error to retry, a handback): not lost with its worker
                await _starts.end(starts)
                raise
    except ApplicationError:
        raise
    except asyncio.CancelledError:
        replaced = instead_of_cancel(f"turn {inp.turn}'s model request")
        if replaced is None:
            raise
        raise replaced from None
    except Exception as exc:
        raise _classified(exc, inp) from None
    result.started_at, result.ended_at = started, time.time()
    if activity.in_activity() and activity.info().is_local:
        # history keeps a local activity's result only: the request rides in it
        result.request = {"messages": inp.messages, "conversation": inp.conversation}
    # a model told a key must not store it either: not in its text, and not
    # in the calls it asks for (their arguments go into history and the tool,
    # their ids into history, `pending` and the approval a person types; an id
    # masked into another's is a reused id, which runs handle);
    # and a lone surrogate (JSON "\ud800") stored would break every reader
    # of the run that encodes it (print, `show`, GET /runs/{id})
    result.text = _redact.mask_secrets(encodable_text(result.text)) if result.text else result.text
    result.reasoning = (
        _redact.mask_secrets(encodable_text(result.reasoning)) if result.reasoning else None
    )
    for call in result.calls:
        call["id"] = _redact.mask_secrets(encodable_text(call["id"]))
        function = call.get("function") or {}
        for part in ("name", "arguments"):
            if isinstance(function.get(part), str):
                function[part] = _redact.mask_secrets(encodable_text(function[part]))
        depth = _nesting(function.get("arguments") or "")
        if depth > MAX_ARGUMENT_DEPTH:
            # not JSON: the run tells the model its arguments were invalid,
            # instead of failing every workflow task on a recursion limit
            function["arguments"] = (
                f"<arguments nested {depth} levels deep, over the {MAX_ARGUMENT_DEPTH} accepted>"
            )
        elif (unheld := non_finite_number(function.get("arguments") or "")) is not None:
            # not JSON either, for the same reason: answered, never recorded as Infinity
            function["arguments"] = f"<arguments hold {unheld[:40]}, a number no float holds>"
    if len(result.calls) > policies.MAX_CALLS_PER_REPLY:
        raise ApplicationError(
            f"The model asked for {len(result.calls)} tool calls in turn {inp.turn}, over the "
            f"{policies.MAX_CALLS_PER_REPLY} one reply may ask for; the run failed without "
            "retrying",
            type="ModelReplyTooLarge",
            non_retryable=True,
        )
    size = encoded_size([result.text, result.reasoning, result.calls])
    if size > policies.MAX_REPLY_BYTES:
        # asking again would be paid for again, and answered as large
        raise ApplicationError(
            f"The model's reply to turn {inp.turn} is {size / 1e6:.1f} MB, over the "
            f"{policies.MAX_REPLY_BYTES / 1e6:.1f} MB a run records of one reply in Temporal "
            "history; the run failed without retrying (lower max_tokens, or ask for the output "
            "in parts)",
            type="ModelReplyTooLarge",
            non_retryable=True,
        )
    return result


async def _ask(client: Any, agent: Any, inp: GenerateInput) -> GenerateResult:
    """The model's reply to the request `inp` describes, sent once."""
    messages, encoded = await _conversation(inp)
    try:
        request, encoded = prepared_request(inp, messages, encoded, agent.client_options)
    except Exception as exc:
        raise internal_error("building the model request", exc, _redact.clean) from None
    if inp.stream_text:
        from agentor_temporal.activities.streaming import stream_with_deltas

        return await stream_with_deltas(
            client, request, inp, create=lambda r: create(client, r, encoded)
        )
    return parse_reply(await _within_limit(client, create(client, request, encoded), inp))


async def _within_limit(client: Any, ask: Awaitable[Any], inp: GenerateInput) -> Any:
    """A whole (not streamed) reply, if it came within MODEL_REPLY_LIMIT (else SlowReply),
    said once on the logger when it is long in coming (`said_when_silent`).

    A streamed reply is bounded by the time between its chunks instead
    (`streaming`): a long answer may stream for longer.
    """
    limit = policies.MODEL_REPLY_LIMIT.total_seconds()
    base_url = str(client.base_url)
    try:
        return await asyncio.wait_for(
            said_when_silent(
                ask, base_url=base_url, what=request_of(inp.run_id, inp.turn), limit=limit
            ),
            limit,
        )
    except asyncio.TimeoutError:
        raise SlowReply(
            f" at {redact_url(str(client.base_url))} sent no complete reply in {limit:g} s, "
            "though it kept the connection open (a provider or proxy holding the request)"
        ) from None


def _lost(inp: GenerateInput, lost: int) -> ApplicationError:
    """The run fails: each of the request's last sends lost its worker (see `_starts`)."""
    logger.error(
        "Model request of turn %d in run %s lost its worker in each of its last %d sends; "
        "not sent again",
        inp.turn,
        inp.run_id,
        lost + 1,
    )
    return ApplicationError(
        f"The model request of turn {inp.turn} was sent {lost + 1} times and never answered: "
        "each time, the worker sending it stopped answering (its process died, e.g. killed "
        "for running out of memory on a large request or reply, or it held the GIL past the "
        "heartbeat timeout). It was not sent again, since each send is a paid request; the "
        "run failed here. Find what kills the worker (its logs, the kernel's OOM messages), "
        "then resume(run_id) continues the run from this turn.",
        type=LOST_MODEL_CALL,
        non_retryable=True,
    )


#: Error type of a model request not sent again because its sends kept losing their worker.
LOST_MODEL_CALL = "ModelCallLost"


#: Deepest nesting of a tool call's arguments passed on. Far above any tool's
#: schema; a model that nests deeper (seen: 500 to 3,000 levels) would make
#: the run fail every workflow task on Python's recursion limit instead.
MAX_ARGUMENT_DEPTH = 100


def _nesting(text: str) -> int:
    """How deeply JSON `text` nests arrays and objects (0 if too few to be too deep)."""
    if text.count("[") + text.count("{") <= MAX_ARGUMENT_DEPTH:
        return 0  # cannot be too deep: skip the scan
    depth = deepest = 0
    quoted = escaped = False
    for char in text:
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


class UnknownSetting(TypeError):
    """A model setting that is not a parameter of the client's `create()` (a typo)."""


#: create() arguments that are not fields of the request body.
_CLIENT_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})


async def create(client: Any, request: dict[str, Any], encoded: bytes | None = None) -> Any:
    """`client.chat.completions.create(**request)`, the body encoded here.

    The body goes through `client.post` as bytes: the messages as they are
    (`encoded`, when the worker holds the conversation encoded, see
    `conversations`), and the other fields encoded now. `create()` would walk
    the body through the client's type-driven transform first, and a reply
    would be built into its pydantic models: together about 1 ms of the
    worker's CPU per request (measured, `bench/openai_overhead.py`), where the
    request is wire-format JSON already and `parse_reply` reads a few fields.
    A reply comes back as a read-only view of its JSON (`ReplyView`); a streamed
    one as the client's `AsyncStream`. The client still sends it (headers,
    base URL, timeout) and raises its own errors for a failed request.
    """
    completions = client.chat.completions
    unknown = sorted(request.keys() - _takes(type(completions).create))
    if unknown:
        # a typo fails the run at once, not at the provider
        raise UnknownSetting(
            f"create() got an unexpected keyword argument {', '.join(map(repr, unknown))}"
        )
    if _CLIENT_OPTIONS & request.keys():
        # the client's own path (its options); a whole reply read as below
        if request.get("stream"):
            return await completions.create(**request)
        return ReplyView.of(
            loads_reply((await completions.with_raw_response.create(**request)).content)
        )
    from openai import AsyncStream
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    fields = {k: v for k, v in request.items() if k not in ("messages", "extra_body")}
    fields.update({k: v for k, v in (request.get("extra_body") or {}).items() if k != "messages"})
    if encoded is None:
        messages = (request.get("extra_body") or {}).get("messages", request.get("messages") or [])
        body = json.dumps({"messages": messages, **fields}, separators=(",", ":")).encode()
    else:
        # one copy of a long conversation's bytes, not one per concatenation
        rest = json.dumps(fields, separators=(",", ":")).encode()
        tail = b"," + rest[1:] if len(rest) > 2 else b"}"
        body = b"".join((b'{"messages":[', encoded, b"]", tail))
    stream = bool(fields.get("stream"))
    reply = await client.post(
        "/chat/completions",
        # bytes: the body as it came, with no HTTP library's types imported for it
        cast_to=ChatCompletion if stream else bytes,
        # openai 1.x takes raw bytes as `body`; later versions as `content`
        **{"content" if "content" in _takes(type(client).post) else "body": body},
        stream=stream,
        stream_cls=AsyncStream[ChatCompletionChunk],
    )
    if stream:
        return reply
    return ReplyView.of(loads_reply(reply))


@functools.cache
def _takes(method: Any) -> frozenset[str]:
    """The parameter names of a client method (looked up once per type)."""
    return frozenset(inspect.signature(method).parameters)


def _classified(exc: Exception, inp: GenerateInput) -> ApplicationError:
    """The error Temporal should see for a failed request, logged when it is the provider's."""
    mapped = model_error(exc)
    if mapped is None:
        if is_machinery(exc):
            return worker_stopping(f"turn {inp.turn}'s model request", exc)
        if isinstance(exc, UnknownSetting):
            return ApplicationError(
                _redact.clean(f"The model request was refused by the client: {safe_str(exc)}"),
                type="ModelRequestError",
                non_retryable=True,
            )
        return internal_error("sending the model request", exc, _redact.clean)
    if activity.in_activity():
        logger.warning(
            "generate %s turn %d attempt %d: %s",
            inp.run_id,
            inp.turn,
            activity.info().attempt,
            mapped.message,
        )
        return said_once(mapped)
    return mapped


def refusal_text(value: Any) -> str | None:
    """A message's (or delta's) `refusal`, when it is text.

    Raises:
        MalformedReply: when it is something else (not null).
    """
    if value is not None and not isinstance(value, str):
        raise MalformedReply(f"the message's refusal is {json_kind(value)}, not text")
    return value


def parse_reply(raw: Any) -> GenerateResult:
    """A chat completion as a `GenerateResult`.

    Raises:
        MalformedReply: saying what is missing or wrong.
        StoppedEmpty: the provider ended it (content filter, token limit) with
            neither text nor a tool call.
    """
    choices = getattr(raw, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise MalformedReply(
            "no choices"
            if isinstance(choices, list)
            else f"not a chat completion: {clip(str(raw), 200)}"
        )
    message = getattr(choices[0], "message", None)
    if message is None:
        raise MalformedReply("the first choice has no message")
    parts = getattr(message, "content", None)
    content = content_text(parts)
    if not content:
        # a refusal comes as `content: null` and its text in `refusal`: it is the
        # model's answer, and the run's `message` and final output carry it
        content = refusal_text(getattr(message, "refusal", None)) or content
    audio = getattr(message, "audio", None)
    content = content or transcript(audio) or content
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise MalformedReply(f"the message's tool_calls are {json_kind(tool_calls)}, not a list")
    calls = []
    for index, tc in enumerate(tool_calls or []):
        function = getattr(tc, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name:
            raise MalformedReply(f"tool call {index} has no function name")
        arguments = arguments_text(getattr(function, "arguments", None))
        if arguments is None:
            raise MalformedReply(f"the arguments of tool call {index} are not a string")
        call_id = getattr(tc, "id", None)
        calls.append(
            {
                # a call needs an id to be answered; some servers leave it out
                "id": call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    if not calls:
        # a server speaking the older functions API calls the tool here
        legacy = legacy_call(getattr(message, "function_call", None), 0)
        calls += [legacy] if legacy is not None else []
    empty = stopped_empty(getattr(choices[0], "finish_reason", None), content, calls)
    if empty is None and not content and not calls:
        empty = no_text(other_parts(parts), audio is not None)
    if empty is not None:
        raise empty
    return GenerateResult(
        text=content,
        reasoning=_reasoning(message),
        calls=calls,
        usage=_usage(raw),
    )
