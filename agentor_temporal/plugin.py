"""`AgentorPlugin`: agent runs in any Temporal worker, as one `plugins=[...]` entry.

    worker = Worker(client, task_queue="orders", workflows=[OrderWorkflow],
                    activities=[charge], plugins=[AgentorPlugin(agents=[weather])])

The plugin owns everything a worker needs for agent runs, so nothing else is
wired by hand: the `AgentRun` workflow and its activities (bound to the
plugin's agents), the sandbox passthrough for our stateless modules (added to
whatever sandboxed runner the worker already has, never replacing it),
worker tuning where the worker was left at the SDK's defaults, and the
AgentName/AgentModel/ForkedFrom search attributes, registered when the
worker starts.
It also works on `Client.connect(..., plugins=[...])` (workers built on that
client inherit it) and on `Replayer(..., plugins=[...])`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentor_temporal.activities import AgentActivities, AgentDefinition, AgentRegistry
from agentor_temporal.store import Store
from agentor_temporal.workflows import AgentRunWorkflow
from agentor_temporal.workflows.policies import (
    GRACEFUL_SHUTDOWN,
    MAX_CACHED_WORKFLOWS,
    MAX_CONCURRENT_ACTIVITIES,
    MAX_CONCURRENT_LOCAL_ACTIVITIES,
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

#: Search attributes the workflow sets, so runs can be found by agent (and a
#: run's forks by the run they were forked from).
SEARCH_ATTRIBUTES = {
    "AgentName": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "AgentModel": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "ForkedFrom": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}

#: The SDK's defaults, which the plugin replaces with ours (a value the user
#: set is left alone).
_SDK_STICKY_TIMEOUT = timedelta(seconds=10)
_SDK_CACHE_SIZE = 1000


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
    and activity slots bound how far a busy worker accepts calls ahead of
    starting them.
    """
    if config.get("sticky_queue_schedule_to_start_timeout") in (None, _SDK_STICKY_TIMEOUT):
        config["sticky_queue_schedule_to_start_timeout"] = STICKY_QUEUE_TIMEOUT
    if config.get("tuner") is None:
        if config.get("max_concurrent_activities") is None:
            config["max_concurrent_activities"] = MAX_CONCURRENT_ACTIVITIES
        if config.get("max_concurrent_local_activities") is None:
            config["max_concurrent_local_activities"] = MAX_CONCURRENT_LOCAL_ACTIVITIES
    if config.get("max_cached_workflows") in (None, _SDK_CACHE_SIZE):
        config["max_cached_workflows"] = MAX_CACHED_WORKFLOWS
    if not config.get("graceful_shutdown_timeout"):
        config["graceful_shutdown_timeout"] = GRACEFUL_SHUTDOWN
    return config


async def ensure_search_attributes(client: Client, registry: AgentRegistry | None = None) -> bool:
    """Register AgentName/AgentModel/ForkedFrom where missing; report whether they exist.

    A workflow that upserts an unregistered attribute fails its task forever,
    so runs only set them when this returned True for their worker.
    """
    try:
        listing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        have = set(listing.custom_attributes) | set(listing.system_attributes)
        missing = {k: v for k, v in SEARCH_ATTRIBUTES.items() if k not in have}
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
            )
            logger.info("Registered search attributes %s", ", ".join(sorted(missing)))
        ok = True
    except Exception as exc:  # e.g. no permission on a managed cluster
        logger.warning(
            "Search attributes %s are unavailable (%s); runs will not set them. Register "
            "them with: temporal operator search-attribute create --name AgentName "
            "--type Keyword (and the others)",
            "/".join(SEARCH_ATTRIBUTES),
            exc,
        )
        ok = False
    if registry is not None:
        registry.search_attributes = ok
    return ok


class AgentorPlugin(SimplePlugin):
    """Serve agent runs from any worker: `Worker(..., plugins=[AgentorPlugin(agents=[...])])`.

    Args:
        agents: `Agentor`s (or `AgentDefinition`s) this worker runs, by name.
        store: mirror for agents that have no store of their own.
        tune_worker: replace the SDK's default worker sizing with ours
            (sticky timeout, activity slots, cache size, graceful shutdown);
            values the worker was given explicitly are always kept.
    """

    def __init__(
        self,
        agents: Sequence[Any] | AgentRegistry = (),
        *,
        store: Store | None = None,
        tune_worker: bool = True,
    ) -> None:
        if isinstance(agents, AgentRegistry):
            self.registry = agents
            if store is not None:
                self.registry.default_store = store
        else:
            self.registry = AgentRegistry([definition_of(a) for a in agents], default_store=store)
        self.tune_worker = tune_worker
        super().__init__(
            "agentor_temporal.AgentorPlugin",
            workflows=[AgentRunWorkflow],
            activities=AgentActivities(self.registry).all(),
            workflow_runner=with_passthrough,
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the workflow, activities and passthrough; tune what is at SDK defaults."""
        config = super().configure_worker(config)
        return tune(config) if self.tune_worker else config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Register the search attributes runs set, then run the worker."""
        if not self.registry.search_attributes:
            await ensure_search_attributes(worker.client, self.registry)
        await super().run_worker(worker, next)
