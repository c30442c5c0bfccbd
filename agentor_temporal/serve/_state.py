"""The agents a server answers for, and a run's state as routes report it.

A run is found by id in Temporal and belongs to the agent its history names,
so any server process serving that agent can answer for it: nothing about a
run lives in the web tier. `snapshot` reads a run's state from history
without waiting and without a worker (a finished run needs none, a running
one is reported as it stands), unlike `resume`, which waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from starlette.responses import StreamingResponse
from temporalio.client import Client

from agentor_temporal._gone import mirrored_only
from agentor_temporal._outage import riding_outages
from agentor_temporal._results import shown_error, shown_events, shown_text
from agentor_temporal._runs import run_events
from agentor_temporal.agent import Agentor
from agentor_temporal.store import (
    Event,
    PendingApproval,
    RunResult,
    final_event,
    pending_approvals,
    replay_messages,
    total_usage,
    validate_run_id,
)
from agentor_temporal.worker import ConfigError, agents_keys, agents_target
from agentor_temporal.workflows import Segment, TemporalStore
from agentor_temporal.workflows.history_reader import NotAnAgentRun

T = TypeVar("T")

#: How long a read (GET /runs/{id}, the events stream's first look, a decision's
#: check) waits for an unreachable Temporal to come back before its 503: a
#: server restart takes seconds, and an HTTP client is better told within half
#: a minute than held for AGENTOR_OUTAGE_PATIENCE (which still bounds it).
READ_OUTAGE_PATIENCE = 30.0
#: Retry-After of a 503 for an unreachable Temporal (seconds).
UNREACHABLE_RETRY_AFTER = 5


class ApiError(Exception):
    """A request the server refuses: answered as `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def check_run_id(run_id: str) -> str:
    """`run_id` if it is a valid id; a 400 otherwise."""
    try:
        return validate_run_id(run_id)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


@dataclass
class RunView:
    """A run as it stands: its `RunResult` (status "running" while it works)."""

    agent: Agentor
    result: RunResult
    #: the latest execution's Temporal status: "running", "completed",
    #: "failed", "terminated", "canceled", "timed_out" or "continued_as_new"
    execution: str


def result_response(result: RunResult, agent: Agentor) -> StreamingResponse:
    """The JSON of `GET /runs/{run_id}` (and of a resume): `RunResult.to_dict()` plus
    the agent's name, encoded a piece at a time off the event loop (a sync iterator
    runs in Starlette's thread pool): a 1,000-turn run's is 400 MB, which built
    whole took minutes and gigabytes, and held every other request while it did."""
    return StreamingResponse(
        result.json_chunks({"agent": agent.name}), media_type="application/json"
    )


class Agents:
    """The agents one server answers for; the first is the default.

    Raises:
        ValueError: for no agents, something that is not an `Agentor`, two
            agents with one name, or agents that name different Temporal servers
            or encryption keys.
    """

    def __init__(self, agents: Sequence[Agentor]) -> None:
        agents = list(agents)
        if not agents:
            raise ValueError("serve needs at least one agent")
        for agent in agents:
            if not isinstance(agent, Agentor):
                raise ValueError(f"{agent!r} is not an agentor_temporal.Agentor")
        names = [a.name for a in agents]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two agents are named {', '.join(map(repr, twice))}")
        try:
            agents_target(agents)  # one Temporal for all: a run id names one run
            agents_keys(agents)  # and one codec: the default agent's client reads them all
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        self.all = agents
        self.default = agents[0]
        self.by_name = {a.name: a for a in agents}

    def get(self, name: str | None) -> Agentor:
        """The agent called `name` (the default for None); a 400 naming the choices."""
        if name is None:
            return self.default
        agent = self.by_name.get(name)
        if agent is None:
            known = ", ".join(repr(n) for n in self.by_name)
            raise ApiError(400, f"no agent named {name!r} here; this server serves {known}")
        return agent

    async def client(self) -> Client:
        """The Temporal client every agent here uses (on the runtime loop), with its keys."""
        return await self.default._client()

    async def read(self, step: Callable[[], Awaitable[T]], run_id: str) -> T:
        """`await step()`, a read of `run_id`, riding out a short Temporal outage.

        As the writes do (a start, a decision), within READ_OUTAGE_PATIENCE:
        a read answered at once with a 503 made a page or a poller fail for a
        server restart of a few seconds. Past it, `ConnectionFailed` (a 503
        with Retry-After).
        """
        client = await self.client()
        return await riding_outages(
            step,
            client,
            what=f"reading run {run_id!r}",
            run_id=run_id,
            again="ask again",
            patience=READ_OUTAGE_PATIENCE,
        )

    async def find(self, run_id: str, *, mirrored: bool = False) -> tuple[Agentor, list[Segment]]:
        """The agent that owns `run_id` and the run's segments.

        Args:
            mirrored: a run only an agent's store holds (Temporal lost it: back
                from an outage without its database) is found, with no segments:
                a resume continues it from there.

        Raises:
            ApiError: 400 for a bad id, 404 for a run Temporal does not know,
                one of an agent this server does not serve, or an id another type
                of workflow holds.
            ConnectionFailed: Temporal unreachable past READ_OUTAGE_PATIENCE.
        """
        check_run_id(run_id)
        store = TemporalStore(await self.client())
        try:
            segments = await self.read(lambda: store.segments(run_id), run_id)
        except NotAnAgentRun as exc:  # the namespace's own workflow holds the id
            raise ApiError(404, str(exc)) from None
        if not segments:
            holder = await self._mirror_of(run_id)
            if holder is None:
                raise ApiError(404, f"no run with id {run_id!r}")
            holding, gone = holder
            if mirrored:
                return holding, []
            # a run only its mirror holds: 'no run' left the client to think it lost
            raise ApiError(
                404, f"{gone} Here, POST /runs/{run_id}/resume continues it from its mirror."
            )
        name = owner_name(segments)
        if name is None:
            return self.default, segments
        agent = self.by_name.get(name)
        if agent is None:
            raise ApiError(
                404, f"run {run_id!r} belongs to agent {name!r}, which this server does not serve"
            )
        return agent, segments

    async def _mirror_of(self, run_id: str) -> tuple[Agentor, str] | None:
        """The agent whose store holds a run Temporal lacks, and what to say of it."""
        client = await self.client()
        seen: set[int] = set()
        for agent in self.all:
            if agent.store is None or id(agent.store) in seen:
                continue
            seen.add(id(agent.store))
            gone = await mirrored_only(client, run_id, agent.store)
            if gone is not None:
                return agent, str(gone.args[0])
        return None


def owner_name(segments: list[Segment]) -> str | None:
    """The agent a run's history names (its recorded spec, else its input)."""
    for segment in reversed(segments):
        if segment.spec and segment.spec.get("name"):
            return str(segment.spec["name"])
        if isinstance(segment.input, dict) and segment.input.get("agent"):
            return str(segment.input["agent"])
    return None


async def snapshot(agent: Agentor, run_id: str, segments: list[Segment]) -> RunView:
    """The run's state from history, without waiting for it."""
    client = await agent._client()
    # with the client: a fork's parent events are read from the parent's history
    events, _ = await riding_outages(
        lambda: run_events(run_id, segments, agent.store, client=client),
        client,
        what=f"reading run {run_id!r}",
        run_id=run_id,
        again="ask again",
        patience=READ_OUTAGE_PATIENCE,
    )
    events = shown_events(events)
    latest = segments[-1]
    usage, messages = total_usage(events), shown_text(replay_messages(events))
    if latest.status == "running":
        waiting = pending_approvals(events)
        pending = [
            PendingApproval(str(e.call_id), str(e.name), e.args, e.turn, latest.execution_run_id)
            for e in waiting
        ]
        result = RunResult(
            status="awaiting_approval" if pending else "running",
            run_id=run_id,
            events=events,
            usage=usage,
            messages=messages,
            pending_approvals=pending,
        )
        return RunView(agent, result, latest.status)
    end = final_event(events)
    outcome = latest.result if latest.status == "completed" else None
    if outcome is not None:
        status = str(outcome.get("status") or "completed")
        output, error = outcome.get("final_output"), outcome.get("error")
    elif end is not None:
        status, output, error = end.status or "completed", end.text, end.error
    else:
        status, output = "failed", None
        error = latest.failure or f"the run's workflow ended {latest.status}"
    result = RunResult(
        final_output=shown_text(output),
        status=status,
        run_id=run_id,
        events=events,
        usage=usage,
        messages=messages,
        error=shown_error(error),
    )
    return RunView(agent, result, latest.status)


def asked_by(
    recorded: list[Event], segments: list[Segment], position: int, call_id: str
) -> PendingApproval:
    """The call whose `approval_request` is the run's event at `position` (its SSE id).

    A decision naming it decides that call only: the turn it asked in, in the
    execution that asked (a cancelled run resumed asks again from turn 1,
    maybe with the same call id). A 409 when that event is not the call's
    request, or when it belongs to the run's fork parent.
    """
    if position > len(recorded):
        raise ApiError(409, f"the run has {len(recorded)} events, not {position}; nothing changed")
    event = recorded[position - 1]
    if event.type != "approval_request" or event.call_id != call_id:
        raise ApiError(
            409,
            f"event {position} of the run is not the approval request of call {call_id!r} "
            f"(it is a {event.type!r} event); nothing changed",
        )
    # the log is the events before the first segment (a fork's parent's), then each segment's
    index = position - 1 - (len(recorded) - sum(len(s.events) for s in segments))
    if index < 0:
        raise ApiError(409, f"call {call_id!r} was asked in the run this one was forked from")
    for segment in segments:
        if index < len(segment.events):
            return PendingApproval(
                call_id, str(event.name), event.args, event.turn, segment.execution_run_id
            )
        index -= len(segment.events)
    raise ApiError(409, f"event {position} of the run is in no execution of it")  # not reached
