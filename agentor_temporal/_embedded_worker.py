"""An embedded worker: one per client and task queue in a process, shared by the agents
that call through it, started at the first call and stopped after the last one lingers.

The `Runtime` (`_runtime.py`) owns these on its loop and drains them at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib

from temporalio.client import Client
from temporalio.worker import Worker

from agentor_temporal.activities import AgentDefinition, AgentRegistry

__all__ = ["WORKER_LINGER", "EmbeddedWorker"]

#: An embedded worker stays up this long after its last call ends, so a
#: script making calls in a row does not pay a worker start for each.
WORKER_LINGER = 2.0


class EmbeddedWorker:
    """A worker on one client and task queue, shared by the agents using it."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self.registry = AgentRegistry()
        self.users = 0
        #: users whose call is made inside an activity (an agent used as a tool): the call
        #: that activity belongs to waits on them, so a drain lets them end first
        self.nested = 0
        self.unnested = asyncio.Event()
        self.unnested.set()
        self.worker: Worker | None = None
        self.task: asyncio.Task[None] | None = None
        self.idle: asyncio.TimerHandle | None = None
        #: shutting down (its calls in flight still finishing), after `worker` was let go
        self.stopping = False
        # starting and stopping await; without this, concurrent first calls
        # would each start a worker (the SDK refuses a second one per queue)
        self.lock = asyncio.Lock()

    async def acquire(self, agent: AgentDefinition, nested: bool = False) -> None:
        self.registry.register(agent)
        self.users += 1
        if nested:
            self.nested += 1
            self.unnested.clear()
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        async with self.lock:
            if self.worker is None:
                # the plugin's imports and the worker's build run in a thread: they take 1-4 s
                # (the model client's modules, the workflow's check in its sandbox), which on
                # this loop held every other call and heartbeat of the process, and `python
                # -X dev` said "Executing <Task ...> took 1.6 seconds" at each first call
                await asyncio.to_thread(importlib.import_module, "agentor_temporal.plugin")
                from agentor_temporal.plugin import ensure_search_attributes

                # registered before the first run starts: runs started now set them
                await ensure_search_attributes(self.client, self.registry)
                self.worker = await asyncio.to_thread(self._build)
                self.task = asyncio.create_task(self.worker.run())

    def _build(self) -> Worker:
        from agentor_temporal.plugin import AgentorPlugin
        from agentor_temporal.telemetry import client_traces

        return Worker(
            self.client,
            task_queue=self.task_queue,
            # the worker traces runs exactly when its client traces starts
            plugins=[AgentorPlugin(self.registry, tracing=client_traces(self.client))],
        )

    def release(self, nested: bool = False) -> None:
        self.users -= 1
        if nested:
            self.nested -= 1
            if self.nested == 0:
                self.unnested.set()
        if self.users == 0:
            loop = asyncio.get_running_loop()
            self.idle = loop.call_later(
                WORKER_LINGER, lambda: loop.create_task(self.stop_if_idle())
            )

    async def stop_if_idle(self) -> None:
        if self.users == 0 and self.worker is not None:
            await self.stop()

    async def stop(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        async with self.lock:
            worker, task = self.worker, self.task
            self.worker, self.task = None, None
            self.stopping = worker is not None
            try:
                if worker is not None:
                    with contextlib.suppress(Exception):
                        await worker.shutdown()
                if task is not None:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await task
            finally:
                self.stopping = False
            await self.registry.close_clients()
