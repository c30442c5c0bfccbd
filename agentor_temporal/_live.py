"""Runs nobody waits on, for `Agentor`: `astart()`, `stream_chat()` and `stream()`.

A run started to be followed (or only started) has no caller waiting for
its result: a follower may stop listening at any time, and the caller of
`astart` is gone at once. The run must not stall because of that, so the
embedded worker's lease belongs to a background task that waits for the
run's execution to close (`serve_until_done`), never to the follower.
Following itself is `streaming.follow`; this module only starts and attaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowExecutionStatus

from agentor_temporal._ending import say_line
from agentor_temporal._outage import riding_outages
from agentor_temporal._start import refuse_other_workflow, start_riding_outages
from agentor_temporal.store import Event
from agentor_temporal.store.base import in_thread, read_events
from agentor_temporal.streaming import follow
from agentor_temporal.workflows import TemporalStore
from agentor_temporal.workflows.types import AgentRunInput

if TYPE_CHECKING:
    from agentor_temporal._runtime import Runtime
    from agentor_temporal.agent import Agentor

#: Tasks that keep embedded workers serving runs nobody is waiting on.
_background: set[asyncio.Task[None]] = set()
#: The runs they serve, by run id: queue, client.
_held: dict[str, tuple[str, Client]] = {}
#: How many callers follow each run now (`stream_chat`, `stream`), counted on the caller's
#: side: its loop closes a stream left early as `asyncio.run` ends, while the producer on
#: the runtime's loop is only being cancelled. A run nobody follows any more (`astart`, a
#: fork started, a stream left before the run's end) is nobody's to wait on: the exit
#: names it if it is still open (`left_open`).
_followers: dict[str, int] = {}
_followers_guard = threading.Lock()
#: Runs a caller waits on now (`run`, `resume`, `fork` and their async forms), by run id:
#: queue, client. Counted as followers while waited on.
_waited: dict[str, tuple[str, Client]] = {}
#: Runs whose caller stopped waiting before their end: a Ctrl+C, a timeout of the script's
#: own (`asyncio.wait_for` around `arun`), its task cancelled (`asyncio.run` ending on an
#: exception of the script's). Nobody's to wait on, as a run `astart` started.
_abandoned: dict[str, tuple[str, Client]] = {}


@contextlib.contextmanager
def following(run_id: str) -> Iterator[None]:
    """Count a caller following `run_id` while the block runs (any thread)."""
    with _followers_guard:
        _followers[run_id] = _followers.get(run_id, 0) + 1
    try:
        yield
    finally:
        with _followers_guard:
            _followers[run_id] -= 1
            if not _followers[run_id]:
                del _followers[run_id]


@contextlib.contextmanager
def waited_on(agent: Agentor, client: Client, run_id: str) -> Iterator[None]:
    """Count the body (starting `run_id` and waiting for its result) as a caller following it;
    a wait cancelled before the run's end leaves it nobody's (`_abandoned`), named at exit
    if still open. Runs of an agent without an embedded worker are another worker's."""
    if not agent.embedded_worker:
        yield
        return
    with _followers_guard:
        _abandoned.pop(run_id, None)
        _waited[run_id] = (agent.task_queue, client)
    try:
        with following(run_id):
            yield
    except asyncio.CancelledError:
        with _followers_guard:
            _abandoned[run_id] = (agent.task_queue, client)
        raise
    finally:
        with _followers_guard:
            if not _followers.get(run_id):
                _waited.pop(run_id, None)


def _cancelling(task: asyncio.Task[object]) -> bool:
    """Whether `task` was asked to cancel and has not yet ended (Python 3.10: not known)."""
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False


async def left_open(ending: bool = False) -> dict[str, str]:
    """The runs this process's embedded workers serve with nobody waiting, still running as
    the server says (run id: task queue); `ending` (the process ends, its callers still
    waiting cut off with it), those waited on or followed too.

    Said at exit (`Runtime`): a script that calls `astart()` and ends, or whose
    `run()` was interrupted, stops the worker that would have run them, and the
    run then waits, silently, for another worker of its task queue.
    """
    # a caller's wait cancelled just now (Ctrl+C in `run()`: the cancellation crosses to this
    # loop) is let unwind first, so its run counts as left
    current = asyncio.current_task()
    unwinding = [t for t in asyncio.all_tasks() if t is not current and _cancelling(t)]
    if unwinding:
        await asyncio.wait(unwinding, timeout=2)
    with _followers_guard:
        known = {**_abandoned, **_held, **(_waited if ending else {})}
        held = [(r, served) for r, served in known.items() if ending or not _followers.get(r)]

    async def running(run_id: str, client: Client) -> bool:
        described = await client.get_workflow_handle(run_id).describe()
        return described.status == WorkflowExecutionStatus.RUNNING

    try:
        states = await asyncio.wait_for(
            asyncio.gather(*(running(r, c) for r, (_, c) in held), return_exceptions=True), 3
        )
    except asyncio.TimeoutError:  # the server does not answer: nothing known, nothing said
        return {}
    # an answer that is not True (an error: the run unknown now) is left unsaid
    return {r: q for (r, (q, _)), state in zip(held, states, strict=True) if state is True}


async def serve_until_done(agent: Agentor, client: Client, run_id: str) -> None:
    """Keep the agent's embedded worker, if any, serving until the run's execution closes.

    A run still open when the process exits that no caller follows then (`astart`, a fork
    started, a stream left before the run's end) is named in a line (`left_open`).
    """
    if not agent.embedded_worker:
        return
    ready = asyncio.Event()

    async def hold() -> None:
        async with agent._serving(client):
            ready.set()
            _held[run_id] = (agent.task_queue, client)
            with contextlib.suppress(Exception):
                await riding_outages(
                    lambda: client.get_workflow_handle(run_id).result(),
                    client,
                    what=f"serving run {run_id!r}",
                    run_id=run_id,
                )
            _held.pop(run_id, None)

    task = asyncio.get_running_loop().create_task(hold())
    _background.add(task)
    task.add_done_callback(_background.discard)
    await ready.wait()


async def only_stored(agent: Agentor, client: Client, run_id: str) -> bool:
    """Whether the run `run_id` is in `agent`'s store but gone from Temporal.

    A start under a caller-chosen id attaches to the run that id names
    (a redelivered message must not run an agent twice), yet that run's
    history may be gone (retention, a server's database lost) while its
    mirror holds it: a new start then ran the agent again, paying the model
    and its tools a second time, and its mirror wrote over the first run's log.
    """
    if agent.store is None:
        return False
    try:
        stored = await in_thread(read_events, agent.store, run_id, 1)
    except OSError:
        # a log the store refuses to read (a link planted in its place, unreadable):
        # nothing to resume from, so the start goes on, and its mirror says why
        return False
    if not stored:
        return False
    latest = await riding_outages(
        lambda: TemporalStore(client).latest(run_id), client, what=f"reading run {run_id!r}"
    )
    return latest is None


def stored_start_refused(run_id: str) -> ValueError:
    """A start (not waited for) of a run only the store holds: `resume` continues it."""
    return ValueError(
        f"Run {run_id!r} is in the store but gone from Temporal: starting it again "
        f"would run it a second time. `resume({run_id!r})` returns it, or continues it "
        "from the store if it did not finish"
    )


async def start_new(
    agent: Agentor, run_id: str, inp: AgentRunInput, *, chosen: bool = False
) -> Client:
    """Start the run (an id that exists is attached to) and have it served; its client.

    `chosen`: the caller chose the id, which another type of workflow may hold
    (refused, naming it).
    """
    client = await agent._client()
    if chosen and await only_stored(agent, client, run_id):
        raise stored_start_refused(run_id)
    # started first: the worker's lease waits on the run, which must exist
    await start_riding_outages(
        client, agent.definition, agent.task_queue, run_id, inp, what=f"starting run {run_id!r}"
    )
    if chosen:
        await refuse_other_workflow(client, run_id, agent.name)
    await serve_until_done(agent, client, run_id)
    return client


async def start_following(
    agent: Agentor, run_id: str, inp: AgentRunInput, text: bool, *, chosen: bool = False
) -> AsyncIterator[Event]:
    """Start the run (as `start_new`), then yield its events (`stream_chat`)."""
    client = await start_new(agent, run_id, inp, chosen=chosen)
    async for event in follow(
        client,
        run_id,
        text=text,
        history_events=lambda s: agent._events(run_id, s),
        mirror=agent.store,
    ):
        yield event


async def attach(agent: Agentor, run_id: str, after: int, text: bool) -> AsyncIterator[Event]:
    """Yield a run's events from `after`, a running one served meanwhile (`stream`)."""
    client = await agent._client()
    latest = await riding_outages(
        lambda: TemporalStore(client).latest(run_id), client, what=f"reading run {run_id!r}"
    )
    if latest is not None and latest.status == "running":
        await serve_until_done(agent, client, run_id)
    async for event in follow(
        client,
        run_id,
        after=after,
        text=text,
        history_events=lambda s: agent._events(run_id, s),
        mirror=agent.store,
    ):
        yield event


#: How many runs left open the exit says by name (a server's exit may leave hundreds).
_LEFT_OPEN_SHOWN = 5


def say_left_open(runtime: Runtime, ending: bool = False) -> None:
    """One line on stderr per run started here and still open, which this process's worker
    no longer serves once it exits (`astart()` and return, a `run()` interrupted): the run
    waited for another worker, and nothing said so. `ending`: the callers still waiting are
    cut off (the exit hook, once the threads it waits for are done; a signal ending the
    process in `_sigterm`), so the runs they wait on are named too: a daemon thread's (a
    `ThreadingHTTPServer` request's) was cut off, and its run id, perhaps one made for it,
    said nowhere."""
    if not runtime.loop.is_running():
        return
    try:
        still = runtime._result(
            asyncio.run_coroutine_threadsafe(left_open(ending), runtime.loop), 10
        )
    except Exception:
        return
    shown = list(still.items())[:_LEFT_OPEN_SHOWN]
    for run_id, queue in shown:
        say_line(
            f"run {run_id} is still open and this process's worker stops as it exits: "
            f"it goes on once a worker serves task queue {queue!r} "
            f"(`agentor-temporal worker --agents MODULE:ATTR`, or agent.resume({run_id!r}))"
        )
    if len(still) > len(shown):
        say_line(f"... and {len(still) - len(shown)} more runs still open the same way")
