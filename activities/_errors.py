"""Whose failure is it: the tool's or model's own answer, or our machinery's.

The rule the activities follow: a tool's own outcome (a return, a raise, a
timeout) and a model's own answer are final and recorded; a failure of our
own machinery (the sync-tool pool already shut down, the worker stopping,
the interpreter exiting) is never recorded as either. It is raised as a
retryable `WorkerStopping`, so the task goes back to Temporal and another
worker runs it. An error of our own code (not the provider's) is not retried
as if the provider were down: it fails at once, saying so.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agentor_temporal.store.encoding import encodable_text

logger = logging.getLogger(__name__)

#: Error types the activities raise (written into history; the UI shows them).
WORKER_STOPPING = "WorkerStopping"
WORKER_BUSY = "WorkerBusy"
INTERNAL_ERROR = "AgentorInternalError"

#: Messages of the RuntimeErrors that say a pool or loop refuses work because
#: its process or worker is shutting down (concurrent.futures and asyncio).
_SHUTDOWN_MESSAGES = (
    "cannot schedule new futures after",
    "Event loop is closed",
    "Executor shutdown has been called",
    "interpreter shutdown",
)


def safe_str(exc: BaseException) -> str:
    """`"Type: message"` for any exception, even one whose `__str__` raises.

    Whatever its `__str__` or `__repr__` does (raise a `CancelledError`,
    `SystemExit` or `GeneratorExit`, return a `str` subclass with methods of
    its own), the answer is a plain `str` and nothing escapes: this text is
    the tool's answer, and an exception raised while making it would be taken
    for the worker's own failure and run the tool again.
    """
    name = plain_text(type(exc).__name__) or "Exception"
    text = _described(str, exc)
    if text is None:
        text = _described(repr, exc)
    if text is None:
        text = f"<unprintable {name}>"
    return f"{name}: {text}" if text else name


def plain_text(value: object) -> str | None:
    """`value` as an exact `str` without calling any method of its own (None if not a str)."""
    if not isinstance(value, str):
        return None
    try:
        # str's own slicing: an exact copy, whatever a subclass overrides
        return str.__getitem__(value, slice(None))
    except BaseException:  # noqa: B036 - an object only pretending to be a str
        return None


def _described(describe: Any, exc: BaseException) -> str | None:
    try:
        return plain_text(describe(exc))
    except BaseException:  # noqa: B036 - a message that cannot be made is no message
        return None


def is_machinery(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it wraps) says our pool or loop is shutting down."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RuntimeError):
            try:
                text = str(exc)
            except Exception:
                text = ""
            if any(m in text for m in _SHUTDOWN_MESSAGES):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


def worker_stopping(what: str, exc: BaseException | None = None) -> ApplicationError:
    """The retryable error that hands a task back to Temporal from a stopping worker."""
    detail = f" ({safe_str(exc)})" if exc is not None else ""
    return ApplicationError(
        f"This worker is stopping and could not run {what}{detail}; Temporal gives the "
        "task to another worker. Nothing was recorded as its result.",
        type=WORKER_STOPPING,
        # expected during deploys and exits: logged by the SDK at debug level
        category=ApplicationErrorCategory.BENIGN,
    )


def worker_busy(what: str, exc: BaseException) -> ApplicationError:
    """The retryable error that hands back a call this worker had no thread for."""
    return ApplicationError(
        f"This worker was too busy to start {what}: {exc}. Temporal gives the task "
        "back (to this worker later, or another). Nothing was recorded as its result.",
        type=WORKER_BUSY,
        category=ApplicationErrorCategory.BENIGN,
    )


def instead_of_cancel(what: str) -> ApplicationError | None:
    """What to raise instead of a CancelledError our worker caused (None: re-raise it).

    A worker stopping cancels its activities: that is not the call's outcome,
    so the task goes back to Temporal (`WorkerStopping`). The server having
    given up on this attempt (a heartbeat timeout while the worker was busy)
    makes the completion moot: a quiet error, rather than a warning. A cancel
    the run asked for stays a cancel.
    """
    if not activity.in_activity():
        return None
    details = activity.cancellation_details()
    if details is None or details.cancel_requested:
        return None
    if details.worker_shutdown:
        # said: the stop took the call back unfinished (its graceful shutdown ran out),
        # and it runs again elsewhere; before, the worker said only "Worker stopped"
        logger.warning(
            "%s in run %s was still running when this worker's graceful shutdown ran out: "
            "handed back to Temporal, another worker runs it again (a longer "
            "AGENTOR_GRACEFUL_SHUTDOWN, and a stop grace longer still, lets it finish)",
            what,
            activity.info().workflow_id,
        )
        return worker_stopping(what)
    if details.timed_out or details.not_found:
        return ApplicationError(
            f"The server gave up on this attempt of {what} (it timed out while this "
            "worker was busy); another attempt runs it",
            type=WORKER_STOPPING,
            category=ApplicationErrorCategory.BENIGN,
        )
    return None


def run_cancelled() -> bool:
    """Whether this activity is being cancelled because its run was (by a client, the UI).

    Not a worker stopping, not the server giving up on the attempt, not a
    paused or reset activity: only then does a call finish what it started
    so that the run can record it.
    """
    if not activity.in_activity():
        return False
    details = activity.cancellation_details()
    return (
        details is not None
        and details.cancel_requested
        and not (details.worker_shutdown or details.reset or details.paused)
    )


def being_cancelled() -> bool:
    """Whether the current task is being cancelled (not just seeing a CancelledError)."""
    if activity.in_activity() and activity.is_cancelled():
        return True
    task = asyncio.current_task()
    cancelling: Any = getattr(task, "cancelling", None)
    return bool(callable(cancelling) and cancelling())


def internal_error(what: str, exc: BaseException, redact: Any = None) -> ApplicationError:
    """A non-retryable error for a bug of ours: retrying would only repeat it."""
    detail = safe_str(exc)
    if redact is not None:
        detail = redact(detail)
    return ApplicationError(
        f"agentor-temporal failed while {what} ({detail}). This is an error in "
        "agentor-temporal or its configuration, not a provider outage, so it is not "
        "retried; the run fails here and resume(run_id) continues it.",
        type=INTERNAL_ERROR,
        non_retryable=True,
    )


def said_once(error: ApplicationError) -> ApplicationError:
    """`error`, benign when it will be retried: for an attempt already said in one line.

    The SDK logs every other failed attempt as 'Completing activity as failed'
    with a traceback from deep inside: a provider down for its five minutes of
    retries printed dozens into the caller's script after our own lines. A
    final failure keeps its category, so the run's end is logged with it once.
    """
    if error.non_retryable or error.category == ApplicationErrorCategory.BENIGN:
        return error
    return ApplicationError(
        error.message,
        *error.details,
        type=error.type,
        non_retryable=False,
        next_retry_delay=error.next_retry_delay,
        category=ApplicationErrorCategory.BENIGN,
    )


def encodable_error(exc: BaseException) -> BaseException:
    """`exc`, or an `ApplicationError` like it whose text encodes (U+FFFD for a lone surrogate).

    A failure's message is a protobuf string: one holding a lone surrogate (a
    provider's error escaping it as JSON's "\\ud800", an OS error naming a file
    decoded with surrogateescape) could not be encoded, and the SDK reported
    'Failed building exception result: ... surrogates not allowed' instead,
    retryable: a provider's final 400 was asked again for minutes. Its type,
    retry decision and delay are kept; so is its cause, made encodable too.
    """
    if not isinstance(exc, Exception) or _chain_encodable(exc):
        return exc
    cause = exc.__cause__
    if isinstance(exc, ApplicationError):
        rebuilt = ApplicationError(
            encodable_text(exc.message),
            *exc.details,
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            category=exc.category,
        )
    else:
        # what the SDK's failure converter makes of any other exception
        rebuilt = ApplicationError(encodable_text(str(exc)), type=type(exc).__name__)
    rebuilt.__cause__ = encodable_error(cause) if cause is not None else None
    return rebuilt


def _chain_encodable(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = current.message if isinstance(current, ApplicationError) else _text(current)
        if encodable_text(text) != text:
            return False
        current = current.__cause__
    return True


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # an unprintable exception: the SDK says so itself
        return ""
