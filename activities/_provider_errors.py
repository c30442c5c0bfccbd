"""A model request's failures that are the provider's, each made retried or final.

408/409/429/5xx, connection errors and timeouts are retried (honouring
`Retry-After`, capped at MAX_RETRY_AFTER) until MODEL_RETRY_BUDGET is spent,
then final. Any other 4xx is final at once, with the provider's own message,
and so is a 429 or a streamed error event whose type or code says retrying
cannot change it (a quota spent, a prompt past the context window).
An error event in a streamed reply (an overloaded provider) is retried too,
and so is a streamed reply cut off before its end (`CutOffReply`), or one
still not over after MODEL_REPLY_LIMIT (`SlowReply`).
A reply ended by the provider's content filter or its token limit before any
text or tool call (`StoppedEmpty`) is final at once, saying so: recorded, it
would pass as the model's empty answer.
A malformed reply (not JSON, not UTF-8, no choices, a call without a name) is
retried briefly, for MALFORMED_REPLY_BUDGET, then final, saying what was
wrong. A request the HTTP client refused to send (a header or URL it cannot
hold) is our configuration, not the provider: final at once, naming the
setting to fix.
Every message is redacted (URL credentials and query values, known keys)
before Temporal records it.
"""

from __future__ import annotations

import email.utils
import json
import math
import ssl
import time
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

from agentor_temporal.activities import _redact
from agentor_temporal.activities._private import clip, waited
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.redaction import redact_url

#: Retry-After values above this are capped: a provider asking for an hour
#: should not silently park a run; the retry budget bounds the rest.
MAX_RETRY_AFTER = timedelta(minutes=5)
#: Error type of a reply the client could not read as a chat completion.
MALFORMED_REPLY = "ModelReplyMalformed"


class MalformedReply(Exception):
    """The provider answered, but not with a usable chat completion."""


class CutOffReply(Exception):
    """A streamed reply ended before the provider said it was complete: the connection
    closed mid-reply, with no `[DONE]` and no finish_reason."""


class StoppedEmpty(Exception):
    """The provider ended a reply for a reason of its own (`finish_reason` "content_filter",
    "length") before any text or tool call: recorded, it would pass as an empty answer."""


#: Why a reply ended with nothing in it, by its finish_reason, and what to do.
_EMPTY_STOPS = {
    "content_filter": (
        "the provider's content filter withheld it (finish_reason 'content_filter'), "
        "before any text or tool call; change the input or the provider's filter "
        "settings, then resume the run"
    ),
    "length": (
        "it reached its token limit (finish_reason 'length') before any text or tool "
        "call (a reasoning model can spend it all thinking); raise max_tokens in the "
        "agent's model_settings, then resume the run"
    ),
}


def stopped_empty(finish_reason: Any, text: str | None, calls: list[Any]) -> StoppedEmpty | None:
    """The failure of a reply that ended for `finish_reason` with neither text nor a call."""
    if text or calls or not isinstance(finish_reason, str):
        return None
    why = _EMPTY_STOPS.get(finish_reason)
    return None if why is None else StoppedEmpty(why)


class SlowReply(Exception):
    """The reply did not end within MODEL_REPLY_LIMIT, though the connection stayed open."""


def json_kind(value: Any) -> str:
    """What a reply's JSON value is, as a malformed reply's message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _retry_after(headers: Any) -> timedelta | None:
    if headers is None:
        return None
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return _capped(millis / 1000)
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return _capped(seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return _capped(when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _seconds(value: Any) -> float | None:
    """A header's number (None: absent, not a number, or NaN)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(seconds) else seconds


def _capped(seconds: float) -> timedelta:
    """A provider's delay between 0 and MAX_RETRY_AFTER, whatever it asked for.

    An endless or absurd one ('inf', 1e300) no timedelta holds raised
    OverflowError in the classifier: the failure went to Temporal unclassified,
    retried at the policy's pace for ever, past MODEL_RETRY_BUDGET, with no
    warning naming the provider's answer.
    """
    return timedelta(seconds=min(max(seconds, 0.0), MAX_RETRY_AFTER.total_seconds()))


def _provider_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return str(getattr(exc, "message", None) or exc)


#: A provider's error type or code (OpenAI's, Anthropic's) saying the request is
#: refused for what it is or for the account it is made on: a quota spent comes as
#: 429 (insufficient_quota), a prompt past the context window may come as an error
#: event mid-stream (a proxy relaying it): retrying them waited out
#: MODEL_RETRY_BUDGET (5 minutes) for the same answer.
_FINAL_KINDS = frozenset(
    {
        "insufficient_quota",
        "billing_hard_limit_reached",
        "billing_not_active",
        "billing_error",
        "account_deactivated",
        "invalid_api_key",
        "authentication_error",
        "permission_error",
        "invalid_request_error",
        "context_length_exceeded",
        "string_above_max_length",
        "request_too_large",
        "model_not_found",
        "not_found_error",
    }
)


def _final_kind(exc: Any) -> str | None:
    """The provider's error type or code that retrying cannot change, if `exc` has one.

    A numeric code of a client error (a proxy relaying the upstream's 400 in a
    stream's error event) is one too, but not 408, 409 or 429.
    """
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    fields = error if isinstance(error, dict) else {}
    for value in (getattr(exc, "code", None), getattr(exc, "type", None)) + tuple(
        fields.get(k) for k in ("code", "type", "status")
    ):
        if isinstance(value, str) and value.strip().lower() in _FINAL_KINDS:
            return value.strip().lower()
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.strip().isdigit():
            number = int(value.strip())
        if number is not None and 400 <= number < 500 and number not in (408, 409, 429):
            return str(number)
    return None


def model_error(exc: Exception) -> ApplicationError | None:
    """Map an `openai` exception to the error Temporal should see (None: not the provider's).

    Every message is redacted (URL credentials and query values, known keys).
    """
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = clip(_provider_message(exc))
        final = _final_kind(exc)
        if final is not None and status == 429:
            return ApplicationError(
                f"Model request failed with {status}: {message} ({final}: not a rate limit, "
                "so this is not retried; fix the account's plan, billing or key)",
                type="ModelRequestError",
                non_retryable=True,
            )
        if status in (408, 409, 429) or status >= 500:
            return _unavailable(
                f"Model endpoint answered {status}: {message}",
                _retry_after(exc.response.headers),
            )
        return ApplicationError(
            f"Model request failed with {status}: {message}",
            type="ModelRequestError",
            non_retryable=True,
        )
    if isinstance(exc, openai.APIConnectionError):
        unsent = _unsendable(exc)
        if unsent is not None:
            return unsent
        url = getattr(getattr(exc, "request", None), "url", None)
        where = f" at {redact_url(str(url))}" if url else ""
        untrusted = _cause(exc, ssl.SSLCertVerificationError)
        if untrusted is not None:
            # the same certificate is refused again: retried, the run waited minutes
            reason = getattr(untrusted, "verify_message", None) or untrusted
            return ApplicationError(
                _redact.clean(
                    f"Model endpoint{where} refused: its TLS certificate is not trusted "
                    f"({reason}). Fix the endpoint's certificate, or have this worker trust "
                    "the CA that signed it (SSL_CERT_FILE); this is not retried."
                ),
                type="ModelRequestError",
                non_retryable=True,
            )
        kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "unreachable"
        connect = _connect_bound(exc)
        if connect is not None:
            # silence, not a refusal: said apart, as the wait was the connect's bound
            return _unavailable(
                _redact.clean(
                    f"Model endpoint{where} did not accept a connection within {connect:g} s "
                    "(nothing answered: a firewall dropping the attempts, a host that is "
                    "down, or a wrong address); asked again"
                )
            )
        # openai says only "Connection error.": the reason (a name that does not
        # resolve, a refused port, a TLS failure) is in what it was raised from
        root = _root(exc)
        why = f" ({root})" if root and root not in str(exc) else ""
        return _unavailable(_redact.clean(f"Model endpoint {kind}{where}: {exc}{why}"))
    if isinstance(exc, StoppedEmpty):
        # asked again, the same input meets the same filter (or the same limit)
        return ApplicationError(
            f"The model's reply is empty: {exc}. The run failed without retrying.",
            type="ModelReplyEmpty",
            non_retryable=True,
        )
    if isinstance(exc, (openai.APIResponseValidationError, MalformedReply)):
        return malformed(_redact.clean(str(exc)))
    if isinstance(exc, CutOffReply):
        # what arrived is part of an answer: recorded, it would pass as the whole one
        return _unavailable(_redact.clean(f"The model endpoint's streamed reply {exc}"))
    if isinstance(exc, SlowReply):
        return _unavailable(_redact.clean(f"The model endpoint{exc}"))
    if isinstance(exc, openai.APIError):
        # an error event inside a streamed reply: the provider failed mid-answer
        message = clip(_provider_message(exc))
        final = _final_kind(exc)
        if final is not None:
            return ApplicationError(
                f"The model endpoint refused the request mid-reply: {message} ({final}); "
                "this is not retried.",
                type="ModelRequestError",
                non_retryable=True,
            )
        return _unavailable(f"The model endpoint reported an error mid-reply: {message}")
    if isinstance(exc, UnicodeDecodeError):
        return malformed(f"not UTF-8 text: {exc.reason} at byte {exc.start}")
    if isinstance(exc, json.JSONDecodeError):
        # the body (or a streamed chunk) is not JSON: an HTML error page, a proxy
        return malformed(f"not JSON: {exc}")
    return None


#: What the HTTP client's refusal to send a request (its exception's class name,
#: in httpx, httpcore and h11 alike) says to fix.
_UNSENDABLE = {
    "LocalProtocolError": (
        "an HTTP header it would carry is invalid: the API key (api_key, or "
        "OPENAI_API_KEY) or a header in extra_headers holds a line break, a space or "
        "another character a header cannot"
    ),
    "UnsupportedProtocol": "base_url does not begin with http:// or https://",
}


def _connect_bound(exc: BaseException) -> float | None:
    """The connect timeout (s) `exc` ran out, if it is the connect's (httpx's ConnectTimeout)."""
    for cause in _chain(exc):
        if type(cause).__name__ == "ConnectTimeout":
            request = getattr(cause, "_request", None)
            timeouts = getattr(request, "extensions", {}).get("timeout") or {}
            bound = timeouts.get("connect") if isinstance(timeouts, dict) else None
            return (
                float(bound)
                if isinstance(bound, (int, float))
                else (policies.MODEL_CONNECT_LIMIT.total_seconds())
            )
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from (or during), outermost first."""
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not seen for seen in chain):
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of `kind` in `exc`'s chain, if any."""
    return next((e for e in _chain(exc) if isinstance(e, kind)), None)


def _root(exc: BaseException) -> str:
    """The innermost non-empty message of `exc`'s chain, clipped ("" if none)."""
    for cause in reversed(_chain(exc)[1:]):
        text = str(cause).strip()
        if text:
            return clip(text.splitlines()[0])
    return ""


def _unsendable(exc: BaseException) -> ApplicationError | None:
    """The error for a request the client refused to send, if it was refused (else None).

    Nothing reached the endpoint, and the same request would be refused again:
    final at once. The client's own text is not shown: it quotes the header,
    which may be the key.
    """
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        fix = _UNSENDABLE.get(type(cause).__name__)
        if fix is not None:
            return ApplicationError(
                f"The model request was not sent: {fix}. Fix the agent's configuration; "
                "this is not retried.",
                type="ModelRequestError",
                non_retryable=True,
            )
        cause = cause.__cause__ or cause.__context__
    return None


def _unavailable(message: str, delay: timedelta | None = None) -> ApplicationError:
    """A provider failure: retried until the budget is spent, then final."""
    spent = waited() > policies.MODEL_RETRY_BUDGET.total_seconds()
    if spent:
        message += (
            f" (still failing after {policies.MODEL_RETRY_BUDGET.total_seconds() / 60:g} "
            "minutes of retries)"
        )
    elif delay:
        # the worker's log and the pending call's last failure say why nothing
        # happens meanwhile: a Retry-After may hold the run for minutes
        most = " (the most a Retry-After is waited)" if delay >= MAX_RETRY_AFTER else ""
        message += f"; asked again in {delay.total_seconds():g} s, as its Retry-After says{most}"
    return ApplicationError(
        message, type="ModelUnavailable", next_retry_delay=delay, non_retryable=spent
    )


def malformed(detail: str) -> ApplicationError:
    """A reply that is not a usable completion: retried a few times, then final."""
    final = waited() > policies.MALFORMED_REPLY_BUDGET.total_seconds()
    return ApplicationError(
        f"The model endpoint's reply is malformed ({detail})"
        + ("; it kept answering so, so the run fails" if final else ""),
        type=MALFORMED_REPLY,
        non_retryable=final,
        next_retry_delay=policies.MALFORMED_REPLY_RETRY_DELAY,
    )
