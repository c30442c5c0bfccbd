"""Agents called from your own workflows: `await run_agent("Weather Agent", prompt)`.

    from agentor_temporal.workflow import run_agent

    @workflow.defn
    class OrderWorkflow:
        @workflow.run
        async def run(self, order: Order) -> str:
            outcome = await run_agent("Support Agent", f"Is order {order.id} refundable?")
            ...

The agent run is a child `AgentRun` workflow whose id is its run id, so it is
an ordinary run everywhere else: `agent.resume(run_id)`, `agent.stream`, the
CLI, the JSONL mirror and the Temporal UI all see it, and approvals of its
tool calls are given on that run id. The worker serving the child needs the
agent registered (`AgentorPlugin(agents=[...])`); by default the child runs on
the parent's task queue.

Cancellation and parent close:
- cancelling the parent cancels its agent run, waits for it to close, and
  `run_agent` raises `asyncio.CancelledError`, so the parent is cancelled too;
- if the parent closes while the agent still runs (terminated, timed out),
  the agent run is asked to cancel (`ParentClosePolicy.REQUEST_CANCEL`); pass
  `parent_close_policy=ParentClosePolicy.ABANDON` to let it finish instead;
- cancelling only the agent run gives the parent a "failed" outcome saying so.
A cancelled agent run records `run_end` (status "failed", saying it was
cancelled), closes as cancelled, and `resume(run_id)` continues it later.

Runs inside the workflow sandbox: deterministic, no I/O; this module is
passed through the sandbox by `AgentorPlugin`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from agentor_temporal.store.base import validate_run_id
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.activity_types import RunOutcomeInput
from agentor_temporal.workflows.formatting import failure_message, preview_input
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.policies import (
    MAX_REQUEST_BYTES,
    RUN_OUTCOME,
    RUN_OUTCOME_RETRY_POLICY,
    RUN_OUTCOME_TIMEOUT,
    WORKFLOW_TASK_TIMEOUT,
    WORKFLOW_TYPE,
    validate_task_queue,
)
from agentor_temporal.workflows.types import AgentRunInput, RunOutcome, parse_run_input

__all__ = ["ParentClosePolicy", "RunOutcome", "run_agent"]

#: The patch under which `run_agent` refuses an input too large to start a child with.
PATCH_INPUT_SIZE = "agentor-run-agent-input-size"
#: The patch under which `run_agent` attaches to a run its `run_id` names that ran
#: before, instead of starting the agent again under that id.
PATCH_ATTACH = "agentor-run-agent-attach"
#: The patch under which `run_agent`'s default run id is drawn from the execution
#: as it was started (kept by a reset), not from its random source (reseeded by one).
PATCH_STABLE_ID = "agentor-run-agent-stable-id"
#: The patch under which `run_agent` holds a run back while this execution has
#: `policies.MAX_PENDING_AGENT_RUNS` pending (asked only when it has).
PATCH_PENDING_CAP = "agentor-run-agent-pending-cap"
#: The patch under which `run_agent` starts a run in the next workflow task when
#: this one's starts carry `policies.RUN_AGENT_TASK_BYTES` (asked only then).
PATCH_TASK_BYTES = "agentor-run-agent-task-bytes"
#: The patch under which `run_agent` refuses a run whose start would take this
#: execution's history past `RUN_AGENT_HISTORY_BYTES` or `RUN_AGENT_HISTORY_EVENTS`.
PATCH_HISTORY_ROOM = "agentor-run-agent-history-room"
#: The history bytes past which `run_agent` starts no run in an execution (a
#: "failed" outcome saying so instead). Each start's input is in the caller's
#: history, and Temporal terminates a workflow whose history passes 50 MB
#: (`limit.historySize.error`), cancelling every agent run it has pending:
#: forty runs of 1.3 MB prompts gathered side by side ended so. The margin
#: leaves room for the outcomes of the runs pending and the caller's own events.
RUN_AGENT_HISTORY_BYTES = 40_000_000
#: The same for history events (Temporal's limit: 51,200, `limit.historyCount.error`).
RUN_AGENT_HISTORY_EVENTS = 40_000
#: The patch under which a `run_agent` call waits while the outcomes of the runs
#: pending, at `RUN_AGENT_OUTCOME_BYTES` each, could take the history past
#: `RUN_AGENT_HISTORY_BYTES`, and the history's size counts what the runs added
#: (`_Pending.held`); asked at an execution's first `run_agent` call.
PATCH_OUTCOME_ROOM = "agentor-run-agent-outcome-room"
#: What one run's outcome may add to its caller's history: its final answer (at
#: most `policies.MAX_REPLY_BYTES` as Temporal encodes it), its error and usage.
#: Every pending run's outcome lands there: eight runs gathered with short prompts
#: and 300 kB answers took a history with a 2 MB limit past it, and Temporal
#: terminated the caller. So runs are started while the outcomes of those pending
#: fit, about 69 at once in a fresh history (a further call waits for one to end).
RUN_AGENT_OUTCOME_BYTES = policies.MAX_REPLY_BYTES + 64_000
#: History events one run adds to its caller at most (its start, started, outcome,
#: and the workflow task its outcome wakes).
_EVENTS_PER_RUN = 6
#: History bytes one run adds to its caller besides its input and its outcome (the
#: events around them, and the workflow task its outcome wakes).
_RUN_EVENT_BYTES = 2_000
#: Names the default run ids (`_stable_id`).
_CHILD_IDS = uuid.UUID("3e9a7c15-2b64-4f0d-8a1e-9c5d7b3f6e20")
#: The attribute on the workflow instance counting its `run_agent` calls with a default id.
_CALLS = "_agentor_run_agent_calls"
#: The same count for a workflow class whose instances take no new attribute:
#: by execution, with the instance it counts for (a replay makes a new one).
_SLOTTED: dict[str, tuple[int, int]] = {}
#: The attribute on the workflow instance holding its `_Pending` count.
_PENDING = "_agentor_run_agent_pending"
#: The same for a workflow class whose instances take no new attribute (as `_SLOTTED`).
_SLOTTED_PENDING: dict[str, tuple[int, _Pending]] = {}


class _Pending:
    """This execution's `run_agent` runs started and not yet ended, and its task's starts."""

    def __init__(self) -> None:
        self.count = 0
        #: (history length naming the workflow task, input bytes started in it, runs started)
        self.task: tuple[int, int, int] = (-1, 0, 0)
        #: The history's size as the server gave it when this count was made, and the
        #: bytes this execution's runs have added to it since (inputs, outcomes as
        #: received, their events): the size the server gives each workflow task
        #: leaves out events that came while the task before it ran (three 300 kB
        #: outcomes landing together: 904 kB held, 304 kB said), so it alone let runs
        #: start past the limit. Kept only where `PATCH_OUTCOME_ROOM` marks the history.
        self.counted = _counts_outcomes()
        self.base = workflow.info().get_current_history_size()
        self.added = 0

    def held(self) -> int:
        """The history's size as best known: what the server said at this workflow task,
        with the runs started in it, or what this execution's runs have added, if more."""
        said = workflow.info().get_current_history_size() + self.started()
        return max(said, self.base + self.added) if self.counted else said

    def ended(self, outcome: Any) -> None:
        """Count a run's end: its outcome (a result, or the failure it ended with) is held."""
        self.count -= 1
        if self.counted:
            self.added += encoded_size(outcome) + _RUN_EVENT_BYTES

    def started(self) -> int:
        """Input bytes of the runs started in the current workflow task."""
        task, size, _ = self.task
        return size if task == workflow.info().get_current_history_length() else 0

    def runs(self) -> int:
        """The runs started in the current workflow task."""
        task, _, runs = self.task
        return runs if task == workflow.info().get_current_history_length() else 0


def _counts_outcomes() -> bool:
    """Whether this execution keeps room for its runs' outcomes (`PATCH_OUTCOME_ROOM`)."""
    return workflow.patched(PATCH_OUTCOME_ROOM)


def _pending() -> _Pending:
    """The execution's count, kept on its workflow instance (made again on a replay)."""
    instance = workflow.instance()
    found = getattr(instance, _PENDING, None)
    if isinstance(found, _Pending):
        return found
    made = _Pending()
    try:
        setattr(instance, _PENDING, made)
    except (AttributeError, TypeError):  # a class with __slots__: kept by execution
        run_id = workflow.info().run_id
        held = _SLOTTED_PENDING.get(run_id)
        if held is not None and held[0] == id(instance):
            return held[1]
        _SLOTTED_PENDING[run_id] = (id(instance), made)
    return made


async def _slot(pending: _Pending, size: int) -> str | None:
    """Wait until the run may start, then count it: `size` is its start's input bytes.

    Returns why the run must not start at all (not counted then): its start
    would take this execution's history past `RUN_AGENT_HISTORY_BYTES` or
    `RUN_AGENT_HISTORY_EVENTS` (`_no_room`).

    Temporal refuses a workflow task whose commands would leave more child
    executions pending than its limit (2,000 by default), and gRPC one whose
    completion passes 4 MB (three runs of 1.3 MB inputs started side by
    side): every command of it, on every retry, so the parent started none of
    its runs, for good. So a run waits while `MAX_PENDING_AGENT_RUNS` are
    pending, and for the next workflow task (a short timer) when this one's
    starts already carry `RUN_AGENT_TASK_BYTES`, and for one to end while the
    outcomes of those pending could take the history past `RUN_AGENT_HISTORY_BYTES`
    (`RUN_AGENT_OUTCOME_BYTES` each: Temporal would terminate the caller as they
    landed, cancelling its runs). No command is issued unless
    a limit is met; then a patch marks the history (one recorded before
    started them all at once).
    """
    while True:
        if pending.count >= policies.MAX_PENDING_AGENT_RUNS:
            if workflow.patched(PATCH_PENDING_CAP):
                await workflow.wait_condition(
                    lambda: pending.count < policies.MAX_PENDING_AGENT_RUNS
                )
                continue
        started = pending.started()
        if started and started + size > policies.RUN_AGENT_TASK_BYTES:
            if workflow.patched(PATCH_TASK_BYTES):
                await workflow.sleep(policies.JOURNAL_STEP_PAUSE, summary="next task")
                continue
        if pending.counted and _outcomes_short(pending, size):
            await workflow.wait_condition(_fewer_than(pending, pending.count))
            continue
        break
    refused = _no_room(pending, size)
    if refused is not None and workflow.patched(PATCH_HISTORY_ROOM):
        return refused
    pending.count += 1
    if pending.counted:
        pending.added += size + _RUN_EVENT_BYTES
    pending.task = (
        workflow.info().get_current_history_length(),
        pending.started() + size,
        pending.runs() + 1,
    )
    return None


def _fewer_than(pending: _Pending, count: int) -> Callable[[], bool]:
    """A condition: fewer than `count` runs pending (one has ended since)."""
    return lambda: pending.count < count


def _outcomes_short(pending: _Pending, size: int) -> bool:
    """Whether the outcomes of the runs pending (each one's largest) and a start of `size`
    could take this history past `RUN_AGENT_HISTORY_BYTES`; never with none pending."""
    if not pending.count:
        return False
    return pending.held() + size + pending.count * RUN_AGENT_OUTCOME_BYTES > (
        RUN_AGENT_HISTORY_BYTES
    )


def _no_room(pending: _Pending, size: int) -> str | None:
    """Why a start of `size` input bytes would take this history too near Temporal's limits.

    The history's size and length are as of this workflow task; the runs this
    task already started are not in them yet, so they are added.
    """
    info = workflow.info()
    held = pending.held()
    events = info.get_current_history_length() + _EVENTS_PER_RUN * pending.runs()
    if held + size <= RUN_AGENT_HISTORY_BYTES and events + _EVENTS_PER_RUN <= (
        RUN_AGENT_HISTORY_EVENTS
    ):
        return None
    return (
        f"The agent run was not started: this workflow's history holds {held / 1e6:.1f} MB "
        f"in {events} events, and the run's start ({size / 1e6:.2f} MB of input, which "
        "Temporal keeps in this history) would take it past "
        f"{RUN_AGENT_HISTORY_BYTES / 1e6:g} MB or {RUN_AGENT_HISTORY_EVENTS} events, too near "
        "Temporal's limits (50 MB, 51,200 events), past which Temporal terminates this "
        "workflow and cancels every agent run it has pending. Continue your workflow as new "
        "(workflow.continue_as_new) and run it there; pass large inputs by reference (a file "
        "name, a URL a tool reads)."
    )


async def run_agent(
    agent: str,
    input: str | list[dict[str, Any]],
    *,
    run_id: str | None = None,
    max_turns: int | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.REQUEST_CANCEL,
    execution_timeout: timedelta | None = None,
) -> RunOutcome:
    """Run an agent as a child workflow and return how it ended.

    Call it from workflow code only.

    Args:
        agent: the registered agent's name (`Agentor(name=...)`).
        input: a prompt, or a list of chat messages.
        run_id: the child's run id (= workflow id); default an id of this
            call in this execution, the same in an execution reset from it
            (which attaches to the run, as for a `run_id` that ran before).
        max_turns: override the agent's turn budget for this run.
        task_queue: where the agent's worker polls; default the parent's.
        parent_close_policy: what happens to the agent run if the parent
            closes first (see the module docstring).
        execution_timeout: optional limit on the agent run's whole duration. The
            run stops itself shortly before it (`policies.DEADLINE_MARGIN`),
            recording what its turn's calls did, and comes back "failed"
            saying it reached its time limit; `resume(run_id)` goes on from there.

    Returns:
        The `RunOutcome`: `run_id`, `status` ("completed", "max_turns" or
        "failed"), `final_output`, `usage`, `error`. A run that the workflow
        itself refused (unknown agent, invalid input) or that was terminated
        comes back as status "failed" with the reason in `error`.

    Raises:
        ValueError: for an invalid run id, input (or one over 1.5 MB encoded),
            max_turns, task_queue or execution_timeout (before anything starts).
        asyncio.CancelledError: when the calling workflow is cancelled.
    """
    # a default id the same in an execution reset from this one (it re-runs the
    # workflow code that asked): the reset attaches to the run its base started,
    # live or finished, instead of paying for the agent again under a fresh id;
    # the patch leaves a parent recorded before with the id it drew
    stable = run_id is None and workflow.patched(PATCH_STABLE_ID)
    if run_id is not None:
        child_id = validate_run_id(run_id)
    else:
        child_id = _stable_id() if stable else workflow.uuid4().hex
    inp = parse_run_input(AgentRunInput(agent=agent, input=input, max_turns=max_turns).to_dict())
    size = encoded_size(inp.input)
    # over Temporal's 2 MB the child's start is refused in every task of this workflow, for
    # ever; the patch leaves a parent that started such a child (a compressing codec) as it was
    if size > MAX_REQUEST_BYTES and workflow.patched(PATCH_INPUT_SIZE):
        raise ValueError(
            f"The agent's input is too large: {size / 1e6:.2f} MB as Temporal encodes it, over "
            f"the {MAX_REQUEST_BYTES / 1e6:.1f} MB limit of one request (Temporal accepts at "
            "most 2 MB in one payload). Send less, or pass a reference (a file name, a URL) "
            "and let a tool read it."
        )
    if task_queue is not None:
        # the server refuses a child's start on some names in every task of this
        # workflow; on others (blank) the child waits for ever for a worker
        validate_task_queue(task_queue)
    if execution_timeout is not None and (
        not isinstance(execution_timeout, timedelta) or execution_timeout < timedelta(0)
    ):
        # the server refuses the child's start, failing this workflow's task again
        # on every retry ("BadStartChildExecutionAttributes: negative duration")
        given = (
            f"{execution_timeout.total_seconds():g} s"
            if isinstance(execution_timeout, timedelta)
            else f"{type(execution_timeout).__name__} {execution_timeout!r}"
        )
        raise ValueError(
            "execution_timeout must be a timedelta of zero or more (zero or None: no limit), "
            f"got {given}"
        )
    # an id that ran before (this workflow started again, a redelivered message) is
    # that run, as in `Agentor.run`: the SDK's default would start the agent again,
    # paying for it twice; the patch leaves a parent recorded before as it was
    attach = stable or (run_id is not None and workflow.patched(PATCH_ATTACH))
    pending = _pending()
    refused = await _slot(pending, encoded_size(inp.to_dict()))
    if refused is not None:
        return RunOutcome(run_id=child_id, status="failed", final_output=None, error=refused)
    outcome_held: Any = None  # what the run's end put in this history, as far as known
    try:
        result = await workflow.execute_child_workflow(
            WORKFLOW_TYPE,
            inp.to_dict(),
            id=child_id,
            task_queue=task_queue,
            parent_close_policy=parent_close_policy,
            execution_timeout=execution_timeout,
            task_timeout=WORKFLOW_TASK_TIMEOUT,
            static_summary=f"{agent}: {preview_input(inp.input)}",
            result_type=dict,
            id_reuse_policy=(
                WorkflowIDReusePolicy.REJECT_DUPLICATE
                if attach
                else WorkflowIDReusePolicy.ALLOW_DUPLICATE
            ),
        )
        outcome_held = result
    except WorkflowAlreadyStartedError:
        if not attach:
            raise
        outcome: RunOutcome = await workflow.execute_activity(
            RUN_OUTCOME,
            RunOutcomeInput(child_id, agent),
            result_type=RunOutcome,
            task_queue=task_queue,
            start_to_close_timeout=RUN_OUTCOME_TIMEOUT,
            retry_policy=RUN_OUTCOME_RETRY_POLICY,
            summary=f"outcome of {child_id} (started before)",
        )
        outcome_held = outcome.to_dict()
        return outcome
    except ChildWorkflowError as exc:
        if isinstance(exc.cause, CancelledError) and _cancel_requested():
            # this workflow is being cancelled: its agent run was cancelled
            # with it, and the cancellation goes on up
            raise asyncio.CancelledError(failure_message(exc)) from None
        error = failure_message(exc)
        outcome_held = error
        if isinstance(exc.cause, CancelledError):
            error = f"The agent run {child_id!r} was cancelled; resume(run_id) continues it."
        return RunOutcome(run_id=child_id, status="failed", final_output=None, error=error)
    finally:
        pending.ended(outcome_held)
    return RunOutcome.from_dict(result)


def _stable_id() -> str:
    """The next default run id of this execution, the same in any execution reset from it.

    A reset execution begins with a copy of its base's started event, so the
    chain's first execution and the one this continues from are the base's;
    the count of calls is the workflow code's own (kept on its instance, made
    again on a replay). An execution continued as new, or retried, has ids of its own.
    """
    info = workflow.info()
    instance = workflow.instance()
    try:
        count: int = getattr(instance, _CALLS, 0) + 1
        setattr(instance, _CALLS, count)
    except (AttributeError, TypeError):  # a class with __slots__: counted by execution
        held, before = _SLOTTED.get(info.run_id, (id(instance), 0))
        count = (before if held == id(instance) else 0) + 1
        _SLOTTED[info.run_id] = (id(instance), count)
    origin = f"{info.workflow_id}\n{info.first_execution_run_id}\n{info.continued_run_id or ''}"
    return uuid.uuid5(_CHILD_IDS, f"{origin}\n{count}").hex


def _cancel_requested() -> bool:
    """Whether the calling workflow (not just its agent run) was asked to cancel."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if callable(cancelling) else True
