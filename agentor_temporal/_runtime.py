"""One long-lived event loop per process, owning clients and embedded workers.

A temporalio worker, an `AsyncOpenAI` client and the streams built on them are
bound to the loop they were made on; Agentor 0.1.1 runs each sync call in a
fresh `asyncio.run()` and so breaks on the second call ("Event loop is
closed"). Here every call, sync or async, runs on one background loop in a
daemon thread: sync methods submit to it and block, async methods await it
from whatever loop they are on. At exit the loop waits for the non-daemon
threads still calling in, then drains its workers. A child forked before the
parent's first call starts a loop of its own; one forked after it is refused
(`FORKED_AFTER_CORE`): Temporal's core is not fork-safe.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import concurrent.futures.thread
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client

from agentor_temporal._embedded_worker import EmbeddedWorker
from agentor_temporal._ending import end_by, say_line
from agentor_temporal._exit import (
    EXIT_SETTLE,
    Callers,
    Interruptions,
    at_interpreter_exit,
    calls_grace,
    exit_drain,
)
from agentor_temporal._loop_death import run_forever_kept
from agentor_temporal._sigterm import (
    blocking_main,
    draining_on_sigterm,
    ending_signal,
    patient_exit,
)
from agentor_temporal.activities import AgentDefinition
from agentor_temporal.codec import EncryptionKeys
from agentor_temporal.telemetry import with_caller_context

T = TypeVar("T")
logger = logging.getLogger("agentor_temporal")


def refuse_at_exit(coro: Coroutine[Any, Any, Any]) -> None:
    """Refuse an agent call made once the interpreter's thread pools refuse work.

    That is during exit, after the exit hooks (an `atexit` handler's call, say):
    the embedded worker's workflow tasks need a thread pool, so the run's
    first task failed again and again, and the process waited for ever.

    Raises:
        RuntimeError: saying so, before anything starts.
    """
    if getattr(concurrent.futures.thread, "_shutdown", False):
        coro.close()
        raise RuntimeError(
            "an agent call while the interpreter exits (from an atexit handler, or a "
            "thread once the main thread has ended) cannot run: its thread pools refuse "
            "new work, which this process's worker needs; make the call before the script "
            "ends (or keep the main thread until the thread's calls are made: join it)"
        )


class Runtime:
    """The process's background loop (use `Runtime.get()`)."""

    _instance: Runtime | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._closed = False
        self.thread = threading.Thread(
            target=run_forever_kept,
            args=(self.loop, lambda: self._closed),
            name="agentor-temporal",
            daemon=True,
        )
        self.thread.start()
        self._clients: dict[tuple[str, bool, EncryptionKeys | None], Client] = {}
        self._client_lock: asyncio.Lock | None = None
        self._workers: dict[tuple[int, str], EmbeddedWorker] = {}
        self._callers = Callers()
        #: set by the exit hook: calls cut off from now on are the interpreter's exit
        self._exiting = False
        #: what a script's own signal handler raised into the exit hook's waits
        self._raised = Interruptions(calls_grace)
        at_interpreter_exit(self._at_exit)

    @classmethod
    def get(cls) -> Runtime:
        """The process-wide runtime, started on first use."""
        with cls._guard:
            if cls._instance is None:
                if _core_stale:
                    raise RuntimeError(FORKED_AFTER_CORE)
                cls._instance = Runtime()
            return cls._instance

    # -- running coroutines ------------------------------------------------------

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the background loop and block until it is done."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError(
                "sync agent methods cannot be called from a tool or worker; "
                "await the async variant instead"
            )
        refuse_at_exit(coro)
        future = asyncio.run_coroutine_threadsafe(with_caller_context(coro), self.loop)
        try:
            with self._callers.calling(), blocking_main(), draining_on_sigterm():
                return future.result()
        except KeyboardInterrupt:
            # the run itself carries on in Temporal; only this wait stops. Ctrl+C
            # reaches the caller as Python's KeyboardInterrupt, its traceback
            # ending here rather than in the wait's locks or the drain's handler
            future.cancel()
            raise KeyboardInterrupt from None
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            if not self._exiting:
                raise
            raise self.cut_off() from None

    def cut_off(self) -> SystemExit:
        """Say that the interpreter's exit cut off the current thread's call; what to raise.

        A daemon thread (the interpreter waits for no other), or one the exit hook stopped
        waiting for at an interrupt, cut off at exit: its call went back to Temporal, and a
        traceback from deep inside would read as a crash. SystemExit ends the thread quietly.
        """
        current = threading.current_thread()
        kind = "daemon thread" if current.daemon else "thread"
        say_line(
            f"agentor_temporal: the interpreter exited while {kind} {current.name!r} "
            "was in an agent call; the call was cut off and its run stays in Temporal "
            "(`resume` it by its run id)"
        )
        return SystemExit(1)

    def calling(self) -> contextlib.AbstractContextManager[None]:
        """Note the current thread as in a call while the body runs: the exit hook lets it
        finish first (`Callers`), as a non-daemon thread's call must."""
        return self._callers.calling()

    @property
    def exiting(self) -> bool:
        """Whether the exit hook has begun: calls cut off from now on are the interpreter's exit."""
        return self._exiting

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the background loop from any loop."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return await coro
        refuse_at_exit(coro)
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            with_caller_context(coro), self.loop
        )
        with self._callers.calling(), draining_on_sigterm():
            return await asyncio.wrap_future(future)

    # -- clients and workers (call on the background loop) -----------------------

    async def client(
        self,
        target: str | Client | None,
        tracing: bool | None = False,
        encryption_keys: EncryptionKeys | None = None,
    ) -> Client:
        """A connected client for `target`, made once per target, tracing and keys.

        With `tracing` (None: as the OTEL_* environment says), the client
        carries the caller's trace context into the runs it starts. A
        `Client` given as the target is used as it is, or copied (sharing its
        connection) with Temporal's tracing interceptor and the keys' codec
        added, never changed; the copy is made once, because the embedded
        worker is keyed by its client.
        """
        from agentor_temporal import telemetry
        from agentor_temporal.connection import connect, with_encryption

        traced = tracing is not False and telemetry.worker_tracing(tracing) is not None
        add_tracing = traced and not (
            isinstance(target, Client) and telemetry.client_traces(target)
        )
        if isinstance(target, Client) and not add_tracing and encryption_keys is None:
            return target
        if self._client_lock is None:
            self._client_lock = asyncio.Lock()
        key = (
            f"{id(target)}" if isinstance(target, Client) else target or "",
            traced,
            encryption_keys,
        )
        async with self._client_lock:
            client = self._clients.get(key)
            if client is None:
                if isinstance(target, Client):
                    config = target.config()
                    if add_tracing:
                        config["interceptors"] = [
                            *config["interceptors"],
                            telemetry.otel_interceptor(),
                        ]
                    client = Client(**config)
                    if encryption_keys is not None:
                        client = with_encryption(client, encryption_keys)
                else:
                    interceptors = [telemetry.otel_interceptor()] if traced else []
                    client = await connect(
                        target, interceptors=interceptors, encryption_keys=encryption_keys
                    )
                self._clients[key] = client
            return client

    @contextlib.asynccontextmanager
    async def worker_for(
        self, client: Client, task_queue: str, agent: AgentDefinition
    ) -> AsyncIterator[None]:
        """Keep an embedded worker serving `agent` while the body runs."""
        key = (id(client), task_queue)
        embedded = self._workers.get(key)
        if embedded is None:
            embedded = self._workers[key] = EmbeddedWorker(client, task_queue)
        # the caller's context came with the call: inside a tool (or any activity) means
        # an outer call waits on this one (`stop_workers`)
        nested = activity.in_activity()
        await embedded.acquire(agent, nested)
        try:
            yield
        finally:
            embedded.release(nested)

    def serving(self) -> bool:
        """Whether an embedded worker is running, or stopping (callable from any thread)."""
        # list() copies under the GIL: the loop thread may add a worker meanwhile
        return any(w.worker is not None or w.stopping for w in list(self._workers.values()))

    def stop_workers(self, timeout: float | None = None) -> None:
        """Stop every embedded worker now, finishing in-flight work.

        Call it while the Temporal server is still reachable (a test suite's
        teardown, say): a worker torn down with the interpreter can leave the
        SDK's core threads calling back into a finalizing Python.

        Args:
            timeout: Seconds to wait; default `exit_drain()` (the workers'
                graceful shutdown and a margin).
        """
        if not self.loop.is_running() or threading.current_thread() is self.thread:
            return

        async def stop_all() -> None:
            # A worker serving a call made inside an activity (an agent used as another's
            # tool) serves on until that call ends, within the calls' grace: the outer call
            # waits on its run, so stopping both at once cut the outer call off when the
            # grace ran out, and the next worker ran it again. Kept in `_workers`
            # meanwhile, so a call on its queue joins it rather than starting another.
            until = self.loop.time() + calls_grace()

            async def stop(key: tuple[int, str], worker: EmbeddedWorker) -> None:
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await asyncio.wait_for(
                        worker.unnested.wait(), max(0.0, until - self.loop.time())
                    )
                if self._workers.get(key) is worker:
                    del self._workers[key]
                await worker.stop()

            # a worker started meanwhile (an inner agent's first call) is stopped too
            while self._workers:
                await asyncio.gather(*(stop(k, w) for k, w in list(self._workers.items())))

        with contextlib.suppress(Exception):
            self._result(
                asyncio.run_coroutine_threadsafe(stop_all(), self.loop),
                exit_drain() if timeout is None else timeout,
            )

    def _result(self, future: concurrent.futures.Future[T], timeout: float) -> T:
        """`future.result(timeout)`; at exit, through what a script's signal handler raises
        meanwhile (`Interruptions`): the waits of the exit hook's drain are not cut short."""
        if self._exiting:
            return self._raised.result(future, timeout)
        return future.result(timeout)

    def _at_exit(self) -> None:
        """The exit hook: let the other threads that call agents finish, then `close`."""
        from agentor_temporal._live import say_left_open  # _live imports this module

        if self._closed:
            return
        self._exiting = True
        # the interrupts are patient while the other threads finish too: a
        # SIGTERM then, with the default handler, cut off the call a thread's
        # run had on this process's worker, and the next worker ran it again.
        # The first one ends that wait; the calls in flight are drained.
        ended_by: list[signal.Signals] = []

        def noted(signum: signal.Signals) -> None:
            ended_by.append(signum)
            self._callers.stop_waiting()

        draining = self.serving() or self._callers.waiting()
        try:
            with self._raised.guarding(draining), patient_exit(draining, noted):
                self._callers.join(self._raised)
                # every caller still waiting now is cut off by `close` (a daemon thread, a
                # thread an interrupt stopped the wait for): its run is named too
                say_left_open(self, ending=True)
                self.close()
        except KeyboardInterrupt:
            # a second Ctrl+C: the calls are abandoned (the next worker runs them
            # again), and the process ends as the default's KeyboardInterrupt does,
            # not with a traceback from this hook
            end_by(signal.SIGINT)
        if ended_by:
            # a signal handled ends the process as its default would (exit status
            # 128 + signum, as during a call), once the threads Python waits for end
            atexit.register(end_by, ending_signal(ended_by))

    def close(self, timeout: float | None = None) -> None:
        """Stop embedded workers, then the loop and its thread (runs at exit).

        Safe to call more than once and from any thread but the loop's.

        Args:
            timeout: Seconds to wait for the workers; default `exit_drain()`,
                their graceful shutdown (`AGENTOR_GRACEFUL_SHUTDOWN`) and a margin.
        """
        if self._closed or threading.current_thread() is self.thread:
            return
        self._closed = True
        if self.loop.is_running():
            # still the process's runtime meanwhile: a call the drained calls make (an
            # agent used as a tool) joins its workers, which serve it; one made elsewhere
            # started a second runtime mid-exit, whose worker took the outer run's tasks
            self.stop_workers(exit_drain() if timeout is None else timeout)
        with Runtime._guard:
            if Runtime._instance is self:
                Runtime._instance = None
        if not self.loop.is_running():
            return

        async def cancel_rest() -> None:
            current = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not current]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            # the core threads finish the futures just dropped while the
            # interpreter is whole (see EXIT_SETTLE); the loop runs meanwhile,
            # so their results land on it rather than on a closed loop
            await asyncio.sleep(EXIT_SETTLE)
            self._clients.clear()

        with contextlib.suppress(Exception):
            self._result(asyncio.run_coroutine_threadsafe(cancel_rest(), self.loop), 10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._exiting:
            self._raised.join(self.thread, 10.0)
        else:
            self.thread.join(10.0)
        if not self.thread.is_alive():
            with contextlib.suppress(Exception):
                self.loop.close()


# -- os.fork() ----------------------------------------------------------------------------

#: What a forked child inherited from its parent's runtime: the background
#: loop's thread and the Temporal core's threads did not survive the fork, so
#: a call on them in the child waited forever, and the exit hook waited 50 s
#: on a loop nothing runs. Kept here, never collected: dropping the core's
#: objects joins threads the child does not have.
_INHERITED: list[object] = []
#: Whether this process was forked after its parent started a Temporal core.
_core_stale = False

#: Why a child forked after its parent's first agent call cannot make one.
#: The core (Rust) keeps a process-wide table of its parked threads
#: (`parking_lot`); the parent's were parked at the fork, and glibc frees
#: their thread-local memory when the child's new threads reuse their
#: stacks, so a child with a core of its own crashed at random (SIGSEGV,
#: "free(): invalid pointer", or a lost wake-up: 5 children in 60 with
#: temporalio alone). No state of ours can mend that table.
FORKED_AFTER_CORE = (
    "agentor_temporal cannot run agents in a process forked (os.fork(), or multiprocessing "
    "with the 'fork' start method) after its parent started Temporal's core: the core is not "
    "fork-safe, and a child using it crashes at random. Start the child with "
    "multiprocessing.get_context('spawn') (or 'forkserver'), or fork before the parent's "
    "first agent call or Temporal connection."
)


def _parent_core_started() -> bool:
    """Whether this process has a Temporal core runtime (and so its threads), as far as known."""
    core = sys.modules.get("temporalio.runtime")
    ref = getattr(core, "_runtime_ref", None)
    return getattr(ref, "_default_runtime", None) is not None


def _after_fork_in_child() -> None:
    """Forget the parent's runtime in a forked child; the first call there is refused
    (`FORKED_AFTER_CORE`) if the parent had started Temporal's core."""
    global _core_stale
    Runtime._guard = threading.Lock()  # another thread may have held it at the fork
    runtime = Runtime._instance
    Runtime._instance = None
    if runtime is not None:
        runtime._closed = True  # its exit hook: nothing of it runs here
        _INHERITED.append(runtime)
    if runtime is not None or _parent_core_started():
        _core_stale = True


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
