"""A run's spec from a worker in its starter's own process, with no describe step.

Every segment records its agent's spec at its start. Asked of the worker
(the `describe_agent` local activity), that costs each run a local activity
and a workflow activation before its first model request. A process that
starts a run and also runs a worker for the run's task queue (`Agentor.run`
beside its embedded worker, or a service hosting both) knows what that
worker would answer: `spec_header` puts it in a header of the run's start
(history keeps it in the start event; unlike a memo it costs no visibility
writes, measured at ~9 ms of server CPU per run), and the worker that takes
the run's first task uses it when its own spec for the agent is the same
(`workflows.segment.header_spec`). With eager start that task comes
back to this very worker. A worker elsewhere whose spec differs (another
build, other settings) runs the describe step as before.

`offer` registers a worker's registry for the starters of its process (and
`withdraw` when it stops); `WorkerFacts` hands each run the spec its own worker has (and
whether its results may carry the run's last events, `JOURNAL_IN_RESULT`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, OutboundInterceptor, StartWorkflowInput, WorkflowHandle
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from agentor_temporal.activities import AgentActivities
from agentor_temporal.activities.journal import spec_of
from agentor_temporal.activities.registry import AgentRegistry
from agentor_temporal.codec import writes_payloads_as_they_are
from agentor_temporal.workflows import policies
from agentor_temporal.workflows.agent_run import AgentRunWorkflow
from agentor_temporal.workflows.segment import canonical
from agentor_temporal.workflows.types import AgentSpec

logger = logging.getLogger("agentor_temporal.worker")

#: A spec larger than this, encoded, is not sent in a header (the describe step
#: records any spec)
MAX_HEADER_SPEC_BYTES = 32 * 1024

_lock = threading.Lock()
#: task queue -> the registries of this process's workers for it (weakly: a
#: worker built and never run goes with its registry)
_serving: dict[str, list[weakref.ref[AgentRegistry]]] = {}


def offer(task_queue: str, registry: AgentRegistry) -> None:
    """Let this process's starters read a worker's specs (from when it is built).

    From when it is built, not when it starts to poll: an embedded worker
    is started, and the run started beside it, before its poll loop runs.
    """
    with _lock:
        offered = _serving.setdefault(task_queue, [])
        if not any(r() is registry for r in offered):
            offered.append(weakref.ref(registry))


def withdraw(task_queue: str, registry: AgentRegistry) -> None:
    """A worker stopped: its specs no longer go with the runs this process starts."""
    with _lock:
        kept = [r for r in _serving.get(task_queue, []) if r() is not None and r() is not registry]
        if kept:
            _serving[task_queue] = kept
        else:
            _serving.pop(task_queue, None)


@contextmanager
def serving(task_queue: str, registry: AgentRegistry) -> Iterator[None]:
    """`offer` while the body runs, then `withdraw`."""
    offer(task_queue, registry)
    try:
        yield
    finally:
        withdraw(task_queue, registry)


def starter_spec(task_queue: str, agent: str, fingerprint: str | None) -> AgentSpec | None:
    """The spec this process's workers for `task_queue` would record, if they all agree."""
    with _lock:
        registries = [r() for r in _serving.get(task_queue, ())]
    specs = [spec_of(r, agent, fingerprint) for r in registries if r is not None]
    if not specs or any(spec is None for spec in specs):
        return None
    first = specs[0]
    assert first is not None
    if any(canonical(spec) != canonical(first) for spec in specs[1:] if spec is not None):
        return None
    return first if len(canonical(first).encode()) <= MAX_HEADER_SPEC_BYTES else None


def spec_header(
    client: Client, task_queue: str, agent: str, fingerprint: str | None
) -> Payload | None:
    """The header a run starts with: its spec, when a worker here has it (else None).

    Not with a payload codec that changes payloads: Temporal does not pass
    headers through it, and an encrypted app's spec (its instructions) must
    not be written in clear.
    """
    if not writes_payloads_as_they_are(client.data_converter):
        return None
    try:
        spec = starter_spec(task_queue, agent, fingerprint)
    except Exception:
        # only ever a saving: the run's worker is asked instead
        logger.debug("No spec for the header of a run of %r", agent, exc_info=True)
        return None
    if spec is None:
        return None
    return Payload(metadata={"encoding": b"json/plain"}, data=canonical(spec).encode())


#: the header the next start in this context sends (`headed`)
_sending: ContextVar[Payload | None] = ContextVar("agentor_spec_header", default=None)
_headed: weakref.WeakKeyDictionary[Client, Client] = weakref.WeakKeyDictionary()


@contextmanager
def sending(header: Payload | None) -> Iterator[None]:
    """Starts made through `headed(client)` in the body carry `header` (the run's spec)."""
    token = _sending.set(header)
    try:
        yield
    finally:
        _sending.reset(token)


def headed(client: Client) -> Client:
    """`client` (same connection, so eager start still reaches this process's
    worker) with an interceptor that adds the spec header `sending` names."""
    derived = _headed.get(client)
    if derived is None:
        config = client.config(active_config=True)
        config["interceptors"] = [*config["interceptors"], _SpecHeaders()]
        config["plugins"] = []  # already applied to the active config
        derived = _headed[client] = Client(**config)
    return derived


class _SpecHeaders(ClientInterceptor):
    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _AddSpec(next)


class _AddSpec(OutboundInterceptor):
    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        header = _sending.get()
        if header is not None:
            input.headers = {**input.headers, policies.SPEC_HEADER: header}
        return await super().start_workflow(input)


class WorkerFacts(Interceptor):
    """Tells each run what its worker has, and tidies up after one that closes here.

    Args:
        activities: the worker's activities (its registry, its live calls).
        plain_results: whether the worker's payloads keep their metadata (no
            codec, no external storage; `AgentRunWorkflow.plain_results`).
    """

    def __init__(self, activities: AgentActivities, plain_results: bool) -> None:
        self.activities = activities
        self.plain_results = plain_results

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        activities, plain = self.activities, self.plain_results

        def local(agent: str, fingerprint: str | None) -> AgentSpec | None:
            return spec_of(activities.registry, agent, fingerprint)

        class _Facts(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                instance = workflow.instance()
                if not isinstance(instance, AgentRunWorkflow):
                    return await super().execute_workflow(input)
                instance.local_spec = local
                instance.plain_results = plain
                result = await super().execute_workflow(input)
                info = workflow.info()
                try:
                    activities.execution_ended(info.workflow_id, info.run_id)
                except Exception:
                    # tidying up must never fail the run's last workflow task
                    logger.warning("Forgetting run %s failed", info.workflow_id, exc_info=True)
                return result

        return _Facts
