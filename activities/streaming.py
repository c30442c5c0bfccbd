"""Streaming a completion: accumulate the chunks into one `GenerateResult`.

Used when a run asks for text deltas. Tool calls arrive fragmented and keyed
by `index` (id and name may come in a later chunk than the first for that
index); usage arrives in a final chunk when `include_usage` is set. A reply is
complete only once it says so (`[DONE]`, or a choice's finish_reason and the
usage count after it): one whose connection closed before (a proxy's
timeout, an HTML page instead of events) is a failed request, never a
shorter answer, nor one recorded as costing 0 tokens. Asked again, the
answer is recorded with the provider's own count; guessing the lost count
would put a made-up number among the provider's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio import activity

from agentor_temporal.activities import _redact
from agentor_temporal.activities._number_tails import (
    in_run,
    numbers_begun,
    open_dump_line,
    run_bound,
)
from agentor_temporal.activities._private import clip, token_count
from agentor_temporal.activities._provider_errors import (
    CutOffReply,
    MalformedReply,
    SlowReply,
    json_kind,
    stopped_empty,
)
from agentor_temporal.activities._reply_answers import legacy_call, no_text, other_parts, transcript
from agentor_temporal.activities._reply_json import EndSeen, arguments_text, content_text
from agentor_temporal.activities._slow_model import QuietReply, request_of, said_when_silent
from agentor_temporal.store.encoding import encodable_text
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import GenerateInput, GenerateResult
from agentor_temporal.workflows.canonical import Canonical, begun, canonical_forms, charset
from agentor_temporal.workflows.policies import (
    DELTA_BATCH_INTERVAL,
    DELTAS_TOPIC,
    MAX_REPLY_BYTES,
)
from agentor_temporal.workflows.redaction import redact_url
from agentor_temporal.workflows.wrapped import wrapped_begun

logger = logging.getLogger(__name__)

#: Called with each text delta as it arrives (e.g. to publish it to the run).
DeltaSink = Callable[[str], Awaitable[None]]
#: Sends a chat-completions request (its keyword arguments) and returns the response.
Create = Callable[[dict[str, Any]], Awaitable[Any]]


async def stream_completion(
    client: Any,
    request: dict[str, Any],
    on_delta: DeltaSink | None = None,
    create: Create | None = None,
) -> GenerateResult:
    """Run a streamed chat completion; hand each text delta to `on_delta`.

    `create` sends the request (default: `client.chat.completions.create`).
    """
    request = {**request, "stream": True, "stream_options": {"include_usage": True}}
    sent = client.chat.completions.create(**request) if create is None else create(request)
    # a provider holding the request before its first byte: said once
    limit = policies.MODEL_REPLY_LIMIT.total_seconds()
    where = str(getattr(client, "base_url", "") or "?")
    stream = await said_when_silent(sent, base_url=where, what=request_of(), limit=limit)
    ends = EndSeen.watch(stream)
    finished = False
    chunks = 0
    text: list[str] = []
    reasoning: list[str] = []
    partial: dict[int, dict[str, str]] = {}
    legacy: dict[str, str] = {}  # a legacy function_call's name and arguments, gathered
    kinds: list[str] = []  # the kinds of content parts holding no text
    heard = False  # an audio answer came
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    counted = False
    streamed = 0
    reason: Any = None
    try:
        async for chunk in _paced(stream, client):
            chunks += 1
            if chunk is None or json_kind(chunk) != "an object":
                # `data: null`, `[1,2]`, a bare string or number: no part of a reply
                # (a stream of only such lines was taken as an empty final answer)
                raise MalformedReply(f"a streamed chunk is {json_kind(chunk)}, not an object")
            raw_usage = getattr(chunk, "usage", None)
            if raw_usage is not None:
                counted = True
                usage = {
                    "input_tokens": token_count(getattr(raw_usage, "prompt_tokens", 0)),
                    "output_tokens": token_count(getattr(raw_usage, "completion_tokens", 0)),
                    "total_tokens": token_count(getattr(raw_usage, "total_tokens", 0)),
                }
            choices = getattr(chunk, "choices", None)
            if not choices:
                continue
            if not isinstance(choices, list):
                raise MalformedReply(f"a chunk's choices are {json_kind(choices)}, not a list")
            choice = _object(choices[0], "a chunk's first choice")
            if getattr(choice, "finish_reason", None) is not None:
                finished = True
                reason = choice.finish_reason
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            content = getattr(_object(delta, "a chunk's delta"), "content", None)
            if isinstance(content, list):
                kinds += [k for k in other_parts(content) if k not in kinds]
                content = content_text(content)  # content parts, as a whole reply may send
            if content is not None and not isinstance(content, str):
                raise MalformedReply(f"a chunk's content is {json_kind(content)}, not text")
            refusal = getattr(delta, "refusal", None)
            if refusal is not None and not isinstance(refusal, str):
                raise MalformedReply(f"a chunk's refusal is {json_kind(refusal)}, not text")
            # a refusal streams in `refusal` deltas: the reply's text, as `parse_reply` takes it
            # (and so does an audio answer's transcript)
            audio = getattr(delta, "audio", None)
            heard = heard or audio is not None
            content = content or refusal or transcript(audio)
            if content:
                text.append(content)
                streamed += len(content)
                if streamed > MAX_REPLY_BYTES:
                    # past what a run records of one reply: `generate` refuses it;
                    # publishing the rest would only fill the run's history
                    finished = counted = True
                    break
                if on_delta is not None:
                    await on_delta(encodable_text(content))
            for attr in ("reasoning_content", "reasoning"):
                value = getattr(delta, attr, None)
                if isinstance(value, str) and value:
                    reasoning.append(value)
                    break
            _add_calls(partial, getattr(delta, "tool_calls", None))
            _add_legacy(legacy, getattr(delta, "function_call", None))
    finally:
        # a stream left early (too long, malformed, cancelled) holds its connection
        close = getattr(stream, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # the reply's own error is the one to see
                await close()
    if not (finished or (ends is not None and ends.done)):
        raise _unfinished(stream, chunks)
    if ends is not None and not ends.done and not counted:
        # the usage count (asked for) comes after the finish_reason: a reply taken
        # without it would record 0 tokens for a generation that was paid for
        raise CutOffReply(
            f"ended after {chunks} chunks, after its finish_reason but before its usage "
            "count (no [DONE]): the connection closed mid-reply"
        )
    calls = [
        {
            # a call needs an id to be answered: one that never came is named as a
            # whole reply's is (it was "", every such call of the turn sharing it)
            "id": slot["id"] or f"call_{position}",
            "type": "function",
            "function": {"name": slot["name"], "arguments": slot["arguments"]},
        }
        for position, (_, slot) in enumerate(sorted(partial.items()))
    ]
    if not calls and legacy:
        # a server speaking the older functions API streams the call here
        calls = [call for call in [legacy_call(legacy, 0)] if call is not None]
    empty = stopped_empty(reason, "".join(text), calls)
    if empty is None and not "".join(text) and not calls:
        empty = no_text(kinds, heard)
    if empty is not None:
        raise empty
    return GenerateResult(
        text="".join(text) or None,
        reasoning="".join(reasoning) or None,
        calls=calls,
        usage=usage,
    )


async def _paced(stream: Any, client: Any) -> AsyncIterator[Any]:
    """`stream`'s chunks, each within MODEL_REPLY_LIMIT of the one before (else SlowReply).

    The client's timeout bounds each read, and an endpoint sending keep-alive
    comments (a proxy waiting on a stuck upstream) never lets one time out:
    the request was held for ever. A chunk, however slow the answer, resets it.
    """
    limit = policies.MODEL_REPLY_LIMIT.total_seconds()
    chunks = stream.__aiter__()
    base_url = str(getattr(client, "base_url", "") or "?")
    # a provider hanging between parts (or after its headers): said once, long before the limit
    async with QuietReply(base_url=base_url, what=request_of(), limit=limit) as quiet:
        while True:
            try:
                chunk = await asyncio.wait_for(chunks.__anext__(), limit)
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                where = redact_url(str(getattr(client, "base_url", "") or "")) or "?"
                raise SlowReply(
                    f" at {where} sent no part of its streamed reply for {limit:g} s, though "
                    "it kept the connection open (a provider or proxy holding the request)"
                ) from None
            quiet.part()
            yield chunk


def _unfinished(stream: Any, chunks: int) -> Exception:
    """The error for a streamed reply that ended without saying it was complete."""
    response = getattr(stream, "response", None)
    kind = clip(str(getattr(response, "headers", {}).get("content-type") or ""), 100)
    if not chunks and "event-stream" not in kind:
        # a proxy's or portal's page: no events in it at all
        return MalformedReply(f"not a stream of events, but {kind or 'a body of no type'}")
    return CutOffReply(
        f"ended after {chunks} chunks, before it was complete (no [DONE], no finish_reason): "
        "the connection closed mid-reply"
    )


def _object(value: Any, what: str) -> Any:
    """`value`, if the chunk's JSON has an object there (or nothing)."""
    if value is not None and json_kind(value) != "an object":
        raise MalformedReply(f"{what} is {json_kind(value)}, not an object")
    return value


def _add_calls(partial: dict[int, dict[str, str]], calls: Any) -> None:
    """Add a delta's tool-call fragments to the calls gathered so far, by index."""
    if calls is None:
        return
    if not isinstance(calls, list):
        raise MalformedReply(f"a chunk's tool_calls are {json_kind(calls)}, not a list")
    for call in calls:
        index = getattr(_object(call, "a chunk's tool call"), "index", None)
        if not isinstance(index, int) or isinstance(index, bool):
            raise MalformedReply(f"a chunk's tool call index is {json_kind(index)}, not a number")
        function = _object(getattr(call, "function", None), f"tool call {index}'s function")
        arguments = getattr(function, "arguments", None)
        if isinstance(arguments, (dict, list)):
            arguments = arguments_text(arguments)  # an object, as a whole reply may send
        parts = {
            "id": getattr(call, "id", None),
            "name": getattr(function, "name", None),
            "arguments": arguments,
        }
        for part, value in parts.items():
            if value is not None and not isinstance(value, str):
                raise MalformedReply(
                    f"a chunk's tool call {index} has {json_kind(value)} as its {part}, "
                    "not a string"
                )
        slot = partial.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if parts["id"]:
            slot["id"] = parts["id"]
        if parts["name"]:
            slot["name"] = parts["name"]
        if parts["arguments"]:
            slot["arguments"] += parts["arguments"]


def _add_legacy(legacy: dict[str, str], fragment: Any) -> None:
    """Add a delta's legacy `function_call` fragment (name, arguments) to the one gathered."""
    if fragment is None:
        return
    _object(fragment, "a chunk's function_call")
    for part in ("name", "arguments"):
        value = getattr(fragment, part, None)
        if isinstance(value, (dict, list)) and part == "arguments":
            value = arguments_text(value)
        if value is not None and not isinstance(value, str):
            raise MalformedReply(
                f"a chunk's function_call has {json_kind(value)} as its {part}, not a string"
            )
        if value:
            legacy[part] = legacy.get(part, "") + value if part == "arguments" else value


class MaskedDeltas:
    """Text deltas with every known secret masked, even one split over several deltas.

    The final text is masked as a whole (`generate`); deltas are published as
    they come, so an end of the text that begins a known secret is held back
    until the next delta or `flush` shows whether the secret follows; so is an end
    that may be a key's bytes written as numbers (`_number_tails`), or a key's beginning
    and a line break (`wrapped.wrapped_begun`).
    """

    def __init__(self, sink: DeltaSink) -> None:
        self.sink = sink
        self.held = ""
        self.compacted = 0
        #: whether what is held is all a run of numbers, and how long it may grow unread
        self.run_held = False
        self.run_room = 0

    async def __call__(self, text: str) -> None:
        if self.run_held and in_run(text) and len(self.held) + len(text) < self.run_room:
            # a run of numbers going on, one number a delta: held as it comes, read (and
            # masked) once its held stretch doubles, so a long run is read a few times,
            # not once a number
            self.held += text
            return
        whole = self.held + text
        raw = len(whole) - open_dump_line(whole)
        masked = _redact.mask_secrets(whole[:raw]) + whole[raw:]
        # a key's beginning in a spelling the canonical pass reads, or its bytes' numbers, or
        # cut by a line break (`sk-proj-` ending a line: `wrapped`)
        known = _redact.secrets()
        cut = len(masked) - max(
            _secret_begun(masked),
            numbers_begun(masked, known),
            wrapped_begun(masked, tuple(known)),
        )
        self.held = masked[cut:]
        if len(self.held) > max(_HELD_COMPACT, 2 * self.compacted):
            # a key's beginning padded with invisible characters, one a delta: held
            # without them, or each delta would read the whole padding again
            self.held = _visible(self.held)
            self.compacted = len(self.held)
        self.run_room = 2 * run_bound(_redact.secrets())
        self.run_held = bool(self.held) and in_run(self.held)
        if cut:
            await self.sink(masked[:cut])

    async def flush(self) -> None:
        """Send what was held back (the reply ended: no secret can complete it)."""
        held, self.held = self.held, ""
        if held:
            # masked again: a hex dump's last line is held as it came (`open_dump_line`)
            await self.sink(_redact.mask_secrets(held))


class PacedDeltas:
    """A streamed reply's deltas, at a pace its run's history can hold.

    For `policies.DELTAS_LIVE_FOR` seconds the text goes out as it comes,
    what came within one `policies.DELTA_BATCH_INTERVAL` gathered into one
    item (a timer sends it when no more comes); then one item per
    `DELTAS_SLOW_INTERVAL`, and none after `DELTAS_UNTIL` (see `policies`).
    Text gathered in the slow phase goes out with the next delta due, or at
    `flush`. Each item costs its run's history ~190 bytes besides its text
    (its payload, base64 in the publish signal): a provider streaming a
    token a chunk, faster than the batch interval (a 480 kB reply of words,
    one item each), put 14.7 MB in history, an execution over its budget
    that no continue-as-new can split; the publisher sends one signal per
    interval anyway, so gathering an interval's text adds no latency.
    """

    def __init__(
        self,
        sink: DeltaSink,
        clock: Callable[[], float] = time.monotonic,
        gather: float = DELTA_BATCH_INTERVAL.total_seconds(),
    ) -> None:
        self.sink = sink
        self.clock = clock
        self.gather = gather
        self.started = clock()
        self.sent_at = self.started - gather
        self.held = ""
        self._timer: asyncio.Task[None] | None = None

    async def __call__(self, text: str) -> None:
        now = self.clock()
        elapsed = now - self.started
        if elapsed >= policies.DELTAS_UNTIL:
            self.held = ""
            self.stop()
            return
        self.held += text
        if elapsed < policies.DELTAS_LIVE_FOR:
            if now - self.sent_at >= self.gather:
                await self._send(now)
            elif self._timer is None:
                self._timer = asyncio.ensure_future(self._later(self.sent_at + self.gather - now))
        elif now - self.sent_at >= policies.DELTAS_SLOW_INTERVAL:
            await self._send(now)

    async def _later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._timer = None
        await self._send(self.clock())

    async def flush(self) -> None:
        """Send what was gathered (the reply ended), unless deltas had stopped."""
        self.stop()
        if self.clock() - self.started < policies.DELTAS_UNTIL:
            await self._send(self.clock())

    def stop(self) -> None:
        """Send nothing more that a timer holds (the reply ended or failed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _send(self, now: float) -> None:
        self.stop()
        held, self.held = self.held, ""
        self.sent_at = now
        if held:
            await self.sink(held)


#: The length of held text past which its invisible characters are dropped (then twice
#: what was left: a key's beginning written as escapes is held whole, read once a delta).
_HELD_COMPACT = 256


def _visible(text: str) -> str:
    return Canonical(text, charset(canonical_forms(frozenset(_redact.secrets())))).visible()


def _secret_begun(text: str) -> int:
    """The length of the longest end of `text` that may begin a known secret.

    In any spelling `mask_secret` masks (`canonical`: any letter case, JSON-escaped,
    percent-encoded, as HTML character references, in full-width letters, with
    invisible characters between its letters), an end cut inside an escape included.
    """
    return begun(text, canonical_forms(frozenset(_redact.secrets())))


async def stream_with_deltas(
    client: Any, request: dict[str, Any], inp: GenerateInput, create: Create | None = None
) -> GenerateResult:
    """Stream a completion, publishing text deltas to the run's workflow stream.

    Deltas travel as batched signals, so a worker anywhere reaches the client.
    A retried attempt first publishes a reset marker: followers then know the
    text streamed so far for this turn is void (the `generation` event that
    follows carries the authoritative text).
    """
    temporal = _temporal_client()
    if temporal is None:
        return await stream_completion(client, request, create=create)
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    attempt = activity.info().attempt if activity.in_activity() else 1
    publisher = WorkflowStreamClient.create(
        temporal, inp.run_id, batch_interval=DELTA_BATCH_INTERVAL
    )
    topic = publisher.topic(DELTAS_TOPIC)

    async def publish(text: str) -> None:
        topic.publish({"turn": inp.turn, "attempt": attempt, "text": text})

    paced = PacedDeltas(publish)
    masked = MaskedDeltas(paced)
    await publisher.__aenter__()
    try:
        if attempt > 1:
            topic.publish({"turn": inp.turn, "attempt": attempt, "reset": True})
        result = await stream_completion(client, request, masked, create)
        await masked.flush()
        await paced.flush()
    finally:
        paced.stop()
        await _last_deltas(publisher, inp)
    return result


async def _last_deltas(publisher: Any, inp: GenerateInput) -> None:
    """Send the deltas still buffered; one the run refuses is dropped, never the answer.

    Deltas are a live view: the `generation` event carries the whole text.
    A run that takes no more signals (Temporal's cap on an execution's
    signals, 10,000 by default, reached by a flood of them; the server
    unreachable at that moment) refused the publish, and the paid answer in
    hand was lost with it: the request failed as an internal error.
    """
    try:
        await publisher.__aexit__(None, None, None)
    except Exception as exc:
        logger.warning(
            "Run %s, turn %d: text deltas could not reach the run (%s); followers get the "
            "turn's text with its generation event",
            inp.run_id,
            inp.turn,
            _redact.clean(f"{type(exc).__name__}: {exc}"),
        )


def _temporal_client() -> Any:
    """The worker's Temporal client, or None outside a worker (unit tests)."""
    if not activity.in_activity():
        return None
    try:
        return activity.client()
    except RuntimeError:
        return None
