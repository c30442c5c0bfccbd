"""`AgentorPlugin`: agent runs in any Temporal worker, as one `plugins=[...]` entry.

    worker = Worker(client, task_queue="orders", workflows=[OrderWorkflow],
                    activities=[charge], plugins=[AgentorPlugin(agents=[weather])])

The plugin owns everything a worker needs for agent runs, so nothing else is
wired by hand: the `AgentRun` workflow and its activities (bound to the
plugin's agents), the sandbox passthrough for our stateless modules (added to
whatever sandboxed runner the worker already has, never replacing it),
worker tuning where the worker was left at the SDK's defaults, and the
search attributes runs set (AgentName, AgentModel, AgentStatus, AgentTokens,
ForkedFrom), registered when the worker starts.
It also works on `Client.connect(..., plugins=[...])` (workers built on that
client inherit it) and on `Replayer(..., plugins=[...])`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, ClientConfig
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.runtime import Runtime
from temporalio.service import ConnectConfig, RPCError, RPCStatusCode, ServiceClient
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentor_temporal import telemetry
from agentor_temporal._admission import admission
from agentor_temporal._instrument import TelemetryInterceptor, watch_waiting
from agentor_temporal._local_spec import WorkerFacts, offer, withdraw
from agentor_temporal._memory import keep_memory_trimmed, preload, tune_allocator
from agentor_temporal.activities import AgentActivities, AgentDefinition, AgentRegistry
from agentor_temporal.activities._paused_handover import PAUSED_WAIT, hand_over_paused
from agentor_temporal.codec import (
    KeysSetting,
    encrypted_data_converter,
    encryption_codec_of,
    resolve_keys,
    writes_payloads_as_they_are,
)
from agentor_temporal.connection import remember_client
from agentor_temporal.store import Store
from agentor_temporal.workflows import AgentRunWorkflow
from agentor_temporal.workflows.policies import (
    GRACEFUL_SHUTDOWN,
    MAX_CACHED_WORKFLOWS,
    STICKY_QUEUE_TIMEOUT,
)

logger = logging.getLogger("agentor_temporal.worker")

#: Our modules the workflow sandbox shares with the host instead of importing
#: them again for every run, and why each is safe to share.
SANDBOX_PASSTHROUGH = {
    # events, the Store protocol and replay helpers are dataclasses and pure
    # functions; the stores themselves are only ever built outside workflows
    "agentor_temporal.store": "no module state",
    # the workflow, its parts and its contracts: classes, constants and pure
    # functions. Re-importing them per run cost a sixth of a busy worker's
    # CPU in a profile (module execution and dataclass creation)
    "agentor_temporal.workflows": "no module state",
    # run_agent for users' workflows: functions over the contracts above
    "agentor_temporal.workflow": "no module state",
}

#: Search attributes the workflow sets, so runs can be found by agent...
NAME_ATTRIBUTES = {
    "AgentName": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "AgentModel": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}
#: ...by what they are doing (AgentStatus='awaiting_approval') and by what they cost.
STATUS_ATTRIBUTES = {
    "AgentStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "AgentTokens": IndexedValueType.INDEXED_VALUE_TYPE_INT,
}
#: ...and a run's forks by the run they were forked from (ForkedFrom='<run id>').
FORK_ATTRIBUTES = {
    "ForkedFrom": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}
SEARCH_ATTRIBUTES = {**NAME_ATTRIBUTES, **STATUS_ATTRIBUTES, **FORK_ATTRIBUTES}

#: The SDK's defaults, which the plugin replaces with ours (a value the user
#: set is left alone).
_SDK_STICKY_TIMEOUT = timedelta(seconds=10)
_SDK_CACHE_SIZE = 1000
#: Worker options that size slots; any of them set means the user sized the worker.
_SLOT_OPTIONS = (
    "max_concurrent_workflow_tasks",
    "max_concurrent_activities",
    "max_concurrent_local_activities",
    "max_concurrent_nexus_tasks",
)


class ConfigError(Exception):
    """A worker setting is wrong (bad --agents path, not an agent...)."""


def definition_of(obj: Any) -> AgentDefinition:
    """The `AgentDefinition` behind an `Agentor` or a definition itself.

    Raises:
        ConfigError: for anything else.
    """
    if isinstance(obj, AgentDefinition):
        return obj
    definition = getattr(obj, "definition", None)
    if isinstance(definition, AgentDefinition):
        return definition
    raise ConfigError(
        f"{obj!r} is not an agent: expected an agentor_temporal.Agentor (or an AgentDefinition)"
    )


def with_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's runner, with our modules passed through its sandbox.

    A sandboxed runner keeps its own restrictions plus our modules; any
    other runner (unsandboxed, or a custom one) is returned as it is.
    """
    if runner is None:
        runner = SandboxedWorkflowRunner()
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(
            runner,
            restrictions=runner.restrictions.with_passthrough_modules(*SANDBOX_PASSTHROUGH),
        )
    return runner


def tune(config: WorkerConfig) -> WorkerConfig:
    """Our worker sizing, wherever the worker was left at the SDK's default.

    See `workflows/policies.py` for each value's reason: a short sticky
    timeout is what moves a dead worker's runs within the recovery budget,
    and activity slots are granted only while the calls a worker already
    accepted are starting promptly (`agentor_temporal._admission`), so a busy
    worker never holds a call long enough for its heartbeat to time out.
    """
    if config.get("sticky_queue_schedule_to_start_timeout") in (None, _SDK_STICKY_TIMEOUT):
        config["sticky_queue_schedule_to_start_timeout"] = STICKY_QUEUE_TIMEOUT
    sized = ("tuner", *_SLOT_OPTIONS)
    if all(config.get(key) is None for key in sized):
        # slots are granted only while accepted calls start promptly
        tuner, interceptor, _ = admission()
        config["tuner"] = tuner
        config["interceptors"] = [*config.get("interceptors", []), interceptor]
    if config.get("max_cached_workflows") in (None, _SDK_CACHE_SIZE):
        config["max_cached_workflows"] = MAX_CACHED_WORKFLOWS
    if not config.get("graceful_shutdown_timeout"):
        config["graceful_shutdown_timeout"] = graceful_shutdown()
    return config


def graceful_shutdown() -> timedelta:
    """How long a stopping worker waits for the calls it holds.

    `AGENTOR_GRACEFUL_SHUTDOWN` (seconds) where set, else `GRACEFUL_SHUTDOWN`:
    a fleet whose tools run longer than 30 s sets it to match its stop grace,
    so a deploy lets them finish instead of handing them to another worker to
    run again.

    Raises:
        ConfigError: for a value that is not a positive number of seconds.
    """
    raw = os.environ.get("AGENTOR_GRACEFUL_SHUTDOWN", "").strip()
    if not raw:
        return GRACEFUL_SHUTDOWN
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < 86_400:
        raise ConfigError(
            f"AGENTOR_GRACEFUL_SHUTDOWN must be a number of seconds between 0 and 86400, "
            f"got {raw!r}"
        )
    return timedelta(seconds=seconds)


async def ensure_search_attributes(client: Client, registry: AgentRegistry | None = None) -> bool:
    """Register our search attributes where missing; report whether AgentName/AgentModel exist.

    A workflow that upserts an unregistered attribute fails its task forever,
    so runs only set those their worker found (`registry.search_attributes`
    for the names, `registry.status_attributes` for AgentStatus/AgentTokens,
    `registry.fork_attribute` for ForkedFrom: a namespace may have the first
    two and refuse to add more).
    """
    have: set[str] = set()
    try:
        have = await _registered(client)
    except Exception as exc:  # e.g. no permission on a managed cluster
        absent = sorted(set(SEARCH_ATTRIBUTES) - have)
        logger.warning(
            "Search attributes %s are unavailable (%s); runs will not set them. Register "
            "them with: temporal operator search-attribute create --name AgentStatus "
            "--type Keyword (AgentName, AgentModel, ForkedFrom: Keyword; AgentTokens: Int)",
            "/".join(absent),
            exc,
        )
    names = set(NAME_ATTRIBUTES) <= have
    if registry is not None:
        registry.search_attributes = names
        registry.status_attributes = set(STATUS_ATTRIBUTES) <= have
        registry.fork_attribute = set(FORK_ATTRIBUTES) <= have
        registry.attributes_known = True
    return names


#: How long a starting worker waits for an unreachable server to say which
#: search attributes it has (a worker can do nothing without it; a run
#: described while they are unknown would never set them).
ATTRIBUTES_PATIENCE = 60.0


async def _registered(client: Client) -> set[str]:
    """The namespace's search attributes, ours added where missing.

    A server that is restarting or throttling is waited for
    (ATTRIBUTES_PATIENCE); any other refusal is raised at once.
    """
    deadline = asyncio.get_running_loop().time() + ATTRIBUTES_PATIENCE
    delay = 0.2
    while True:
        try:
            listing = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=client.namespace)
            )
            kinds = {**listing.custom_attributes, **listing.system_attributes}
            missing = {k: v for k, v in SEARCH_ATTRIBUTES.items() if k not in kinds}
            if missing:
                await client.operator_service.add_search_attributes(
                    AddSearchAttributesRequest(
                        namespace=client.namespace, search_attributes=missing
                    )
                )
                logger.info("Registered search attributes %s", ", ".join(sorted(missing)))
            return set(missing) | set(kinds) - _mistyped(kinds)
        except RPCError as exc:
            # RESOURCE_EXHAUSTED: a rate limit or an overloaded server, passing as a restart does
            transient = exc.status in (
                RPCStatusCode.UNAVAILABLE,
                RPCStatusCode.DEADLINE_EXCEEDED,
                RPCStatusCode.RESOURCE_EXHAUSTED,
            )
            if not transient or asyncio.get_running_loop().time() + delay > deadline:
                raise
            logger.info("Waiting for Temporal to list search attributes: %s", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def _mistyped(kinds: Mapping[str, int]) -> set[str]:
    """Our attributes the namespace has with another type, each named in a warning.

    A run upserting one fails every workflow task (BadSearchAttributes, retried
    for ever), and a namespace's attribute cannot change its type: runs do not
    set it, nor the one set with it (AgentName with AgentModel, AgentStatus
    with AgentTokens).
    """
    wrong = {
        name: kinds[name]
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name in kinds and kinds[name] != kind
    }
    for name, kind in sorted(wrong.items()):
        logger.warning(
            "Search attribute %s is registered as %s in this namespace, not %s; runs will "
            "not set it. Remove it (temporal operator search-attribute remove --name %s) "
            "to have it registered as %s, or use another namespace",
            name,
            _type_name(kind),
            _type_name(SEARCH_ATTRIBUTES[name]),
            name,
            _type_name(SEARCH_ATTRIBUTES[name]),
        )
    return set(wrong)


def _type_name(kind: int) -> str:
    try:
        name = IndexedValueType.Name(kind)  # type: ignore[arg-type]
    except ValueError:
        return f"type {kind}"
    return name.removeprefix("INDEXED_VALUE_TYPE_").title()


class AgentorPlugin(SimplePlugin):
    """Serve agent runs from any worker: `Worker(..., plugins=[AgentorPlugin(agents=[...])])`.

    Args:
        agents: `Agentor`s (or `AgentDefinition`s) this worker runs, by name.
        store: mirror for agents that have no store of their own.
        tune_worker: replace the SDK's default worker sizing with ours
            (sticky timeout, activity slots, cache size, graceful shutdown);
            values the worker was given explicitly are always kept.
        tracing: OpenTelemetry spans of every run, generation and tool call
            (None: when the OTEL_* environment asks for traces). Needs the
            `otel` extra.
        trace_content: put prompts, answers, tool arguments and results on
            spans (None: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
        metrics_port: serve Prometheus metrics (Temporal's and the agents')
            on this port, or "HOST:PORT". Takes effect where the plugin is
            given to `Client.connect(..., plugins=[...])`, which is where a
            client's runtime is chosen.

    Raises:
        TelemetryError: when tracing is asked for but cannot be set up, or
            the metrics address is not one.
    """

    def __init__(
        self,
        agents: Sequence[Any] | AgentRegistry = (),
        *,
        store: Store | None = None,
        tune_worker: bool = True,
        tracing: bool | None = None,
        trace_content: bool | None = None,
        metrics_port: int | str | None = None,
        encryption_keys: KeysSetting = None,
    ) -> None:
        if isinstance(agents, AgentRegistry):
            self.registry = agents
            if store is not None:
                self.registry.default_store = store
        else:
            self.registry = AgentRegistry([definition_of(a) for a in agents], default_store=store)
        self.bundle = AgentActivities(self.registry)
        self.tune_worker = tune_worker
        self.trace = telemetry.worker_tracing(tracing, trace_content)
        self.metrics_address = (
            telemetry.metrics_address(metrics_port) if metrics_port is not None else None
        )
        self._runtime: Runtime | None = None
        # explicit keys only: a plugin does not read the environment for them
        self.keys = resolve_keys(encryption_keys) if encryption_keys is not None else None
        super().__init__(
            "agentor_temporal.AgentorPlugin",
            workflows=[AgentRunWorkflow],
            activities=self.bundle.all(),
            workflow_runner=self._runner,
            data_converter=self._converter if self.keys is not None else None,
        )

    def _converter(self, converter: DataConverter | None) -> DataConverter:
        return encrypted_data_converter(self.keys, converter)

    def _runner(self, runner: WorkflowRunner | None) -> WorkflowRunner:
        runner = with_passthrough(runner)
        if self.trace is not None and isinstance(runner, SandboxedWorkflowRunner):
            # the tracer and its context live outside the sandbox; a copy
            # inside would lose the spans' parents (what Temporal's plugin does)
            runner = dataclasses.replace(
                runner,
                restrictions=runner.restrictions.with_passthrough_modules("opentelemetry"),
            )
        return runner

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        """On a client: carry the caller's trace context into the runs it starts."""
        config = super().configure_client(config)
        interceptors = list(config.get("interceptors") or [])
        if self.trace is not None and not telemetry.has_otel_interceptor(interceptors):
            config["interceptors"] = [*interceptors, telemetry.otel_interceptor()]
        return config

    async def connect_service_client(
        self, config: ConnectConfig, next: Callable[[ConnectConfig], Awaitable[ServiceClient]]
    ) -> ServiceClient:
        """On a client: run it on a runtime that serves metrics, when asked to."""
        if self.metrics_address is not None:
            if config.runtime is None:
                if self._runtime is None:
                    self._runtime = telemetry.metrics_runtime(self.metrics_address)
                config.runtime = self._runtime
            else:
                logger.warning(
                    "metrics_port=%s ignored: the client was given its own runtime",
                    self.metrics_address,
                )
        return await next(config)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the workflow, activities, passthrough and telemetry; tune what is at SDK defaults."""
        config = super().configure_worker(config)
        client = config["client"]
        # its credentials are secrets of this process: a tool quoting them is masked
        remember_client(client)
        interceptors = list(config.get("interceptors") or [])
        if self.trace is not None and not (
            telemetry.has_otel_interceptor(interceptors) or telemetry.client_traces(client)
        ):
            interceptors.append(telemetry.otel_interceptor())
        interceptors.append(TelemetryInterceptor(self.trace))
        # each run may take its spec from its memo when this worker's is the
        # same, and close with its last events in its result
        plain = writes_payloads_as_they_are(client.data_converter)
        interceptors.append(WorkerFacts(self.bundle, plain))
        if self.registry.attributes_known:
            # the runs this process starts on the worker's queue may carry its
            # specs from now (an embedded worker's first run is started before
            # its poll loop runs)
            offer(config["task_queue"], self.registry)
        config["interceptors"] = interceptors
        if self.keys is not None:
            codec = encryption_codec_of(client.data_converter)
            if codec is None or codec.keys != self.keys:
                raise ConfigError(
                    "encryption_keys needs the plugin on the client: Client.connect(..., "
                    "plugins=[AgentorPlugin(..., encryption_keys=...)]) (workers built on it "
                    "inherit its codec), or a client made with "
                    "agentor_temporal.codec.encrypted_data_converter(keys)"
                )
        if self.metrics_address is not None and telemetry.runtime_meter(client) is None:
            raise ConfigError(
                f"metrics_port={self.metrics_address} needs the plugin on the client: "
                "Client.connect(..., plugins=[AgentorPlugin(..., metrics_port=...)]), or "
                "Client.connect(..., runtime=agentor_temporal.telemetry.metrics_runtime(PORT))"
            )
        # now, not when the worker starts: a run this process starts may hand
        # its first workflow task to the worker at once (eager start), and that
        # task's 5 s clock ran while the worker imported (3-4 s on a loaded
        # machine, and once past the 5 s: a task timed out, a run 5 s late)
        preload()
        return tune(config) if self.tune_worker else config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Register the search attributes runs set, then run the worker.

        While it runs, freed memory is handed back to the OS (see `_memory`).
        """
        if not self.registry.search_attributes:
            await ensure_search_attributes(worker.client, self.registry)
        offer(worker.task_queue, self.registry)
        self.bundle.loop = loop = asyncio.get_running_loop()
        tune_allocator(arenas=False)
        # in a thread: each loads its TLS trust store, which held this loop (an
        # embedded worker's, shared with the script's other calls) past 100 ms
        await asyncio.to_thread(self.registry.open_clients, loop)
        trimming = asyncio.create_task(keep_memory_trimmed())
        meter = telemetry.runtime_meter(worker.client)
        watching = None
        if meter is not None and self.registry.status_attributes:
            watching = asyncio.create_task(watch_waiting(worker.client, self.registry, meter))
        try:
            await super().run_worker(worker, next)
            # a paused call's result lives only here: the unpause's attempt, on
            # another worker, would ask the model or run the tool again
            patience = min(PAUSED_WAIT, graceful_shutdown().total_seconds())
            await hand_over_paused(self.bundle.calls, worker.client, patience)
        finally:
            withdraw(worker.task_queue, self.registry)
            trimming.cancel()
            if watching is not None:
                watching.cancel()
