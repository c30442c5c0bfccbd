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
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowExecutionStatus

from agentor_temporal._outage import riding_outages
from agentor_temporal._start import start_riding_outages
from agentor_temporal.store import Event
from agentor_temporal.streaming import follow
from agentor_temporal.workflows import TemporalStore
from agentor_temporal.workflows.types import AgentRunInput

if TYPE_CHECKING:
    from agentor_temporal.agent import Agentor

#: Tasks that keep embedded workers serving runs nobody is waiting on.
_background: set[asyncio.Task[None]] = set()
#: The runs among them nobody follows (`astart`, a fork started), by run id: queue, client.
_held: dict[str, tuple[str, Client]] = {}


async def left_open() -> dict[str, str]:
    """The runs this process's embedded workers serve with nobody waiting, still running as
    the server says (run id: task queue).

    Said at exit (`Runtime`): a script that calls `astart()` and ends stops the
    worker that would have run them, and the run then waits, silently, for
    another worker of its task queue.
    """
    held = list(_held.items())

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


async def serve_until_done(
    agent: Agentor, client: Client, run_id: str, *, unwatched: bool = False
) -> None:
    """Keep the agent's embedded worker, if any, serving until the run's execution closes.

    `unwatched`: nobody follows the run (`astart`, a fork started): if it is still open when
    the process exits, a line says so (`left_open`).
    """
    if not agent.embedded_worker:
        return
    ready = asyncio.Event()

    async def hold() -> None:
        async with agent._serving(client):
            ready.set()
            if unwatched:
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


async def start_new(
    agent: Agentor, run_id: str, inp: AgentRunInput, *, unwatched: bool = False
) -> Client:
    """Start the run (an id that exists is attached to) and have it served; its client."""
    client = await agent._client()
    # started first: the worker's lease waits on the run, which must exist
    await start_riding_outages(
        client, agent.definition, agent.task_queue, run_id, inp, what=f"starting run {run_id!r}"
    )
    await serve_until_done(agent, client, run_id, unwatched=unwatched)
    return client


async def start_following(
    agent: Agentor, run_id: str, inp: AgentRunInput, text: bool
) -> AsyncIterator[Event]:
    """Start the run (as `start_new`), then yield its events (`stream_chat`)."""
    client = await start_new(agent, run_id, inp)
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
