"""`LiveCalls`: a retried activity joins its earlier attempt when that is still in this worker.

The server times an activity out by its clocks alone: a call that a busy
worker started late, or whose completion reached the server late, is retried
although the worker is alive and the model answered (or is answering). A new
attempt would ask the model again, a paid request for an answer the worker
already has. So each model request and tool call runs as a task of its own,
keyed by (run, execution, activity id): a retry (attempt 2 on) that finds
that task running awaits it, and one that finds it finished takes its
result; a first attempt always calls, but for a local activity's (a model
request with `local_model_calls`): a workflow task dropped while it ran (a
worker frozen past the workflow task timeout) is run again from its last
recorded step, asking again under the same key as a first attempt. A call
keeps running when its attempt is cancelled because the server gave up on it
(so the retry can join it), or because the activity was paused or reset
(`temporal activity pause`, `reset`: the attempt after the unpause or reset
joins it, a first attempt too; an attempt after that which finds it still
running, a second reset of a hung call, restarts it), unless its run turns out to have ended
(terminated or reset: it goes on `_ended.ENDED_GRACE`, or `RESET_GRACE`, for the
same call of the run's resume or reset execution to join, then is stopped; a
paused call's run is checked until an attempt takes it again, and the call
once finished is kept till then, however late the unpause, or handed to the server as
the worker stops: `_paused_handover`), and is cancelled with it
otherwise (the run was cancelled, or the worker is shutting down); a call
that finishes all the same (a sync tool's thread cannot be stopped) answers
with its result, which a cancelled run waits for. Finished calls are forgotten
after `KEEP`, by which time any retry has long started (a local call's after
`LOCAL_KEEP`: the task run again for a lost one waits its turn in the queue; so
does a call whose attempt the server may have timed out, `LATE_SHARE`: its
retry waits in the same queue), or as soon as their
workflow execution ends (`forget_execution`: nothing of it is retried
then, and a long run's results would otherwise outlive it). A first attempt of a run's next
execution (a resume after a terminate) first stops the ended execution's calls
still live here, so that no tool runs twice at once. And an attempt that
reaches Python only after its heartbeat timeout has passed does not call at
all: the server has already given up on it and scheduled another.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.activities._ended import linger, restarted, stop_ended_executions
from agentor_temporal.activities._errors import instead_of_cancel

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Seconds a finished call's result stays joinable. A retry starts after the
#: heartbeat timeout plus a backoff of about a second; under load its start
#: can lag a few seconds more.
KEEP = 30.0

#: Seconds a local call's (a model request with `local_model_calls`) result
#: stays joinable. Its answer reaches history only with its workflow task's
#: completion: a task lost meanwhile (timed out on an overloaded worker) is
#: scheduled again at once, but waits in the task queue behind the worker's
#: backlog, and its replay asks again under the same key. Measured at 1,000
#: runs in flight on 2 overloaded cores: 35-62 s from the lost task's start
#: to the next one's, past `KEEP`, and the request was sent again.
LOCAL_KEEP = 180.0

#: Share of its heartbeat timeout past which an attempt's finished call is kept
#: `LOCAL_KEEP`, not `KEEP`: the server may have timed that attempt out before
#: its completion arrived (an overloaded worker neither beats nor completes on
#: time), and the retry it scheduled waits in the task queue behind the
#: worker's backlog. Measured at 1,000 runs in flight on 2 overloaded cores: a
#: retry started 38 s after its attempt's completion was refused (the activity
#: no longer found), past `KEEP`, and asked the model again.
LATE_SHARE = 0.5

#: Set inside a shared call: heartbeats belong to the attempts awaiting it.
IN_SHARED_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "agentor_in_shared_call", default=False
)

#: Seconds of clock difference between server and worker tolerated before a
#: late attempt is taken for one the server has already timed out. Measured
#: at 500 runs in flight on an overloaded worker, 1 s let through retries
#: that Python started before their own (5-6 s late) first attempt, each a
#: second model request.
CLOCK_SLACK = 0.5
#: Attempts from this one on always call: a worker whose clock runs far
#: ahead of the server's would otherwise take every attempt for a late one
#: and never call at all. Refusing one costs only its retry backoff.
ALWAYS_CALL_FROM = 3

#: Seconds a call whose execution was ended by a reset (`temporal workflow
#: reset`) keeps running for the reset execution's same call to join, before
#: it is stopped as any call of an ended run is. The reset execution's first
#: workflow task schedules it again at once, when the reset point came before
#: the call's result.
RESET_GRACE = 10.0

#: Seconds a local call whose attempt was cancelled keeps running for the same
#: call of its run's next workflow task to join, before it is stopped. A local
#: activity's attempt is cancelled when its workflow task is dropped (a worker
#: frozen past the workflow task timeout: the server gave the task up, and the
#: worker evicts the run when it wakes), and the task the server retries at
#: once asks the model again under the same key, as its first attempt: without
#: this, a second paid request while the first's answer was coming. A run
#: cancelled mid-request lets its request run this long before it is stopped.
LOCAL_REJOIN_GRACE = 10.0

#: Seconds between checks whether the run of a paused call (`temporal activity
#: pause`) has ended meanwhile (terminated, cancelled): no unpause can come then,
#: and the call is stopped as any call of an ended run is.
PAUSED_CHECK = 1.0


#: How an ended execution's same call may be joined by its resume's (see `_ended_same`).
STOPPED_BY_HAND = (WorkflowExecutionStatus.TERMINATED, WorkflowExecutionStatus.CANCELED)

_Key = tuple[str, str, str]


def _expired(info: activity.Info) -> bool:
    """Whether the server has surely timed this attempt out (no beat of it can have arrived)."""
    if info.heartbeat_timeout is None or info.started_time is None:
        return False
    if info.attempt >= ALWAYS_CALL_FROM:
        return False
    late = time.time() - info.started_time.timestamp()
    return late > info.heartbeat_timeout.total_seconds() + CLOCK_SLACK


def _dropped_with_its_task(details: activity.ActivityCancellationDetails | None) -> bool:
    """Whether a local activity's cancel may be its workflow task's loss, not its run's end.

    A run evicted from its worker (its workflow task timed out while the
    worker was frozen, or failed) has its local activities cancelled as a
    cancelled run's are; a stopping worker's are cancelled as such.
    """
    return details is not None and details.cancel_requested and not details.worker_shutdown


def _paused_or_reset(details: activity.ActivityCancellationDetails | None) -> bool:
    """Whether the attempt was cancelled by an activity pause or reset, and for nothing else."""
    return (
        details is not None
        and (details.paused or details.reset)
        and not (details.cancel_requested or details.worker_shutdown)
    )


def _joinable(task: asyncio.Task[Any] | None) -> bool:
    """Whether an attempt may take `task`'s outcome: live, or finished with a result."""
    return (
        task is not None
        and not task.cancelled()
        and not (task.done() and task.exception() is not None)
    )


class LiveCalls:
    """This worker's model requests and tool calls, by activity."""

    def __init__(self, keep: float | None = None, local_keep: float | None = None) -> None:
        self.keep = KEEP if keep is None else keep
        #: how long a local call's result is kept (never less than `keep`)
        self.local_keep = max(self.keep, LOCAL_KEEP if local_keep is None else local_keep)
        self._calls: dict[_Key, asyncio.Task[Any]] = {}
        #: background checks whether a call's run has ended (kept referenced)
        self._checks: set[asyncio.Task[None]] = set()
        #: attempts that joined a live or finished call instead of running again
        self.joined = 0
        #: what each call is (its `same`), for a reset execution's call to find it
        #: (made when first compared: digesting a request on every call costs each
        #: run for what only a reset needs)
        self._same: weakref.WeakKeyDictionary[asyncio.Task[Any], Callable[[], str]] = (
            weakref.WeakKeyDictionary()
        )
        #: calls of an ended execution that a later execution of the run (a reset's,
        #: a resume's) joined, with the execution that joined them last
        self._adopted: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = (
            weakref.WeakKeyDictionary()
        )
        #: calls whose attempt was paused or reset (`temporal activity pause`/`reset`):
        #: the attempt after it joins them, a first attempt too
        self._paused: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        #: calls a later attempt joined (since the last cancel of one awaiting them)
        self._rejoined: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        #: calls reset (`temporal activity reset`) while running: attempts that joined since
        self._resets: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        #: paused calls whose run is being checked (see `_watch_paused`)
        self._watched: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        #: calls a local activity made (a model request with `local_model_calls`)
        self._local: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        #: when each call's attempt may be timed out by the server (see `LATE_SHARE`);
        #: a call still here once finished is kept `local_keep`
        self._late_after: weakref.WeakKeyDictionary[asyncio.Task[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    def __len__(self) -> int:
        return len(self._calls)

    async def run(
        self, make: Callable[[], Awaitable[T]], *, same: Callable[[], str] | None = None
    ) -> T:
        """`await make()` once per activity, however many attempts ask.

        `same`: what the call is (a tool's name, arguments and idempotency
        key), made only when a call of another execution might be it. A
        first attempt in an execution that a reset (`temporal workflow
        reset`) started from one whose same call, same activity, is still
        live or just finished in this worker joins that call: the reset
        execution re-ran the workflow task that scheduled it, and running it
        again would do its work twice.

        Outside an activity (tests, the in-process floor) it just awaits.
        """
        if not activity.in_activity():
            return await make()
        info = activity.info()
        key = (info.workflow_id or "", info.workflow_run_id or "", info.activity_id)
        task = self._calls.get(key)
        if not (info.attempt > 1 or info.is_local or task in self._paused):
            task = None
        if task is not None and await restarted(task, self._resets):
            self._paused.discard(task)
            task = None  # reset twice: the operator restarts it
        if not _joinable(task) and same is not None:
            task = await self._ended_same(info, same)
            if task is not None:
                self._adopted[task] = info.workflow_run_id or ""
                self._calls[key] = task
                task.add_done_callback(lambda done: self._finished(key, done))
                logger.info(
                    "%s of run %s joins the same call its ended execution started",
                    info.activity_type,
                    info.workflow_id,
                )
        if task is None or not _joinable(task):
            await stop_ended_executions(self._calls, self._adopted, info)
            if _expired(info):
                # started after the server gave up on it: its answer could never
                # be recorded, and the attempt the server made instead will ask
                logger.warning(
                    "%s attempt %d of run %s reached this worker %.1f s after it started, "
                    "past its heartbeat timeout; not calling",
                    info.activity_type,
                    info.attempt,
                    info.workflow_id,
                    time.time() - info.started_time.timestamp(),
                )
                raise ApplicationError(
                    "the attempt started after its heartbeat timeout",
                    type="AttemptExpired",
                    # expected under overload; the warning above says it once
                    category=ApplicationErrorCategory.BENIGN,
                )
            task = asyncio.get_running_loop().create_task(self._shared(make))
            self._calls[key] = task
            if same is not None:
                self._same[task] = same
            if info.is_local:
                self._local.add(task)
            elif info.heartbeat_timeout is not None and info.started_time is not None:
                self._late_after[task] = (
                    info.started_time.timestamp()
                    + info.heartbeat_timeout.total_seconds() * LATE_SHARE
                )
            task.add_done_callback(lambda done: self._finished(key, done))
        else:
            self.joined += 1
            self._rejoined.add(task)
            self._paused.discard(task)  # an attempt awaits it again: no longer orphaned
            logger.info(
                "%s attempt %d of run %s joins the call its attempt before started",
                info.activity_type,
                info.attempt,
                info.workflow_id,
            )
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            if details is not None and details.not_found and not details.timed_out:
                # not found: the server timed the attempt out (a retry may join
                # the call) or the run ended (terminated, reset): nothing will
                self._stop_if_ended(task, info)
            if _paused_or_reset(details):
                # paused or reset from the CLI or API: the attempt after the unpause
                # (or the reset's) joins the call, which goes on meanwhile
                self._paused.add(task)
                if details is not None and details.reset and not details.paused:
                    self._resets.setdefault(task, 0)
                self._watch_paused(key, task, info)
                logger.info(
                    "%s %s of run %s paused or reset: the call keeps running for the "
                    "attempt after it to join",
                    info.activity_type,
                    info.activity_id,
                    info.workflow_id,
                )
                raise
            if info.is_local and _dropped_with_its_task(details) and not task.done():
                # the workflow task it ran in was lost (timed out while this worker
                # was frozen): the run's next task asks again, and joins this call
                self._stop_unless_joined(task, info)
                raise
            if details is None or not (details.timed_out or details.not_found):
                task.cancel()
                # the call may answer its cancel with an error of its own: a
                # stopping worker hands the task back (`WorkerStopping`), and
                # that must reach Temporal rather than a bare cancel
                while not task.done():
                    try:
                        await asyncio.wait([task])
                    except asyncio.CancelledError:
                        task.cancel()  # cancelled again (the worker is stopping): passed on
                error = None if task.cancelled() else task.exception()
                if error is not None and not isinstance(error, asyncio.CancelledError):
                    raise error from None
                if not task.cancelled() and error is None:
                    # it finished what it started (a sync tool's thread cannot
                    # be stopped): the run waits for that outcome to record it
                    return task.result()  # type: ignore[no-any-return]
            else:
                # the server gave up on this attempt (a worker frozen or cut off
                # past its heartbeat timeout): the call goes on for the retry to
                # join, and this attempt ends quietly, not as a failure's traceback;
                # the retry may wait long in the queue: its result is kept for it
                self._late_after[task] = 0.0
                replaced = instead_of_cancel(f"{info.activity_type} {info.activity_id}")
                if replaced is not None:
                    raise replaced from None
            raise

    async def _ended_same(
        self, info: activity.Info, same: Callable[[], str]
    ) -> asyncio.Task[Any] | None:
        """The same call of an ended execution of this run, live or finished here.

        The execution a reset ended for this one, or one terminated or
        cancelled and then resumed (its call goes on until the worker hears
        the server no longer knows it, or for a paused call, until found).
        """
        workflow_id, execution = info.workflow_id or "", info.workflow_run_id or ""
        candidates = [
            (key, task)
            for key, task in self._calls.items()
            if key[0] == workflow_id
            and key[1] != execution
            and key[2] == info.activity_id
            and task in self._same
            and _joinable(task)
        ]
        if not candidates:
            return None
        mine = same()
        candidates = [(key, task) for key, task in candidates if self._same[task]() == mine]
        if not candidates:
            return None
        try:
            client = activity.client()
        except RuntimeError:
            return None
        for key, task in candidates:
            handle = client.get_workflow_handle(workflow_id, run_id=key[1])
            try:
                described = await handle.describe()
            except RPCError:
                continue
            reset_to = described.raw_description.workflow_extended_info.reset_run_id
            if reset_to == execution or (not reset_to and described.status in STOPPED_BY_HAND):
                # reset into this one, or stopped by hand (terminated, cancelled) and
                # resumed at once: the same call (request, or tool call with its
                # idempotency key) is joined rather than made a second time. Not the
                # call of a run that timed out or failed: it may be what held the run
                # up (a hung request past the run's time limit), and is asked again
                return task
        return None

    def _stop_if_ended(self, task: asyncio.Task[Any], info: activity.Info) -> None:
        """Cancel the call once its workflow execution is found closed (asked in the background)."""
        try:
            client = activity.client()
        except RuntimeError:
            return

        execution = info.workflow_run_id or ""

        async def check() -> None:
            handle = client.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
            reset = by_hand = False
            try:
                described = await handle.describe()
                ended = described.status != WorkflowExecutionStatus.RUNNING
                reset = bool(described.raw_description.workflow_extended_info.reset_run_id)
                by_hand = described.status in STOPPED_BY_HAND
            except RPCError as exc:
                ended = exc.status == RPCStatusCode.NOT_FOUND
            if ended and not task.done():
                # the reset execution, or a resume of a run stopped by hand, may make
                # the same call again: it joins this one, rather than pay for it twice
                # (a run that timed out or failed: its resume asks again, see `_ended_same`)
                if reset:
                    await asyncio.sleep(RESET_GRACE)
                elif by_hand:
                    await linger(client, info, task)
            if ended and not task.done() and self._adopted.get(task, execution) == execution:
                logger.info(
                    "%s of run %s stopped: the run ended while it was running",
                    info.activity_type,
                    info.workflow_id,
                )
                task.cancel()

        checking = asyncio.get_running_loop().create_task(check())
        self._checks.add(checking)
        checking.add_done_callback(self._checks.discard)

    def _watch_paused(self, key: _Key, task: asyncio.Task[Any], info: activity.Info) -> None:
        """Check the paused call's run until an attempt takes the call again or the run ends.

        Meanwhile the call, once finished, is kept (not forgotten after
        `keep`): an unpause may come any time later, and its attempt takes
        the result rather than run the tool or ask the model again. The run
        ended, the call is stopped (if still running) and forgotten.
        """
        try:
            client = activity.client()
        except RuntimeError:
            return
        if task in self._watched:
            return
        self._watched.add(task)
        ref = weakref.ref(task)

        async def check() -> None:
            handle = client.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
            try:
                while task in self._paused:
                    await asyncio.sleep(PAUSED_CHECK)
                    try:
                        described = await handle.describe()
                    except RPCError as exc:
                        if exc.status != RPCStatusCode.NOT_FOUND:
                            continue
                    else:
                        if described.status == WorkflowExecutionStatus.RUNNING:
                            continue
                    if task in self._paused:
                        self._paused.discard(task)
                        self._watched.discard(task)
                        self._stop_if_ended(task, info)
                        if task.done():
                            # kept a while, for a resume's same call to take
                            asyncio.get_running_loop().call_later(self.keep, self._forget, key, ref)
                    return
                if task.done():
                    # an attempt took it again: forgotten as any finished call is
                    asyncio.get_running_loop().call_later(self.keep, self._forget, key, ref)
            finally:
                self._watched.discard(task)

        checking = asyncio.get_running_loop().create_task(check())
        self._checks.add(checking)
        checking.add_done_callback(self._checks.discard)

    def _stop_unless_joined(self, task: asyncio.Task[Any], info: activity.Info) -> None:
        """Cancel the local call unless an attempt joins it within `LOCAL_REJOIN_GRACE`.

        Its workflow task was dropped (the run evicted from this worker) or its
        run cancelled it: the two look alike here. A dropped task's run asks
        again under the same key within seconds; a cancelled run does not.
        """
        self._rejoined.discard(task)

        async def check() -> None:
            await asyncio.sleep(LOCAL_REJOIN_GRACE)
            if task not in self._rejoined and not task.done():
                logger.info(
                    "%s %s of run %s stopped: no workflow task asked for it again",
                    info.activity_type,
                    info.activity_id,
                    info.workflow_id,
                )
                task.cancel()

        checking = asyncio.get_running_loop().create_task(check())
        self._checks.add(checking)
        checking.add_done_callback(self._checks.discard)

    @staticmethod
    async def _shared(make: Callable[[], Awaitable[T]]) -> T:
        IN_SHARED_CALL.set(True)
        return await make()

    def _finished(self, key: _Key, task: asyncio.Task[Any]) -> None:
        if not task.cancelled():
            # retrieved here so an unjoined failure is not logged as never retrieved
            with contextlib.suppress(BaseException):
                task.exception()
        if task in self._watched:
            return  # paused: kept until an attempt takes it or its run ends
        # by weak reference: a call forgotten with its execution is freed at
        # once (its result, and the activity context its task copied)
        late = self._late_after.get(task)
        if late is not None and time.time() < late:
            del self._late_after[task]  # finished in good time: its completion is taken
        asyncio.get_running_loop().call_later(
            self._keep(task), self._forget, key, weakref.ref(task)
        )

    def _keep(self, task: asyncio.Task[Any]) -> float:
        """How long `task`'s result stays joinable once finished."""
        return self.local_keep if task in self._local or task in self._late_after else self.keep

    def paused(self) -> list[tuple[_Key, asyncio.Task[Any]]]:
        """The calls paused here (`temporal activity pause`, not a reset) that no attempt took."""
        return [
            (key, task)
            for key, task in self._calls.items()
            if task in self._paused and task not in self._resets
        ]

    def taken(self, task: asyncio.Task[Any]) -> None:
        """`task`'s outcome went to the server otherwise: no attempt is waited for."""
        self._paused.discard(task)

    def forget_execution(self, workflow_id: str, run_id: str, *, recorded: bool = True) -> int:
        """Forget the finished calls of a workflow execution that ended; return how many.

        Calls still running stay (their attempts are awaiting them). Not
        `recorded`: the execution closed in a workflow task the server has not
        yet accepted, so the answers of its local calls may be in no history
        yet: they stay for `local_keep`, as any finished local call does. That task's
        completion refused (it reached the server after the task timed out),
        the task run again replays the run to its last local request, which
        must take the answer this worker holds rather than ask the model again.
        """
        done = [
            key
            for key, task in self._calls.items()
            if key[0] == workflow_id
            and key[1] == run_id
            and task.done()
            and (recorded or task not in self._local)
        ]
        for key in done:
            del self._calls[key]
        return len(done)

    def _forget(self, key: _Key, ref: weakref.ref[asyncio.Task[Any]]) -> None:
        task = ref()
        if task is not None and task not in self._watched and self._calls.get(key) is task:
            del self._calls[key]
