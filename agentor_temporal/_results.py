"""From a run's record to what the facade returns: input checks, ownership, `RunResult`.

A run's result is built from its events (the whole log) and, when its last
segment closed normally, the workflow's outcome; a run that failed as a
workflow (refused input, terminated) reports the failure instead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowFailureError,
)

from agentor_temporal._closed import closed
from agentor_temporal._pause_wait import wait_paused
from agentor_temporal._stuck import watching_stuck
from agentor_temporal.activities import AgentDefinition
from agentor_temporal.activities._redact import clean, mask_input, masked_event
from agentor_temporal.activities._redact import secrets as known_secrets
from agentor_temporal.store import (
    Event,
    PendingApproval,
    RunResult,
    final_event,
    initial_messages,
    replay_messages,
    total_usage,
)
from agentor_temporal.store.encoding import encodable_text, nesting
from agentor_temporal.workflows import PausedState, Segment, TemporalStore
from agentor_temporal.workflows.formatting import failure_message
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.policies import MAX_INPUT_DEPTH, MAX_REQUEST_BYTES
from agentor_temporal.workflows.redaction import redact

#: how long a pause's result waits for the pause's events to reach history. A
#: worker whose step that journals them outlasts its workflow task's heartbeat
#: (~8 s: a slow store, a busy machine) reports the pause with that heartbeat,
#: before they are there
PAUSE_RECORD_PATIENCE = 60.0


def check_input(input: Any) -> None:
    """Refuse what cannot start a run: an empty prompt, or a list that is not chat messages.

    Raises:
        ValueError: for an empty prompt, a malformed message list, or one nested
            deeper than a run takes (`MAX_INPUT_DEPTH`).
        TypeError: for anything else.
    """
    if isinstance(input, str):
        if not input.strip():
            raise ValueError("input is an empty prompt")
        return
    if isinstance(input, list):
        if not input:
            raise ValueError("input is an empty message list")
        for i, message in enumerate(input):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ValueError(f"input[{i}] is not a chat message (a dict with a 'role')")
        try:
            depth = nesting(input)
        except ValueError as exc:
            raise ValueError(f"input cannot be sent as JSON: {exc}") from None
        if depth > MAX_INPUT_DEPTH:
            raise ValueError(
                f"input nests {depth} levels deep, over the {MAX_INPUT_DEPTH} a run takes "
                "(a list of chat messages is 2 levels deep): flatten it, or pass the "
                "structure as a JSON string"
            )
        for i, message in enumerate(input):
            try:
                # as the run's history and the model request will hold it
                json.dumps(message, sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"input[{i}] cannot be sent as JSON ({type(exc).__name__}: {exc}); a chat "
                    "message holds text, numbers, booleans, None, lists and dicts with text keys"
                ) from None
        return
    raise TypeError(
        f"input must be a prompt string or a list of chat messages, not {type(input).__name__}"
    )


def check_turns(max_turns: Any, what: str = "max_turns", *, optional: bool = True) -> None:
    """Refuse a budget that is not a positive integer (`True` is not one; None is, if optional).

    Raises:
        ValueError: naming the value.
    """
    if (max_turns is not None or not optional) and (
        not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1
    ):
        raise ValueError(f"{what} must be a positive integer, got {max_turns!r}")


#: settings the run sets itself in every request: given by the user they would clash
OWN_SETTINGS = ("model", "messages", "tools", "stream")
#: the most a name goes into a search attribute with, as Temporal measures it
#: (its JSON, non-ASCII escaped: "é" is 6 bytes, an emoji 12); Temporal
#: refuses a value over 2 KB, and the run fails
MAX_NAME_BYTES = 1024


def check_given(instructions: Any, model_settings: dict[str, Any]) -> None:
    """Refuse instructions that are not text and settings JSON cannot carry, as given.

    Checked before the agent is built: a NaN is not equal to itself, so the
    build took it for a masked credential and moved it into the request body
    sent from the worker, where Python wrote it as `NaN`, which is not JSON:
    the provider refused every request of every run ("could not parse the
    JSON body"), naming nothing.

    Raises:
        TypeError: for instructions that are not a str (or None).
        ValueError: naming a setting that holds NaN or Infinity.
    """
    if instructions is not None and not isinstance(instructions, str):
        # before: "argument of type 'function' is not iterable" from deep inside
        # the build, or a run that failed later
        raise TypeError(
            f"instructions must be text (a str) or None, not {type(instructions).__name__}"
            " (they are recorded with each run and sent as the system message)"
        )
    for key, value in model_settings.items():
        if _holds_non_finite(value):
            raise ValueError(
                f"model setting {key!r} holds NaN or Infinity, which JSON cannot carry (no "
                "provider could read the request); give a finite number"
            )


def _holds_non_finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as exc:
        return "Out of range float" in str(exc)
    except (TypeError, RecursionError):
        return False  # not JSON at all: check_definition names it (or a client option)
    return False


def check_definition(agent: AgentDefinition) -> None:
    """Refuse an agent that no run of it could record, when it is built, not at its first run.

    Its name and model go into search attributes (Temporal refuses values over
    2 KB, failing every run); its settings into history as JSON; and its
    instructions, tool schemas and settings into every model request, which
    one Temporal payload must hold (a spec over 2 MB failed every workflow
    task of every run, for ever).

    Raises:
        ValueError: naming what is wrong and the limit.
    """
    for what, value in (("name", agent.name), ("model", agent.model)):
        if isinstance(value, str) and encodable_text(value) != value:
            # a metric label and a protobuf string: with metrics on, every workflow
            # task of every run failed ("Invalid value type for key agent")
            raise ValueError(
                f"the agent's {what} {value!r} holds a lone surrogate (text no UTF-8 "
                "encoder takes: a name decoded with surrogateescape); give it as text"
            )
        # measured as recorded: 512 "é" are 1,024 bytes of UTF-8 but 3,074 of
        # JSON, and every run failed with BadSearchAttributes
        size = len(json.dumps(value))
        if size > MAX_NAME_BYTES:
            raise ValueError(
                f"the agent's {what} is {size:,} bytes as Temporal records it (JSON, "
                f"non-ASCII characters escaped); at most {MAX_NAME_BYTES:,} "
                "(it is a search attribute of every run)"
            )
    clashing = sorted(set(OWN_SETTINGS) & agent.model_settings.keys())
    if clashing:
        raise ValueError(
            f"model setting(s) {', '.join(clashing)} are set by the run itself "
            "(stream with stream_text=True); leave them out"
        )
    for key, value in agent.model_settings.items():
        try:
            encoded_size(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(
                f"model setting {key!r} must be a JSON value (it is recorded in the run's "
                f"history): {type(exc).__name__}: {exc}"
            ) from None
    size = _definition_size(agent)
    if size > MAX_REQUEST_BYTES:
        raise ValueError(
            f"The agent is too large: its instructions, tool schemas and model settings come "
            f"to {size / 1e6:.2f} MB as Temporal encodes them, over the "
            f"{MAX_REQUEST_BYTES / 1e6:.1f} MB limit of one model request (Temporal accepts "
            "at most 2 MB in one payload). Shorten the instructions, or let a tool read "
            "what they quote."
        )


def _definition_size(agent: AgentDefinition) -> int:
    """What every request of the agent carries besides its messages, as Temporal encodes it."""
    schemas = [t.spec().openai_schema() for t in agent.tools]
    system = initial_messages(agent.instructions, "x")
    return encoded_size(system) + encoded_size(schemas) + encoded_size(agent.model_settings)


def check_size(agent: AgentDefinition, input: Any) -> None:
    """Refuse an input whose first model request would not fit one Temporal payload.

    Checked before anything starts: Temporal refuses a start over 2 MB with a
    raw `Blob data size exceeds limit`, and a run whose first request is over
    MAX_REQUEST_BYTES could only fail at its first turn.

    Raises:
        ValueError: naming the size and the limit.
    """
    first = initial_messages(agent.instructions, input)
    schemas = [t.spec().openai_schema() for t in agent.tools]
    size = encoded_size(first) + encoded_size(schemas) + encoded_size(agent.model_settings)
    if size > MAX_REQUEST_BYTES:
        raise ValueError(
            f"The input is too large: the first model request would be {size / 1e6:.2f} MB "
            f"as Temporal encodes it, over the {MAX_REQUEST_BYTES / 1e6:.1f} MB limit of one "
            "request (Temporal accepts at most 2 MB in one payload). Send less, or pass a "
            "reference (a file name, a URL) and let a tool read it."
        )


T = TypeVar("T")


def result_from(
    run_id: str,
    events: list[Event],
    outcome: dict[str, Any] | None,
    failure: str | None,
    secrets: Sequence[str | None] = (),
) -> RunResult:
    """The `RunResult` of a run that ended (or whose record is all there is).

    Its error is redacted: URL credentials, query values and `secrets` (and
    every API key this process knows) are masked.
    """
    end = final_event(events)
    if outcome is not None:
        status = str(outcome.get("status") or "completed")
        output, error = outcome.get("final_output"), outcome.get("error")
    elif end is not None and failure is None:
        status, output, error = end.status or "completed", end.text, end.error
    else:
        status, output, error = "failed", None, failure or "the run ended without a result"
    if error:
        # redacted where it was made; again here, for runs recorded before that
        error = redact(str(error), [*secrets, *known_secrets()])
    return RunResult(
        final_output=shown_text(output),
        status=status,
        run_id=run_id,
        events=shown_events(events),
        usage=total_usage(events),
        messages=shown_text(replay_messages(events)),
        error=error,
    )


def shown_error(error: str | None) -> str | None:
    """A recorded error as shown to a reader: URL credentials, query values and every key
    this process knows masked.

    Redacted where it was made; again on the way out, for runs recorded
    before that (an older version's tool error quoting its URL's password).
    """
    return redact(error, known_secrets()) if error else error


def shown_text(value: T) -> T:
    """Recorded content (a final output, messages) as shown to a reader: every key this
    process knows masked (URLs are left as they are: this is content, not an error).

    Masked where it was made (a tool's result, the model's answer); again on the way
    out, for runs recorded before that or by a process that did not know the key.
    """
    return mask_input(value) if value is not None else value


def shown_event(event: Event) -> Event:
    """`event` as shown to a reader (`RunResult.events`, `stream`, `show`, `export`, the HTTP
    routes): its error text redacted (`shown_error`), its content masked of the keys this
    process knows (`masked_event`)."""
    return masked_event(event, clean)


def shown_events(events: list[Event]) -> list[Event]:
    """Each of `events` as `shown_event`."""
    return [shown_event(e) for e in events]


def check_owner(
    agent: AgentDefinition,
    run_id: str,
    events: list[Event],
    spec: dict[str, Any] | None,
    *,
    build: bool = True,
) -> None:
    """Refuse to continue a run this agent was not built to run.

    `build`: check the definition too (False: the name only, for a finished
    run that is returned, not continued: a rebuilt agent still gets it).

    Raises:
        ValueError: naming the run's agent, or what differs from its definition.
    """
    recorded = spec.get("name") if spec else None
    if recorded is None:
        starts = [e for e in events if e.type == "run_start" and e.agent]
        recorded = starts[-1].agent if starts else None
    if recorded is not None and recorded != agent.name:
        raise ValueError(
            f"Run {run_id!r} belongs to agent {recorded!r}, not {agent.name!r}; "
            "resume it with that agent."
        )
    if not build or not spec or not spec.get("fingerprint"):
        return
    differences = agent.differences(spec)
    if differences:
        raise ValueError(
            f"Run {run_id!r} was started by {agent.name!r} built differently "
            f"({'; '.join(differences)}). Build the agent the same "
            "way (same model, instructions and tools) to resume it, or go on with this build "
            f"in a new run that copies it: agent.fork({run_id!r}) (the CLI's "
            f"'agentor-temporal fork {run_id} --agent MODULE:ATTR'); the run stays as it is."
        )


async def await_result(
    client: Client,
    run_id: str,
    *,
    pauses: bool,
    events_of: Callable[[list[Segment]], Awaitable[list[Event]]],
) -> RunResult:
    """Wait for the run's latest execution (or its pause) and build its `RunResult`.

    Args:
        client: connected to the run's namespace.
        run_id: the run.
        pauses: whether the agent has tools that wait for approval (then a
            pause returns a result with status `awaiting_approval`).
        events_of: the run's whole log, given its segments.
    """
    async with watching_stuck(client, run_id):
        return await _await_result(client, run_id, pauses=pauses, events_of=events_of)


async def _await_result(
    client: Client,
    run_id: str,
    *,
    pauses: bool,
    events_of: Callable[[list[Segment]], Awaitable[list[Event]]],
) -> RunResult:
    handle = client.get_workflow_handle(run_id)
    outcome: dict[str, Any] | None = None
    failure: str | None = None
    paused: PausedState | None = None
    finished = asyncio.ensure_future(closed(client, run_id))
    ask_first = True
    while pauses:
        pause = asyncio.ensure_future(wait_paused(handle, ask_first=ask_first))
        await asyncio.wait({finished, pause}, return_when=asyncio.FIRST_COMPLETED)
        state = pause.result() if pause.done() else None
        if state is not None and state.status == "continued_as_new" and not finished.done():
            # the next execution may pause: ask it. Not by query first: it has
            # only just begun (and a query there took ~1 s to answer, measured)
            ask_first = False
            continue
        if state is not None and state.status == "awaiting_approval":
            paused = state
            finished.cancel()
        else:
            pause.cancel()
        break
    if paused is None:
        try:
            value, whole = await finished
            outcome = value if isinstance(value, dict) else None
            if whole is not None:
                # the result carried the run's whole log: no history to read
                return result_from(run_id, whole, outcome, None)
        except WorkflowFailureError as exc:
            failure = failure_message(exc)
    segments = await TemporalStore(client).segments(run_id)
    events = await events_of(segments)
    if paused is not None:
        segments, events = await _with_pause(client, run_id, paused, segments, events, events_of)
        # the execution that paused: a pause ends no execution, so it is the latest
        execution = segments[-1].execution_run_id if segments else None
        return RunResult(
            status="awaiting_approval",
            run_id=run_id,
            events=shown_events(events),
            usage=total_usage(events),
            messages=shown_text(replay_messages(events)),
            pending_approvals=[
                PendingApproval(
                    p["call_id"], p["tool"], shown_text(p.get("args")), p.get("turn"), execution
                )
                for p in paused.pending
            ],
        )
    return result_from(run_id, events, outcome, failure)


async def _with_pause(
    client: Client,
    run_id: str,
    paused: PausedState,
    segments: list[Segment],
    events: list[Event],
    events_of: Callable[[list[Segment]], Awaitable[list[Event]]],
) -> tuple[list[Segment], list[Event]]:
    """The run's segments and log once history holds the pause's approval requests.

    Read again until then (within `PAUSE_RECORD_PATIENCE`): a result built
    before lacked the turn's events, its generation's usage among them.
    """
    asked = {(p.get("call_id"), p.get("turn")) for p in paused.pending}
    deadline = asyncio.get_running_loop().time() + PAUSE_RECORD_PATIENCE
    delay = 0.05
    while not asked <= {(e.call_id, e.turn) for e in events if e.type == "approval_request"}:
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
        segments = await TemporalStore(client).segments(run_id)
        events = await events_of(segments)
    return segments, events
