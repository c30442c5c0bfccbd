"""`Agentor`: Agentor's run/resume API, with every run a Temporal workflow.

`run()` starts workflow `AgentRun` with id = run_id and waits for it;
`resume(run_id)` looks the run up in Temporal (or, when history is gone, in the
store) and returns it, waits for it, or continues it as a new segment under
the same id, following the resume table in DESIGN.md (see `_resume`);
`fork(run_id)` continues a copy under a new id (see `_fork`). While a call is
active the process runs an embedded worker for its own agent, so a single
script needs no worker process; `embedded_worker=False` leaves the work to a
fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from agentor_temporal._decided import check_waiting
from agentor_temporal._fork import run_fork
from agentor_temporal._gone import mirrored_only, not_found, run_gone
from agentor_temporal._live import attach, following, start_following, start_new
from agentor_temporal._outage import riding_outages
from agentor_temporal._results import (
    await_result,
    check_definition,
    check_given,
    check_turns,
    shown_event,
)
from agentor_temporal._resume import new_input, resume_run, start_run
from agentor_temporal._runs import (
    make_decision,
    run_events,
    send_decision,
    undelivered,
)
from agentor_temporal._runtime import Runtime
from agentor_temporal.activities import AgentDefinition, Tool, as_tool
from agentor_temporal.codec import KeysSetting, keys_from_env, resolve_keys
from agentor_temporal.store import (
    Event,
    PendingApproval,
    RunResult,
    Store,
    validate_run_id,
)
from agentor_temporal.store.base import in_thread, read_events
from agentor_temporal.streaming import on_runtime
from agentor_temporal.telemetry import enable_tracing
from agentor_temporal.workflows import Segment, policies
from agentor_temporal.workflows.policies import TASK_QUEUE, validate_task_queue
from agentor_temporal.workflows.types import Decision

MessageInput = str | list[dict[str, Any]]


class Agentor:
    """An agent whose runs are durable Temporal workflows.

    Args:
        name: the agent's name; workers find it by this name.
        model: chat-completions model name.
        instructions: the system message.
        tools: plain functions or `@function_tool`s.
        store: optional JSONL mirror (`FileStore("runs")`, `MemoryStore()` or
            any object with append/load/list_runs). Temporal is always the
            durable record; the store is the documented log beside it.
        base_url: any OpenAI-compatible endpoint (default `OPENAI_BASE_URL`).
        api_key: default `OPENAI_API_KEY`; read by the worker, never recorded.
        temporal: "host:port", a `temporalio.client.Client`, or None for the
            Temporal environment or the embedded dev server.
        task_queue: where runs are scheduled (default "agentor"); a blank name,
            or one no worker could poll, is a ValueError.
        max_turns: model calls per run segment before it ends as `max_turns`.
        max_tool_failures: failures after which a tool is withdrawn.
        embedded_worker: run a worker for this agent in-process while a call
            is active; False when a worker fleet serves the agent.
        tracing: OpenTelemetry traces of this agent's runs, exported as the
            OTEL_* environment says (None: on when that environment asks for
            traces). Needs the `otel` extra.
        encryption_keys: encrypt the runs' payloads (`EncryptionKeys`,
            `key_id:base64,...` text read from somewhere private, or a key
            file's `pathlib.Path`); default `AGENTOR_ENCRYPTION_KEYS`. See
            `agentor_temporal.codec`.
        local_model_calls: ask the model in local activities, inside the
            run's workflow task: fewer round trips to the server (lower
            latency, more runs per second), at the price of live text
            streaming (`stream_text=True` runs still use activities), of the UI's
            activity row per generation (a marker instead), and of noticing a
            lost worker mid-request after the workflow task timeout (5 s).
            Recorded with each run: resume follows what the run began with.
        **model_settings: extra chat-completions parameters (temperature, ...).
            `extra_headers`, `default_headers`, `extra_query`, `default_query`
            and `extra_body` are sent with each request from the worker, never
            recorded; so is a setting holding a text whose name says credential
            (`metadata={"session_token": ...}`) or a key the process knows.
    """

    def __init__(
        self,
        name: str = "Agent",
        model: str = "gpt-4o-mini",
        instructions: str | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        store: Store | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        temporal: str | Client | None = None,
        task_queue: str = TASK_QUEUE,
        max_turns: int = 20,
        max_tool_failures: int = 2,
        embedded_worker: bool = True,
        tracing: bool | None = None,
        encryption_keys: KeysSetting = None,
        local_model_calls: bool = False,
        **model_settings: Any,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("name must be a non-empty string")
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a model name string")
        validate_task_queue(task_queue)
        check_turns(max_turns, optional=False)
        check_turns(max_tool_failures, "max_tool_failures", optional=False)
        resolved = [as_tool(t) for t in tools or []]
        names = [t.name for t in resolved]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate tool names: {', '.join(duplicates)}")
        if store is not None and not all(
            callable(getattr(store, m, None)) for m in ("append", "load", "list_runs")
        ):
            raise TypeError("store must have append(run_id, event), load(run_id) and list_runs()")
        check_given(instructions, model_settings)
        self.definition = AgentDefinition(
            name=name,
            model=model,
            instructions=instructions,
            tools=resolved,
            model_settings=dict(model_settings),
            max_turns=max_turns,
            max_tool_failures=max_tool_failures,
            base_url=base_url,
            api_key=api_key,
            store=store,
            local_model_calls=bool(local_model_calls),
        )
        check_definition(self.definition)
        self.temporal = temporal
        self.task_queue = task_queue
        self.embedded_worker = embedded_worker
        self.tracing = tracing
        if tracing:
            enable_tracing()  # a missing extra is a mistake to hear about now
        #: None: the environment's keys (read when a client is made)
        self.encryption_keys = None if encryption_keys is None else resolve_keys(encryption_keys)

    def __repr__(self) -> str:
        tools = [t.name for t in self.tools]
        return f"Agentor(name={self.name!r}, model={self.model!r}, tools={tools})"

    @property
    def name(self) -> str:
        """The agent's registered name."""
        return self.definition.name

    @property
    def model(self) -> str:
        """The model name."""
        return self.definition.model

    @property
    def instructions(self) -> str | None:
        """The system message."""
        return self.definition.instructions

    @property
    def tools(self) -> list[Tool]:
        """The agent's tools."""
        return list(self.definition.tools)

    @property
    def store(self) -> Store | None:
        """The JSONL mirror, if any."""
        return self.definition.store

    @property
    def task_queue(self) -> str:
        """Where runs are scheduled; a name no worker could poll is refused when set."""
        return self._task_queue

    @task_queue.setter
    def task_queue(self, value: str) -> None:
        self._task_queue = validate_task_queue(value)

    # -- public API ----------------------------------------------------------------

    def run(
        self, input: MessageInput, run_id: str | None = None, max_turns: int | None = None
    ) -> RunResult:
        """Run the agent to its result (blocking).

        Args:
            input: a prompt or a list of chat messages.
            run_id: optional caller-chosen id; starting again with an id that is
                running or finished attaches to that run instead.
            max_turns: override the agent's budget for this run.

        Returns:
            The run's `RunResult` (`run_id` is always set).

        Raises:
            ValueError: for bad input or a hostile run id.
            ConnectionFailed: when Temporal cannot be reached.
        """
        return Runtime.get().run_sync(start_run(self, input, run_id, max_turns))

    async def arun(
        self, input: MessageInput, run_id: str | None = None, max_turns: int | None = None
    ) -> RunResult:
        """Async `run`."""
        return await Runtime.get().run_async(start_run(self, input, run_id, max_turns))

    def resume(self, run_id: str, max_turns: int | None = None) -> RunResult:
        """Return, wait for, or continue the run `run_id` (blocking).

        A completed run is returned without a model request or a tool call; a
        running one is waited for (with a worker ensured); a failed, timed
        out, terminated or cancelled one continues as a new segment under the
        same id, with a half-finished tool batch rewound.

        Raises:
            KeyError: when neither Temporal nor the store knows the id.
            ValueError: when the run belongs to a different agent or was
                started with different tools, model or instructions.
        """
        return Runtime.get().run_sync(resume_run(self, run_id, max_turns))

    async def aresume(self, run_id: str, max_turns: int | None = None) -> RunResult:
        """Async `resume`."""
        return await Runtime.get().run_async(resume_run(self, run_id, max_turns))

    def fork(
        self,
        run_id: str,
        input: MessageInput | None = None,
        *,
        fork_id: str | None = None,
        max_turns: int | None = None,
        at: int | None = None,
    ) -> RunResult:
        """Copy the run `run_id` to a new run and continue it there (blocking).

        The fork is its own run: the parent's events, a `fork` marker naming
        the parent, then its own life. Without `input` an unfinished parent is
        completed on the fork and a finished one returned as a snapshot (no
        model request); with `input` the conversation continues with it.

        Args:
            run_id: the parent (in Temporal, or only in this agent's store).
            input: a prompt or chat messages to continue with.
            fork_id: the fork's run id (default: a new one).
            max_turns: override the agent's budget for the continuation.
            at: keep only the parent's first `at` events (a half-finished
                tool batch is rewound).

        Returns:
            The fork's `RunResult`: the forked history plus the continuation,
            usage their total; a failed one's error names the fork to resume.

        Raises:
            KeyError: when the parent is unknown.
            ValueError: for a `fork_id` in use (nothing is overwritten), an
                empty input list, or an `at` outside the parent's log.
        """
        return Runtime.get().run_sync(run_fork(self, run_id, input, fork_id, max_turns, at))

    async def afork(
        self,
        run_id: str,
        input: MessageInput | None = None,
        *,
        fork_id: str | None = None,
        max_turns: int | None = None,
        at: int | None = None,
    ) -> RunResult:
        """Async `fork`."""
        return await Runtime.get().run_async(run_fork(self, run_id, input, fork_id, max_turns, at))

    async def astart(
        self,
        input: MessageInput,
        run_id: str | None = None,
        *,
        max_turns: int | None = None,
        stream_text: bool = False,
    ) -> str:
        """Start a run and return its id at once; follow it with `stream`, collect it with `resume`.

        Idempotent as `run()`'s start: an id that exists is attached to. With
        `stream_text`, `stream(run_id, text=True)` also gets text deltas.

        Raises:
            ValueError: for bad input (as `run()`: an input too large for one
                model request is refused before anything starts) or a
                hostile run id.
        """
        chosen = run_id is not None
        run_id, inp = new_input(self, input, run_id, max_turns, stream_text=stream_text)
        await Runtime.get().run_async(start_new(self, run_id, inp, chosen=chosen))
        return run_id

    async def stream_chat(
        self,
        input: MessageInput,
        run_id: str | None = None,
        *,
        stream_text: bool = False,
        max_turns: int | None = None,
    ) -> AsyncIterator[Event]:
        """Run the agent, yielding each `Event` as it is recorded, ending with `run_end`.

        The run is the same durable workflow as `run()`: persisted, mirrored to
        the store, resumable. A caller that stops iterating (or is cancelled,
        or dies) does not stop the run: it completes on a worker (this
        process's embedded worker keeps serving it until it ends), and
        `resume(run_id)` or `stream(run_id, after=N)` picks it up.

        Args:
            input: a prompt or a list of chat messages.
            run_id: optional caller-chosen id (attaches if it exists).
            stream_text: also yield `text_delta` events while the model
                generates. If a model attempt is retried, an `error` event
                says so: text streamed earlier in that turn is void, and the
                `generation` event carries the final text.
            max_turns: override the agent's budget for this run.
        """
        chosen = run_id is not None
        run_id, inp = new_input(self, input, run_id, max_turns, stream_text=stream_text)
        with following(run_id):
            async for event in on_runtime(
                lambda: start_following(self, run_id, inp, stream_text, chosen=chosen)
            ):
                yield shown_event(event)

    async def stream(
        self, run_id: str, after: int = 0, *, text: bool = False
    ) -> AsyncIterator[Event]:
        """Yield a live or finished run's events from position `after`.

        A client that lost its connection passes the number of events it
        already has and continues without duplicates or gaps; live events
        arrive as they are recorded. With `text=True`, text deltas produced
        after that point are passed on too.

        Raises:
            KeyError: when Temporal does not know the run.
        """
        validate_run_id(run_id)
        if not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be a non-negative integer, got {after!r}")
        with following(run_id):
            async for event in on_runtime(lambda: attach(self, run_id, after, text)):
                yield shown_event(event)

    def approve(
        self,
        run_id: str,
        call_id: str | PendingApproval,
        reason: str | None = None,
        *,
        by: str | None = None,
        turn: int | None = None,
    ) -> dict[str, Any]:
        """Approve a tool call the run `run_id` is waiting on (blocking).

        The decision is recorded as an `approval_decision` event; then
        `resume(run_id)` continues the run and returns its outcome.

        Args:
            run_id: the run.
            call_id: the waiting call: its id, or the `PendingApproval` read
                from `RunResult.pending_approvals` (which also names its turn).
            reason: optional, recorded with the decision.
            by: optional, who decided (recorded).
            turn: the turn of the call decided (`PendingApproval.turn`).
                Models reuse call ids: a decision naming a turn is refused
                when the call waiting with that id is another turn's. None
                (with a plain id): the turn of the call waiting now, read
                from the run's history, so a decision that reaches the run
                only after it moved on to another call is refused too.

        Returns:
            The request that was decided: call_id, tool, args, turn, approved.

        Raises:
            KeyError: when Temporal does not know the run.
            ValueError: when the run is not waiting for that call (unknown
                call, another turn's call, already decided, or the run is
                finished); nothing changes.
            TimeoutError: when no worker took the decision within
                `DECISION_PATIENCE` (60 s; this agent's embedded worker serves
                the run unless `embedded_worker=False`). Temporal holds the
                decision for the run: a worker that picks the run up applies it.
        """
        return Runtime.get().run_sync(
            self._decide(run_id, *make_decision(call_id, True, reason, by, turn))
        )

    def deny(
        self,
        run_id: str,
        call_id: str | PendingApproval,
        reason: str | None = None,
        *,
        by: str | None = None,
        turn: int | None = None,
    ) -> dict[str, Any]:
        """Deny a waiting tool call; the model is told, with the reason (blocking).

        Same arguments, result and errors as `approve`.
        """
        return Runtime.get().run_sync(
            self._decide(run_id, *make_decision(call_id, False, reason, by, turn))
        )

    async def aapprove(
        self,
        run_id: str,
        call_id: str | PendingApproval,
        reason: str | None = None,
        *,
        by: str | None = None,
        turn: int | None = None,
    ) -> dict[str, Any]:
        """Async `approve`."""
        return await self._decide_within(None, run_id, call_id, True, reason, by, turn)

    async def adeny(
        self,
        run_id: str,
        call_id: str | PendingApproval,
        reason: str | None = None,
        *,
        by: str | None = None,
        turn: int | None = None,
    ) -> dict[str, Any]:
        """Async `deny`."""
        return await self._decide_within(None, run_id, call_id, False, reason, by, turn)

    async def _decide_within(
        self,
        patience: float | None,
        run_id: str,
        call: str | PendingApproval,
        approved: bool,
        reason: str | None = None,
        by: str | None = None,
        turn: int | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """`aapprove`/`adeny`, a worker given `patience` seconds to take the decision once
        it is sent (serve's routes): a bound around the whole call counted the reads of
        history before it, and a server outage, and cancelled a decision never sent.
        `request_id`: the decision's own id (`send_decision`), when its sender names it."""
        return await Runtime.get().run_async(
            self._decide(
                run_id,
                *make_decision(call, approved, reason, by, turn),
                patience=patience,
                request_id=request_id,
            )
        )

    def serve(self, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
        """Serve this agent over HTTP and A2A until stopped: `agentor_temporal.serve.serve`.

        Needs the `serve` extra (`pip install 'agentor-temporal[serve]'`).
        """
        from agentor_temporal.serve import serve

        serve([self], host=host, port=port, **options)

    def ui_url(self, run_id: str) -> str:
        """The Temporal UI page of a run on the embedded dev server."""
        from agentor_temporal.connection import DEV_UI_PORT

        return f"http://localhost:{DEV_UI_PORT}/namespaces/default/workflows/{run_id}"

    # -- internals (on the runtime loop) ---------------------------------------------------

    async def _client(self) -> Client:
        keys = self.encryption_keys if self.encryption_keys is not None else keys_from_env()
        return await Runtime.get().client(self.temporal, self.tracing, keys)

    @contextlib.asynccontextmanager
    async def _serving(self, client: Client) -> AsyncIterator[None]:
        if not self.embedded_worker:
            yield
            return
        async with Runtime.get().worker_for(client, self.task_queue, self.definition):
            yield

    @property
    def _pauses(self) -> bool:
        """Whether runs of this agent can stop to wait for a person."""
        return any(t.requires_approval for t in self.tools)

    async def _decide(
        self,
        run_id: str,
        decision: Decision,
        execution_run_id: str | None = None,
        patience: float | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Deliver `decision`, waiting `patience` seconds (default `DECISION_PATIENCE`) for a
        worker to take it, counted once this agent's embedded worker serves the run: its
        start (imports, the sandbox check: 20 s on a loaded machine) is not a worker's wait."""
        validate_run_id(run_id)
        client = await self._client()
        try:
            await riding_outages(
                lambda: check_waiting(client, run_id, call_id=decision.call_id),
                client,
                what=f"checking that run {run_id!r} waits for a decision",
            )
        except KeyError:
            # a run the server lost (it came back empty) that the mirror still has
            gone = await mirrored_only(client, run_id, self.store)
            if gone is not None:
                raise gone from None
            raise
        # the decision is taken by the workflow, so a worker must be polling
        async with self._serving(client):
            if patience is None:
                patience = policies.DECISION_PATIENCE.total_seconds()
            try:
                # a bound on the worker, not on a server outage (ridden out apart)
                return await send_decision(
                    client,
                    run_id,
                    decision,
                    execution_run_id,
                    patience=patience,
                    request_id=request_id,
                )
            except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11
                raise TimeoutError(undelivered(run_id, decision.call_id, patience)) from None

    async def _result(self, client: Client, run_id: str) -> RunResult:
        """Wait for the run's latest execution (or its pause) and build its `RunResult`.

        Raises:
            KeyError: when the run is gone from Temporal meanwhile (the server came
                back empty), saying whether the store can restore it.
        """
        try:
            return await riding_outages(
                lambda: await_result(
                    client,
                    run_id,
                    pauses=self._pauses,
                    events_of=lambda s: self._events(run_id, s),
                ),
                client,
                what=f"waiting for run {run_id!r}",
                run_id=run_id,
            )
        except RPCError as exc:
            if not_found(exc):
                raise await run_gone(client, run_id, self.store) from None
            raise

    async def _events(self, run_id: str, segments: list[Segment]) -> list[Event]:
        """The run's whole log: Temporal's segments, after any store-seeded prefix."""
        client = await self._client()
        events, _ = await run_events(run_id, segments, self.store, client=client)
        return events

    async def _store_events(self, run_id: str) -> list[Event]:
        if self.store is None:
            return []
        return await in_thread(read_events, self.store, run_id)
