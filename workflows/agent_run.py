"""`AgentRunWorkflow` (type `AgentRun`): the agent loop as deterministic code.

The loop is Agentor's: ask the model, run the tools it asked for (each its own
activity, concurrently), feed the results back, stop at a final answer or a
budget. Every step becomes an `Event` through `_record`, and before the next
activity is scheduled the new events are journaled by a local activity, which
puts them in history (for `TemporalStore`) and mirrors them into the worker's
store. No clock, randomness or I/O here: timestamps of work are measured in
the activities and come back in their results.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, SearchAttributeKey
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ActivityError, ApplicationError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    # Plain dataclasses and pure functions with no I/O or global state, so
    # sharing the host's copies with the sandbox cannot leak nondeterminism;
    # re-importing them per workflow run would only cost time.
    from agentor_temporal.activities.types import (
        ApprovalCheckInput,
        CallToolInput,
        CallToolResult,
        DescribeAgentInput,
        GenerateInput,
        GenerateResult,
        JournalInput,
        JournalResult,
    )
    from agentor_temporal.store.base import validate_run_id
    from agentor_temporal.store.events import Event, Usage
    from agentor_temporal.store.replay import assistant_message, initial_messages, tool_message
    from agentor_temporal.workflows import policies
    from agentor_temporal.workflows.payloads import clip_to_size, encoded_size, share_budget
    from agentor_temporal.workflows.types import (
        AgentSpec,
        Decision,
        PausedState,
        RunOutcome,
        ToolSpec,
        parse_run_input,
    )

#: Search attributes set on every run when the namespace has them.
AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
AGENT_MODEL = SearchAttributeKey.for_keyword("AgentModel")

_SUMMARY_CHARS = 200

#: What `run` receives when a client starts the workflow with no argument.
_NO_INPUT = RawValue(Payload())


def call_summary(name: str, args: dict[str, Any] | None) -> str:
    """How a tool call reads in the UI: `get_weather(city='London')`."""
    inner = ", ".join(f"{k}={v!r}" for k, v in (args or {}).items())
    text = f"{name}({inner})"
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 4] + "...)"


def failure_message(exc: BaseException) -> str:
    """The innermost failure's message: what actually went wrong."""
    cause: BaseException | None = exc
    message = str(exc)
    while cause is not None:
        if isinstance(cause, FailureError) and cause.message:
            message = cause.message
        cause = cause.__cause__
    return message


class ApprovalExpired(Exception):
    """An approval timed out on a tool whose timeout fails the run."""


#: Tool results a person caused: not malfunctions, so not in the failure budget.
_DECIDED_ERRORS = ("denied", "approval expired")


@workflow.defn(name=policies.WORKFLOW_TYPE)
class AgentRunWorkflow:
    """One segment of an agent run; the workflow id is the run id."""

    @workflow.init
    def __init__(self, raw: RawValue = _NO_INPUT) -> None:
        # every recorded event is also published here, so clients can follow a
        # run live (and the worker's activities can add text deltas)
        self._stream = WorkflowStream()
        self._events_topic = self._stream.topic(policies.EVENTS_TOPIC)
        self._events: list[Event] = []
        #: local event index -> id of the generate activity holding its request
        self._refs: dict[int, str] = {}
        #: events[:_journaled] are in history
        self._journaled = 0
        #: position the store has confirmed (whole-run numbering)
        self._mirrored: int | None = None
        self._offset = 0
        self._spec: AgentSpec | None = None
        self._agent = ""
        self._status = "running"
        self._turn = 0
        self._prior = Usage()
        #: call_id -> the approval request waiting for a person
        self._awaiting: dict[str, dict[str, Any]] = {}
        #: call_id -> the decision taken (first one wins)
        self._decisions: dict[str, Decision] = {}
        #: tool activities in flight that need no approval
        self._tools_running = 0
        #: set when the run is about to close; releases waiting handlers
        self._closing = False
        # concurrent tool calls may journal at once (approval requests); one
        # journal at a time keeps every event in history exactly once
        self._journal_lock = asyncio.Lock()

    # -- queries -------------------------------------------------------------

    @workflow.query(name="events")
    def events(self, after: int = 0) -> list[dict[str, Any]]:
        """The run's events from position `after` (this segment's are held here)."""
        start = max(after - self._offset, 0)
        return [e.to_dict() for e in self._events[start:]]

    @workflow.query(name="state")
    def state(self) -> dict[str, Any]:
        """Where the run stands: status, turn, agent, model and event count."""
        return {
            "status": self._status,
            "turn": self._turn,
            "agent": self._agent,
            "model": self._spec.model if self._spec else None,
            "offset": self._offset,
            "events": self._offset + len(self._events),
        }

    def _paused(self) -> bool:
        return bool(self._awaiting) and self._tools_running == 0

    @workflow.update(name="wait_paused")
    async def wait_paused(self) -> PausedState:
        """Return once the run waits only for people (or has ended)."""
        await workflow.wait_condition(lambda: self._closing or self._paused())
        if self._paused() and not self._closing:
            return PausedState("awaiting_approval", list(self._awaiting.values()))
        return PausedState(self._status)

    @workflow.update(name="decide")
    def decide(self, decision: Decision) -> dict[str, Any]:
        """Approve or deny one waiting tool call; the first decision wins."""
        # checked again here: two updates in one workflow task both pass the
        # validator before either handler runs
        self._check_decision(decision)
        self._decisions[decision.call_id] = decision
        request = self._awaiting[decision.call_id]
        return {**request, "approved": decision.approved}

    @decide.validator
    def _validate_decision(self, decision: Decision) -> None:
        self._check_decision(decision)

    def _check_decision(self, decision: Decision) -> None:
        run_id = workflow.info().workflow_id
        taken = self._decisions.get(decision.call_id)
        if taken is not None:
            verdict = "approved" if taken.approved else "denied"
            raise ApplicationError(
                f"Call {decision.call_id!r} of run {run_id!r} was already {verdict}"
                f"{' by ' + taken.by if taken.by else ''}; the decision stands.",
                type="AlreadyDecided",
            )
        if decision.call_id not in self._awaiting:
            waiting = ", ".join(sorted(self._awaiting)) or "none"
            raise ApplicationError(
                f"Run {run_id!r} has no tool call {decision.call_id!r} waiting for approval "
                f"(waiting: {waiting}).",
                type="UnknownCall",
            )

    # -- the loop --------------------------------------------------------------

    @workflow.run
    async def run(self, raw: RawValue = _NO_INPUT) -> dict[str, Any]:
        """Run the agent loop to a final answer, a budget, or a failure."""
        try:
            # decoded here rather than by the SDK: input that is not JSON (or
            # no input at all) would otherwise fail the workflow *task*
            # ("Failed decoding arguments"), which Temporal retries forever
            value = (
                None if raw is _NO_INPUT else workflow.payload_converter().from_payload(raw.payload)
            )
            inp = parse_run_input(value)
        except Exception as exc:
            root: BaseException = exc
            while root.__cause__ is not None:
                root = root.__cause__  # a decoding error names the JSON problem last
            detail = str(exc) if root is exc else f"{exc} ({root})"
            raise ApplicationError(
                f"Invalid AgentRun input: {detail}", type="InvalidInput", non_retryable=True
            ) from None
        try:
            validate_run_id(workflow.info().workflow_id)
        except ValueError as exc:
            # the run id is a file name in every store and what resume() takes;
            # an id the facade refuses would give a run nothing can mirror or
            # resume. Patched: runs started before this check carry on as before.
            if workflow.patched(policies.PATCH_REFUSE_INVALID_RUN_ID):
                raise ApplicationError(str(exc), type="InvalidRunId", non_retryable=True) from None
        self._agent, self._offset = inp.agent, inp.event_offset
        self._prior = Usage.from_dict(inp.prior_usage)
        spec = self._spec = await self._describe(inp.agent)
        if spec.search_attributes:
            workflow.upsert_search_attributes(
                [AGENT_NAME.value_set(spec.name), AGENT_MODEL.value_set(spec.model)]
            )
        run_started = workflow.now().timestamp()
        messages = initial_messages(spec.instructions, inp.input)
        self._record(
            Event(
                type="run_start",
                agent=spec.name,
                model=spec.model,
                messages=copy.deepcopy(messages),
                started_at=run_started,
            )
        )
        budget = inp.max_turns or spec.max_turns
        failures: dict[str, int] = {}
        disabled: list[str] = []
        total = Usage()

        for turn in range(1, budget + 1):
            self._turn = turn
            request = copy.deepcopy(messages)
            schemas = [t.openai_schema() for t in spec.tools if t.name not in disabled]
            self._details(
                f"Turn {turn} of {budget}: asking {spec.model} · "
                f"{(self._prior + total).total_tokens} tokens so far"
            )
            await self._journal()
            oversized = self._oversized(request, schemas)
            if oversized is not None:
                return await self._end("failed", total, run_started, turn=turn, error=oversized)
            activity_id = f"generate-{turn}"
            try:
                gen = await workflow.execute_activity(
                    policies.GENERATE,
                    GenerateInput(
                        run_id=workflow.info().workflow_id,
                        agent=spec.name,
                        model=spec.model,
                        messages=request,
                        tools=schemas or None,
                        model_settings=spec.model_settings,
                        turn=turn,
                        stream_text=inp.stream_text,
                    ),
                    result_type=GenerateResult,
                    start_to_close_timeout=policies.MODEL_START_TO_CLOSE,
                    heartbeat_timeout=policies.MODEL_HEARTBEAT_TIMEOUT,
                    retry_policy=policies.MODEL_RETRY_POLICY,
                    activity_id=activity_id,
                    summary=f"{spec.model}, turn {turn}",
                )
            except ActivityError as exc:
                error = failure_message(exc)
                return await self._end("failed", total, run_started, turn=turn, error=error)

            usage = Usage.from_dict(gen.usage)
            total = total + usage
            messages.append(assistant_message(gen.text, gen.calls))
            self._record(
                Event(
                    type="generation",
                    turn=turn,
                    model=spec.model,
                    messages=request,
                    text=gen.text,
                    reasoning=gen.reasoning,
                    calls=copy.deepcopy(gen.calls) or None,
                    usage=usage,
                    started_at=gen.started_at,
                    ended_at=gen.ended_at,
                ),
                ref=activity_id,
            )

            if not gen.calls:
                text = gen.text or ""
                self._record(Event(type="message", text=text, turn=turn, usage=usage))
                return await self._end("completed", total, run_started, turn=turn, text=text)

            for call in gen.calls:
                function = call.get("function") or {}
                try:
                    preview = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    preview = None
                self._record(
                    Event(
                        type="tool_call",
                        name=function.get("name"),
                        args=preview if isinstance(preview, dict) else None,
                        call_id=call.get("id"),
                        turn=turn,
                    )
                )
            self._details(
                f"Turn {turn} of {budget}: running "
                + ", ".join(
                    call_summary(str(e.name), e.args) for e in self._events[-len(gen.calls) :]
                )
                + f" · {(self._prior + total).total_tokens} tokens so far"
            )
            await self._journal()
            try:
                results = await asyncio.gather(
                    *(
                        self._run_tool(spec, call, turn, index, disabled)
                        for index, call in enumerate(gen.calls)
                    )
                )
            except ApprovalExpired as exc:
                return await self._end("failed", total, run_started, turn=turn, error=str(exc))

            self._fit_turn(results)
            newly_disabled: list[str] = []
            for event in results:
                event.turn = turn
                self._record(event)
                messages.append(tool_message(event))
                # an unknown name counts too: a model inventing one would
                # otherwise burn every turn, the failure this budget stops
                if (
                    event.error is None
                    or event.error in _DECIDED_ERRORS
                    or event.name is None
                    or event.name in disabled
                ):
                    continue
                failures[event.name] = failures.get(event.name, 0) + 1
                if failures[event.name] >= spec.max_tool_failures:
                    disabled.append(event.name)
                    newly_disabled.append(event.name)
            # after every result of the turn: a notice between tool messages
            # would split the answers to one assistant turn, which providers
            # reject; and none on the last turn, where no model reads it
            if turn < budget:
                for name in newly_disabled:
                    count = failures[name]
                    messages.append(
                        {
                            "role": "user",
                            "content": (
                                f"The tool '{name}' failed {count} "
                                f"time{'s' if count != 1 else ''} and is now unavailable. "
                                "Answer without it, or explain what you cannot do."
                            ),
                        }
                    )

        error = f"Reached max_turns ({budget}) without a final answer."
        # no turn on this run_end, as Agentor writes it
        return await self._end("max_turns", total, run_started, error=error)

    # -- steps -------------------------------------------------------------------

    async def _describe(self, agent: str) -> AgentSpec:
        try:
            spec: AgentSpec = await workflow.execute_local_activity(
                policies.DESCRIBE_AGENT,
                DescribeAgentInput(agent=agent),
                result_type=AgentSpec,
                start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
                retry_policy=policies.LOCAL_RETRY_POLICY,
                summary=f"describe {agent}",
            )
        except (ActivityError, ApplicationError, TemporalTimeoutError) as exc:
            # a local activity's failure arrives unwrapped (its own
            # ApplicationError naming the known agents), not as ActivityError
            await self._release_handlers()
            # the workflow fails (not its task, which would retry forever)
            raise ApplicationError(
                failure_message(exc), type="UnknownAgent", non_retryable=True
            ) from None
        return spec

    async def _run_tool(
        self, spec: AgentSpec, call: dict[str, Any], turn: int, index: int, disabled: list[str]
    ) -> Event:
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        call_id = call.get("id")
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError as exc:
            return Event(
                type="tool_result",
                name=name,
                call_id=call_id,
                error=f"Invalid JSON arguments: {exc}",
                result=f"Error: arguments were not valid JSON ({exc}).",
            )
        if not isinstance(args, dict):
            return Event(
                type="tool_result",
                name=name,
                call_id=call_id,
                error="Invalid arguments: not a JSON object",
                result="Error: arguments must be a JSON object.",
            )
        if name in disabled:
            # withdrawing the schema is not enough: a model can still call it
            return Event(
                type="tool_result",
                name=name,
                args=args,
                call_id=call_id,
                error="tool disabled",
                result=f"Error: tool {name!r} is disabled after repeated failures.",
            )
        tool: ToolSpec | None = spec.tool(name)
        if tool is None:
            known = ", ".join(sorted(t.name for t in spec.tools)) or "none"
            return Event(
                type="tool_result",
                name=name,
                args=args,
                call_id=call_id,
                error="unknown tool",
                result=f"Error: unknown tool {name!r}. Available tools: {known}.",
            )
        if tool.approval != "never":
            answered = await self._approval(spec, tool, name, args, str(call_id), turn)
            if answered is not None:
                return answered
        self._tools_running += 1
        try:
            res = await workflow.execute_activity(
                policies.CALL_TOOL,
                CallToolInput(
                    run_id=workflow.info().workflow_id,
                    agent=spec.name,
                    call_id=str(call_id),
                    name=name,
                    args=args,
                    turn=turn,
                ),
                result_type=CallToolResult,
                start_to_close_timeout=(
                    timedelta(seconds=tool.timeout)
                    if tool.timeout
                    else policies.TOOL_START_TO_CLOSE
                ),
                heartbeat_timeout=policies.TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=policies.TOOL_RETRY_POLICY,
                activity_id=f"tool-{turn}-{index}",
                summary=call_summary(name, args),
            )
        except ActivityError as exc:
            # retries exhausted (timeouts, lost workers): the model hears it
            self._tools_running -= 1
            error = f"Tool call failed: {failure_message(exc)}"
            return Event(
                type="tool_result",
                name=name,
                args=args,
                call_id=call_id,
                error=error,
                result=f"Error: {error}",
            )
        self._tools_running -= 1
        return Event(
            type="tool_result",
            name=name,
            args=args,
            result=res.result,
            error=res.error,
            call_id=call_id,
            started_at=res.started_at,
            ended_at=res.ended_at,
        )

    async def _approval(
        self,
        spec: AgentSpec,
        tool: ToolSpec,
        name: str,
        args: dict[str, Any],
        call_id: str,
        turn: int,
    ) -> Event | None:
        """Wait durably for a person; None means approved (run the tool).

        Returns the `tool_result` that answers the model when the call is
        denied or its approval expired (on_approval_timeout="deny").

        Raises:
            ApprovalExpired: when the approval expired and the tool says "fail".
        """
        if tool.approval == "predicate":
            try:
                needed = await workflow.execute_local_activity(
                    policies.NEEDS_APPROVAL,
                    ApprovalCheckInput(agent=spec.name, name=name, args=args),
                    result_type=bool,
                    start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
                    retry_policy=policies.LOCAL_RETRY_POLICY,
                    summary=f"needs approval? {call_summary(name, args)}",
                )
            except (ActivityError, ApplicationError, TemporalTimeoutError):
                # local activity failures arrive unwrapped; a predicate that
                # cannot decide asks a person
                needed = True
            if not needed:
                return None
        requested = workflow.now().timestamp()
        self._record(
            Event(
                type="approval_request",
                name=name,
                args=args,
                call_id=call_id,
                turn=turn,
                started_at=requested,
            )
        )
        self._awaiting[call_id] = {"call_id": call_id, "tool": name, "args": args, "turn": turn}
        self._details(self._waiting_details())
        await self._journal()
        timeout = timedelta(seconds=tool.approval_timeout) if tool.approval_timeout else None
        try:
            await workflow.wait_condition(lambda: call_id in self._decisions, timeout=timeout)
            decision: Decision | None = self._decisions[call_id]
        except asyncio.TimeoutError:
            decision = None
        del self._awaiting[call_id]
        self._details(self._waiting_details() if self._awaiting else f"Turn {turn}: running tools")
        decided = workflow.now().timestamp()
        if decision is None:
            assert tool.approval_timeout is not None
            message = f"no decision within {tool.approval_timeout:g} s"
            # a decision arriving now is refused: the timeout already decided
            self._decisions[call_id] = Decision(call_id, False, message, "timeout")
            self._record(
                Event(
                    type="approval_decision",
                    name=name,
                    args=args,
                    call_id=call_id,
                    turn=turn,
                    status="expired",
                    text=message,
                    started_at=requested,
                    ended_at=decided,
                )
            )
            if tool.on_approval_timeout == "fail":
                raise ApprovalExpired(f"Approval of {call_summary(name, args)} expired: {message}")
            return Event(
                type="tool_result",
                name=name,
                args=args,
                call_id=call_id,
                error="approval expired",
                result=f"Error: the call was not approved ({message}).",
            )
        self._record(
            Event(
                type="approval_decision",
                name=name,
                args=args,
                call_id=call_id,
                turn=turn,
                status="approved" if decision.approved else "denied",
                text=decision.reason,
                result=decision.by,
                started_at=requested,
                ended_at=decided,
            )
        )
        if decision.approved:
            return None
        who = f" ({decision.by})" if decision.by else ""
        why = f": {decision.reason}" if decision.reason else ""
        return Event(
            type="tool_result",
            name=name,
            args=args,
            call_id=call_id,
            error="denied",
            result=f"Error: a person denied this call{who}{why}. Do not call it again "
            "for the same purpose; answer without it or explain what you cannot do.",
        )

    def _waiting_details(self) -> str:
        waiting = "; ".join(
            f"{call_summary(r['tool'], r['args'])} [{r['call_id']}]"
            for r in self._awaiting.values()
        )
        return f"**Waiting for approval:** {waiting}"

    def _oversized(
        self, request: list[dict[str, Any]], schemas: list[dict[str, Any]]
    ) -> str | None:
        """Why a request cannot be scheduled (too big for one payload), or None.

        Scheduling it would wedge the run: Temporal refuses the payload and
        retries the workflow task forever. Ending the run says why instead.
        """
        size = encoded_size(request) + encoded_size(schemas)
        if size <= policies.MAX_REQUEST_BYTES or not workflow.patched(
            policies.PATCH_REQUEST_SIZE_LIMIT
        ):
            return None
        return (
            f"The conversation has grown to {size / 1e6:.1f} MB, over the 2 MB Temporal "
            f"accepts in one payload (runs stop at {policies.MAX_REQUEST_BYTES / 1e6:.1f} MB). "
            "Have tools return less, or start a new run from a summary."
        )

    def _fit_turn(self, results: list[Event]) -> None:
        """Cut a turn's results so that together they fit one payload.

        Each is already under MAX_TOOL_RESULT_BYTES, but many parallel calls
        would still make the journal step (and the next request) too large
        to record, which wedges the run in workflow-task retries.
        """
        sizes = [encoded_size(e.result) for e in results]
        if sum(sizes) <= policies.MAX_TURN_RESULT_BYTES or not workflow.patched(
            policies.PATCH_TURN_RESULT_BUDGET
        ):
            return
        for event, limit in zip(
            results, share_budget(sizes, policies.MAX_TURN_RESULT_BYTES), strict=True
        ):
            if limit is not None and event.result is not None:
                event.result = clip_to_size(event.result, limit)

    # -- recording -----------------------------------------------------------------

    def _record(self, event: Event, *, ref: str | None = None) -> None:
        if ref is not None:
            self._refs[len(self._events)] = ref
        self._events_topic.publish(
            {
                "index": self._offset + len(self._events),
                "event": event.to_dict(),
                "published_at": workflow.now().timestamp(),
            }
        )
        self._events.append(event)

    def _details(self, text: str) -> None:
        workflow.set_current_details(text)

    async def _journal(self, *, strict: bool = False) -> None:
        """Put new events in history and mirror unconfirmed ones into the store."""
        async with self._journal_lock:
            await self._journal_locked(strict)

    async def _journal_locked(self, strict: bool) -> None:
        spec = self._spec
        assert spec is not None
        total = len(self._events)
        confirmed = (self._mirrored if self._mirrored is not None else self._offset) - self._offset
        behind = spec.mirror and confirmed < total
        if self._journaled == total and not (strict and behind):
            return
        first = min(self._journaled, max(confirmed, 0)) if spec.mirror else self._journaled
        inp = JournalInput(
            run_id=workflow.info().workflow_id,
            agent=spec.name,
            mirror=spec.mirror,
            start=self._offset + first,
            events=[e.to_dict() for e in self._events[first:]],
            new_from=self._offset + self._journaled,
            refs={
                str(self._offset + i): ref for i, ref in self._refs.items() if i >= self._journaled
            },
            strict=strict,
        )
        try:
            res: JournalResult = await workflow.execute_local_activity(
                policies.JOURNAL,
                inp,
                result_type=JournalResult,
                start_to_close_timeout=policies.LOCAL_START_TO_CLOSE,
                retry_policy=(
                    policies.FINAL_MIRROR_RETRY_POLICY if strict else policies.LOCAL_RETRY_POLICY
                ),
                summary=f"journal {total - self._journaled} events",
            )
        except (ActivityError, ApplicationError, TemporalTimeoutError) as exc:
            # a local activity's failure arrives unwrapped (the activity's own
            # ApplicationError, or a TimeoutError), not as ActivityError; letting
            # it through failed the whole run over a broken mirror. No open
            # history diverges: before, this path closed the workflow at once.
            workflow.logger.warning(
                "Journaling run %s failed: %s", workflow.info().workflow_id, failure_message(exc)
            )
            return
        self._journaled = total
        if res.error is None and res.mirrored is not None:
            self._mirrored = res.mirrored

    async def _release_handlers(self) -> None:
        """Let followers' polls and pause-waiters return before the run closes."""
        self._closing = True
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _end(
        self,
        status: str,
        usage: Usage,
        run_started: float,
        *,
        turn: int | None = None,
        text: str | None = None,
        error: str | None = None,
    ) -> dict[str, Any]:
        """Record the segment's `run_end`, then close the run with its outcome."""
        self._record(
            Event(
                type="run_end",
                text=text,
                status=status,
                error=error,
                turn=turn,
                usage=usage,
                started_at=run_started,
                ended_at=workflow.now().timestamp(),
            )
        )
        return await self._finish(status, text, usage, error)

    async def _finish(
        self, status: str, final_output: str | None, usage: Usage, error: str | None
    ) -> dict[str, Any]:
        self._status = status
        self._details(
            f"Finished: {status} after {self._turn} turn{'s' if self._turn != 1 else ''} · "
            f"{(self._prior + usage).total_tokens} tokens"
        )
        await self._journal()
        await self._release_handlers()
        spec = self._spec
        assert spec is not None
        confirmed = (self._mirrored if self._mirrored is not None else self._offset) - self._offset
        if spec.mirror and confirmed < len(self._events):
            await self._journal(strict=True)
            confirmed = (
                self._mirrored if self._mirrored is not None else self._offset
            ) - self._offset
            if confirmed < len(self._events):
                workflow.logger.warning(
                    "The store mirror of run %s is missing its last %d events; Temporal has "
                    "them all (`agentor-temporal export` or `resume` with the store catches up)",
                    workflow.info().workflow_id,
                    len(self._events) - confirmed,
                )
        return RunOutcome(
            run_id=workflow.info().workflow_id,
            status=status,
            final_output=final_output,
            usage=asdict(self._prior + usage),
            error=error,
        ).to_dict()
