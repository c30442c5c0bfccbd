"""Builders shared by the tests and by the processes they spawn and kill.

A tool's side effects go to a ledger file (one fsynced line per execution,
with its idempotency key), so a test can count executions across processes
that died.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import forkserver
from forkserver import ForkedPopen
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import PayloadCodec

from agentor_temporal import Agentor, Event, FileStore, function_tool, tool_context
from agentor_temporal.connection import DEV_SEARCH_ATTRIBUTES, temporal_binary

ROOT = Path(__file__).resolve().parent.parent
PROCS = Path(__file__).resolve().parent / "procs"

INSTRUCTIONS = "You are a helpful weather assistant."
PROMPT = "What is the weather in London?"
ANSWER = "Answer based on tool: The weather in London is sunny and 22C."
#: The events of the seed's run: one tool call, then the answer.
SEED_EVENT_TYPES = [
    "run_start",
    "generation",
    "tool_call",
    "tool_result",
    "generation",
    "message",
    "run_end",
]


def ledger_write(path: str | os.PathLike[str] | None, name: str, extra: str = "") -> None:
    """Record one execution of a tool (fsynced: the writer may be killed next)."""
    if not path:
        return
    ctx = tool_context()
    with open(path, "a") as f:
        f.write(f"{name} {ctx.idempotency_key} pid={os.getpid()} attempt={ctx.attempt} {extra}\n")
        f.flush()
        os.fsync(f.fileno())


def ledger_lines(path: str | os.PathLike[str]) -> list[str]:
    """Executions recorded in a ledger file."""
    try:
        return Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []


def weather_tool(
    ledger: str | None = None,
    *,
    delay: float = 0.0,
    delay_city: str | None = None,
    exit_process: bool = False,
    blocking_loop: bool = False,
    gate: str | None = None,
) -> Any:
    """The seed's get_weather, recording each execution in `ledger`.

    `delay` seconds pass after the ledger line (for every city, or only for
    `delay_city`), so a test can kill a process while the tool is in flight;
    with `gate` (a path), the tool answers as soon as that file exists instead.
    `exit_process`: the tool then kills its own process. `blocking_loop`: an
    `async def` tool that sleeps without awaiting (its worker's event loop blocked).
    """
    if blocking_loop:

        @function_tool(name="get_weather")
        async def blocking_weather(city: str) -> str:
            """Get the current weather for a city.

            Args:
                city: The city to look up.
            """
            ledger_write(ledger, "get_weather", city)
            time.sleep(delay)  # blocks the event loop: no await, no cancellation
            return f"The weather in {city} is sunny and 22C."

        return blocking_weather

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        if delay and delay_city in (None, city):
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and not (gate and os.path.exists(gate)):
                time.sleep(min(0.05 if gate else delay, max(0.0, deadline - time.monotonic())))
        if exit_process:
            os._exit(3)
        return f"The weather in {city} is sunny and 22C."

    return get_weather


def weather_agent(
    *,
    base_url: str,
    task_queue: str,
    temporal: Any = None,
    store: Any = None,
    ledger: str | None = None,
    tools: list[Any] | None = None,
    name: str = "Weather Agent",
    instructions: str = INSTRUCTIONS,
    **kwargs: Any,
) -> Agentor:
    """The seed's weather agent, pointed at a test server and model."""
    return Agentor(
        name=name,
        model="gpt-4o-mini",
        instructions=instructions,
        tools=tools if tools is not None else [weather_tool(ledger)],
        store=store,
        base_url=base_url,
        api_key="test-key",
        temporal=temporal,
        task_queue=task_queue,
        **kwargs,
    )


def scripted_agent(model: Any, client: Any, task_queue: str, **kwargs: Any) -> Agentor:
    """`weather_agent` on the test's scripted model (`ScriptedModelServer`) and Temporal client;
    `kwargs` as `weather_agent`'s (store, tools, embedded_worker, ...)."""
    return weather_agent(base_url=model.base_url, task_queue=task_queue, temporal=client, **kwargs)


# -- many-calls runs: one `read_chunk` call a turn, for as many turns as a test needs ---------


def tool_results(request: dict[str, Any]) -> int:
    """How many tool results a model request carries: the calls the run has made so far."""
    return sum(1 for m in request.get("messages") or [] if m.get("role") == "tool")


def chunk_reader(turns: int, more: str | None = None) -> Callable[[dict[str, Any]], Any]:
    """The model: call `read_chunk` until `turns` results are in (ten more for each user
    message `more`), then answer "Read N chunks."."""
    from agentor_temporal.testing import CallTool, Reply

    def respond(request: dict[str, Any]) -> Any:
        done = tool_results(request)
        messages = request.get("messages") or []
        asked = 0 if more is None else sum(1 for m in messages if m.get("content") == more)
        if done < turns + 10 * asked:
            return CallTool("read_chunk", {"n": done + 1}, id=f"call_{done + 1}")
        return Reply(f"Read {done} chunks.")

    return respond


def chunk_tool(ledger: str, size: int) -> Any:
    """`read_chunk(n)`: a result of about `size` bytes; a ledger line "run_id call_id" a call."""

    @function_tool
    def read_chunk(n: int) -> str:
        """Read chunk `n`.

        Args:
            n: Which chunk.
        """
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(f"{tool_context().run_id} {tool_context().call_id}\n")
        return f"chunk {n}: " + "x" * size

    return read_chunk


#: `coder`'s name, for a worker process started with it
CODER_NAME = "Long Coder"


def coder(model: Any, client: Any, task_queue: str, **kwargs: Any) -> Agentor:
    """The many-calls runs' agent, served by the test's own worker (`build_worker`)."""
    return Agentor(
        name=CODER_NAME,
        model="gpt-4o-mini",
        instructions="You are a coding agent.",
        base_url=model.base_url,
        api_key="test-key",
        temporal=client,
        task_queue=task_queue,
        embedded_worker=False,
        **kwargs,
    )


class BlockingStore:
    """A three-method store that freezes (for a SIGKILL) after one event type.

    Writes through to a FileStore, then touches `marker` and sleeps: the
    process is killed exactly after that event reached disk and before the
    run took its next step.
    """

    def __init__(self, directory: str, block_after: str | None, marker: str | None) -> None:
        self.inner = FileStore(directory)
        self.block_after = block_after
        self.marker = marker

    def append(self, run_id: str, event: Event) -> None:
        self.inner.append(run_id, event)
        if self.block_after and event.type == self.block_after and self.marker:
            Path(self.marker).write_text(run_id)
            while True:
                time.sleep(1)

    def load(self, run_id: str) -> list[Event]:
        return self.inner.load(run_id)

    def list_runs(self) -> list[str]:
        return self.inner.list_runs()


def spawn(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    """Start `tests/procs/agent_proc.py` with `args` (forked by `forkserver` when it can)."""
    full_env = dict(os.environ)
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    return ForkedPopen(
        [sys.executable, str(PROCS / "agent_proc.py"), *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=kwargs.pop("stderr", subprocess.PIPE),
        text=True,
        **kwargs,
    )


def worker_cli(
    env: dict[str, str],
    log: Path,
    agents: str,
    *more: str,
    launcher: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> subprocess.Popen[str]:
    """A worker process serving `agents` (a module of tests/procs) on env's
    TEMPORAL_ADDRESS and AGENT_TASK_QUEUE: `python worker.py`, or `python
    LAUNCHER...` (`-m agentor_temporal worker`), after `prefix` (`unshare ...`);
    its stderr written to `log`, its stdout piped (it says "worker ready").
    Forked by `forkserver` when it can (not under a prefix)."""
    full = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(PROCS)]),
        "PYTHONUNBUFFERED": "1",
    }
    return ForkedPopen(
        [
            *prefix,
            sys.executable,
            *(launcher or [str(ROOT / "worker.py")]),
            "--agents",
            agents,
            "--temporal",
            env["TEMPORAL_ADDRESS"],
            "--task-queue",
            env["AGENT_TASK_QUEUE"],
            *more,
        ],
        env=full,
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """Wait for a spawned process and parse the JSON result it printed last."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"process failed ({proc.returncode}):\n{out}\n{err[-4000:]}")
    last = [line for line in out.splitlines() if line.startswith("{")][-1]
    return dict(json.loads(last))


async def history_shows(client: Any, run_id: str, kind: int, timeout: float = 30.0) -> None:
    """Wait until the run's latest execution has an event of `kind` (an EventType)."""
    async with asyncio.timeout(timeout):
        handle = client.get_workflow_handle(run_id)
        while not any(e.event_type == kind for e in (await handle.fetch_history()).events):
            await asyncio.sleep(0.05)


async def cancel_once_asked(client: Any, run_id: str) -> Any:
    """Cancel the run; return its handle once history shows its calls asked to stop."""
    from temporalio.api.enums.v1 import EventType

    handle = client.get_workflow_handle(run_id)
    await handle.cancel()
    await history_shows(client, run_id, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED)
    return handle


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll `predicate` until truthy; fail the test naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def payer(model: Any, client: Any, task_queue: str, ledger: str) -> Agentor:
    """The weather agent with only `transfer_tool` (it waits for approval), served by the
    test's own worker (`build_worker`)."""
    return scripted_agent(
        model, client, task_queue, tools=[transfer_tool(ledger)], embedded_worker=False
    )


def transfer_tool(
    ledger: str | None = None,
    *,
    threshold: float | None = None,
    asking: str | None = None,
    answer_after: str | None = None,
    delay: float = 0,
    **options: Any,
) -> Any:
    """A money transfer that needs a person's approval (above `threshold`, if given).

    `delay`: seconds the transfer takes after its ledger line.

    `asking`, `answer_after`: its predicate creates the file `asking`, then
    answers only once the file `answer_after` exists (a slow lookup; 60 s at most).
    """

    def over(amount: float, to: str = "") -> bool:
        if asking:
            Path(asking).touch()
        deadline = time.monotonic() + 60
        while answer_after and not Path(answer_after).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return threshold is None or amount > threshold

    predicate = threshold is not None or asking is not None

    @function_tool(requires_approval=over if predicate else True, **options)
    def transfer(amount: float, to: str) -> str:
        """Send money.

        Args:
            amount: How much.
            to: To whom.
        """
        ledger_write(ledger, "transfer", f"{amount} {to}")
        time.sleep(delay)
        return f"Sent {amount:g} to {to}."

    return transfer


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on `port`."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class DevServerProcess:
    """A `temporal server start-dev` subprocess on its own ports and database file.

    Unlike the session's server, this one can be SIGKILLed and restarted on
    the same database (a server crash), and it is not shared with other tests.
    """

    def __init__(
        self,
        db: str | os.PathLike[str],
        log: str | os.PathLike[str],
        dynamic: dict[str, Any] | None = None,
    ) -> None:
        self.db = str(db)
        self.log = str(log)
        #: dynamic config values (`frontend.longPollExpirationInterval`: "2s", say)
        self.dynamic = dict(dynamic or {})
        self.port = free_port()
        self.ui_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> DevServerProcess:
        """Start (or restart) the server and wait until its frontend reports SERVING.

        An open port is not yet a server that answers: for a moment after, its
        frontend refuses clients ("Frontend is not healthy yet"), which failed a
        test connecting at once on a loaded machine.
        """
        command = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--headless",
            "--db-filename",
            self.db,
            "--log-level",
            "error",
            *(
                arg
                for name, kind in DEV_SEARCH_ATTRIBUTES.items()
                for arg in ("--search-attribute", f"{name}={kind}")
            ),
            *(
                arg
                for key, value in self.dynamic.items()
                for arg in ("--dynamic-config-value", f"{key}={json.dumps(value)}")
            ),
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not (port_open(self.port) and self.serving()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = Path(self.log).read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the dev server did not come up on {self.address}:\n{tail}")
            time.sleep(0.05)
        return self

    def serving(self) -> bool:
        """Whether the server's frontend reports itself healthy (SERVING)."""
        try:
            done = subprocess.run(
                [temporal_binary(), "operator", "cluster", "health", "--address", self.address],
                capture_output=True,
                text=True,
                timeout=5,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and done.stdout.split()[-1:] == ["SERVING"]

    def kill(self) -> None:
        """SIGKILL the server (a crash: no shutdown, no flush beyond what the OS has)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop the server if it runs (used in `finally` blocks)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> DevServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def connected_to(pid: int, port: int) -> bool:
    """Whether process `pid` holds an open TCP connection to `port` on this host."""
    sockets = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    sockets.add(target[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        # remote address, state (01: established), inode
        if int(fields[2].split(":")[1], 16) == port and fields[3] == "01":
            if fields[9] in sockets:
                return True
    return False


def stop_process(proc: subprocess.Popen[str] | None) -> None:
    """SIGKILL a spawned process if it still runs and reap it (for `finally`)."""
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        try:
            proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass


def wait_line(proc: subprocess.Popen[str], text: str, timeout: float = 60.0) -> None:
    """Block until `proc` prints `text` on stdout (read raw, so the deadline holds)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {text!r}: {seen[-500:]!r}"
            )
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                proc.wait(5)
                raise AssertionError(
                    f"process exited ({proc.returncode}) before printing {text!r}: {seen[-500:]!r}"
                )
            seen += chunk


async def until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """`wait_until` for async tests: polls without blocking the event loop."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def polled(client: Client, task_queue: str, timeout: float = 60.0) -> None:
    """Wait until the server lists a poller of `task_queue`'s workflow tasks: a worker just
    started has not always polled yet (under load, seconds later), and a run started before
    then is, rightly, one whose queue no worker polls."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = time.monotonic() + timeout
    while not (await client.workflow_service.describe_task_queue(request)).pollers:
        if time.monotonic() > deadline:
            raise AssertionError(f"no worker polled {task_queue!r} in {timeout} s")
        await asyncio.sleep(0.05)


def weather_or_transfer(request: dict[str, Any]) -> Any:
    """A model for agents with both tools: weather questions ask for the weather,
    anything else for a transfer (which waits for approval); a tool result is answered."""
    from agentor_temporal.testing import CallTool, Reply

    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(f"Done: {last.get('content')}")
    users = [m for m in messages if m.get("role") == "user"]
    prompt = str(users[-1].get("content") or "") if users else ""
    if "weather" in prompt.lower():
        return CallTool("get_weather", {"city": "Paris"})
    return CallTool("transfer", {"amount": 5, "to": "bob"})


def plain_agent(ledger: str | None = None, **overrides: Any) -> Agentor:
    """The agent of `procs/plain_script.py`: a transfer needing approval, and the weather.

    Built from the environment (as the script is) unless `overrides` say otherwise;
    AGENT_TOOL_SECONDS makes get_weather take that long after its ledger line
    (or until the file AGENT_TOOL_GATE names exists), AGENT_TRANSFER_SECONDS the transfer.
    """
    ledger = ledger if ledger is not None else os.environ.get("AGENT_LEDGER")
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "0"))
    paying = float(os.environ.get("AGENT_TRANSFER_SECONDS", "0"))
    options: dict[str, Any] = {
        "tools": [
            transfer_tool(ledger, delay=paying),
            weather_tool(ledger, delay=delay, gate=os.environ.get("AGENT_TOOL_GATE")),
        ],
        "name": "Plain Agent",
    }
    for key, env in (
        ("base_url", "MODEL_BASE_URL"),
        ("task_queue", "AGENT_TASK_QUEUE"),
        ("temporal", "TEMPORAL_ADDRESS"),
    ):
        if key not in overrides:
            options[key] = os.environ[env]
    if "store" not in overrides:
        store_dir = os.environ.get("AGENT_STORE")
        options["store"] = FileStore(store_dir) if store_dir else None
    options.update(overrides)
    return weather_agent(**options)


def here_agent(ledger: str, model: Any, task_queue: str, client: Client, runs: Path) -> Agentor:
    """`plain_agent` for a worker of the test's own process, on `model` (a scripted model
    server), mirroring to `runs` (a script's runs directory): the next worker after a script
    ended, without a process of its own (~3 s of CPU in imports alone)."""
    return plain_agent(
        ledger,
        base_url=model.base_url,
        task_queue=task_queue,
        temporal=client,
        store=FileStore(runs),
        embedded_worker=False,
    )


async def resume_here(
    client: Client, model: Any, task_queue: str, tmp_path: Path, ledger: str, run_id: str
) -> Any:
    """Resume `run_id` on a worker of the test's own process (`here_agent`, mirroring to
    `tmp_path / "runs"`, the scripts' store); its RunResult."""
    from agentor_temporal.worker import build_worker

    agent = here_agent(ledger, model, task_queue, client, tmp_path / "runs")
    async with build_worker(client, [agent], task_queue=task_queue):
        return await asyncio.wait_for(agent.aresume(run_id), 60)


@function_tool
def pad(data: str, n: int) -> str:
    """Take a lot, give back a lot.

    Args:
        data: Anything.
        n: How many characters to return.
    """
    return "y" * n


async def unwedged_history(client: Any, run_id: str, timeout: float = 30.0) -> Any:
    """The history of run `run_id`'s latest execution once it has closed.

    Fails the test at the first failed workflow task: a run that Temporal
    refuses a workflow task of (a payload over 2 MB, a search attribute it
    rejects) fails it again on every retry, and never closes.
    """
    import asyncio

    from temporalio.api.enums.v1 import EventType

    handle = client.get_workflow_handle(run_id)
    deadline = time.monotonic() + timeout
    while True:
        # describing is cheap; the history of a run near the limits is megabytes
        description = await handle.describe()
        retried = description.raw_description.pending_workflow_task.attempt > 1
        if retried or description.close_time is not None:
            history = await handle.fetch_history()
            for event in history.events:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    failure = event.workflow_task_failed_event_attributes.failure.message
                    raise AssertionError(
                        f"run {run_id} is wedged: a workflow task failed: {failure}"
                    )
            if description.close_time is not None:
                return history
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} did not close within {timeout}s")
        await asyncio.sleep(0.05)


class FailOnce(PayloadCodec):
    """Fails the decoding of the first payload `matches` picks, once.

    A payload a workflow activation carries (an activity's or a local
    activity's result): the workflow task that takes it fails, and Temporal
    runs the task again.
    """

    def __init__(self, matches: Callable[[bytes], bool]) -> None:
        self.matches = matches
        self.failed = False

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if not self.failed and any(self.matches(p.data) for p in payloads):
            self.failed = True
            raise RuntimeError("this workflow task fails once")
        return list(payloads)


def failing_once(client: Client, matches: Callable[[bytes], bool]) -> tuple[Client, FailOnce]:
    """`client` with a `FailOnce` codec (its workers fail one workflow task)."""
    codec = FailOnce(matches)
    config = client.config()
    config["data_converter"] = replace(client.data_converter, payload_codec=codec)
    return Client(**config), codec


async def history_text(client: Client, run_id: str) -> str:
    """A run's whole history as JSON text, with every base64 blob in it decoded beside it
    (payloads are base64: a secret in one shows only decoded)."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return with_decoded(history.to_json())


def with_decoded(text: str) -> str:
    """`text` followed by the text of each base64 blob in it (16 characters or more)."""
    decoded = []
    for blob in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        try:
            decoded.append(base64.b64decode(blob, validate=True).decode("utf-8", "replace"))
        except ValueError:
            continue
    return text + "\n".join(decoded)


#: what starts a Python traceback, and a log line of the CLI's or the worker's own handler
TRACEBACK = "Traceback (most recent call last):"
_LOG_LINE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: |\[sdk_core")


def error_line(err: str) -> str:
    """The line of a process's stderr that says its error.

    Log lines may follow it while the process's worker stops: Temporal core's,
    the CLI's (`LEVEL logger: ...`), a script's (a tool the stop's grace ran out
    on is handed back, logged after the script's traceback). A script's error
    is the line naming the exception after its last traceback's frames."""
    lines = [line for line in err.strip().splitlines() if not _LOG_LINE.match(line)]
    if TRACEBACK in lines:
        last = len(lines) - lines[::-1].index(TRACEBACK)
        return next((line for line in lines[last:] if not line.startswith(" ")), "")
    return lines[-1] if lines else ""


def keyed_agent(
    name: str, tool: Any, model: Any, key: str, client: Any, task_queue: str, store_dir: Path
) -> Agentor:
    """An agent whose API key is `key` (the credential the secrets tests look for), with
    one tool, on the test's queue and embedded worker, mirrored into `store_dir`."""
    return Agentor(
        name=name,
        model="gpt-4o-mini",
        instructions=INSTRUCTIONS,
        tools=[tool],
        base_url=model.base_url,
        api_key=key,
        temporal=client,
        task_queue=task_queue,
        store=FileStore(store_dir),
    )


def run_agent_module(
    source: str, module: str, key: str, model: Any, address: str, task_queue: str, where: Path
) -> subprocess.CompletedProcess[str]:
    """`agentor-temporal run --agent MODULE:agent --json "Oslo?"` in its own process, the
    module written from `source` into `where` (its cwd), OPENAI_API_KEY=`key`."""
    (where / f"{module}.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    env.update(
        OPENAI_API_KEY=key,
        MODEL_BASE_URL=model.base_url,
        AGENT_TASK_QUEUE=task_queue,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(where)]),
    )
    return forkserver.run(
        [sys.executable, "-m", "agentor_temporal", "run", "--agent", f"{module}:agent"]
        + ["--temporal", address, "--json", "Oslo?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=where,
    )


async def operator_rpc(call: Callable[[Any], Any], request: Any, timeout: float = 30.0) -> Any:
    """`await call(request)` (an operator's RPC: `pause_activity`, `unpause_activity`), sent
    again while the server answers it with a transient status: a loaded dev server once
    answered a pause "operation was canceled" (its own deadline inside), which is not
    the test's subject. Sent again only then: a test that failed on the first answer can
    do no worse."""
    from temporalio.service import RPCError, RPCStatusCode

    transient = {
        RPCStatusCode.CANCELLED,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
    }
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call(request)
        except RPCError as err:
            if err.status not in transient or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def pause_call(client: Client, execution: Any, activity_id: str) -> None:
    """Pause a run's activity as an operator does (`temporal activity pause`)."""
    from temporalio.api.workflowservice.v1 import PauseActivityRequest

    request = PauseActivityRequest(
        namespace=client.namespace,
        execution=execution,
        id=activity_id,
        identity="test",
        reason="test",
    )
    await operator_rpc(client.workflow_service.pause_activity, request)


async def unpause_call(
    client: Client,
    execution: Any,
    activity_id: str,
    *,
    reset_attempts: bool = True,
    handed_over: bool = False,
) -> None:
    """Unpause it (`temporal activity unpause`). `handed_over`: a stopping worker may have
    completed the activity with its result already, leaving the server nothing to unpause."""
    from temporalio.api.workflowservice.v1 import UnpauseActivityRequest
    from temporalio.service import RPCError

    request = UnpauseActivityRequest(
        namespace=client.namespace,
        execution=execution,
        id=activity_id,
        identity="test",
        reset_attempts=reset_attempts,
    )
    try:
        await operator_rpc(client.workflow_service.unpause_activity, request)
    except RPCError as exc:
        if not (handed_over and "already completed" in exc.message):
            raise


async def recorded(result: Any, client: Client, folder: Path, caplog: Any = None) -> dict[str, str]:
    """Where a run's text ended up besides the model's requests, by place: its final output,
    its store's files under `folder`, its history, and the log lines `caplog` caught."""
    shown = {
        "final output": str(result.final_output),
        "store": "\n".join(p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()),
        "history": await history_text(client, result.run_id),
    }
    if caplog is not None:
        shown["logs"] = "\n".join(r.getMessage() for r in caplog.records)
    return shown


async def keyed_calls(
    name: str,
    tool: Any,
    param: str,
    values: Sequence[str],
    reply: Any,
    key: str,
    client: Client,
    task_queue: str,
    folder: Path,
    caplog: Any,
) -> tuple[Any, dict[str, str]]:
    """A `keyed_agent` whose model calls `tool` once for each of `values` (its argument
    `param`), then answers `reply`: the run's result, and where its text ended up (each
    tool result, the model's last request and `recorded`'s places), each call's result
    checked masked (`***`)."""
    from agentor_temporal.testing import CallTool, ScriptedModelServer

    calls = [CallTool(tool.name, {param: v}, id=f"call_{i}") for i, v in enumerate(values)]
    with ScriptedModelServer([calls, reply]) as model:
        agent = keyed_agent(name, tool, model, key, client, task_queue, folder)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert sorted(str(a.args[param]) for a in answers) == sorted(values)
    assert all("***" in a.result for a in answers), [a.result for a in answers]
    shown = {
        **{f"tool result {a.args}": f"{a.result} {a.error or ''}" for a in answers},
        "model request": sent,
        **await recorded(result, client, folder, caplog),
    }
    return result, shown


def masked_stream(pieces: list[str]) -> tuple[list[str], int]:
    """What a streamed reply sent in `pieces` puts out through `MaskedDeltas` (flushed at
    its end), and the most it held back at once."""
    from agentor_temporal.activities.streaming import MaskedDeltas

    sent: list[str] = []

    async def sink(text: str) -> None:
        sent.append(text)

    async def go() -> int:
        masked, most = MaskedDeltas(sink), 0
        for piece in pieces:
            await masked(piece)
            most = max(most, len(masked.held))
        await masked.flush()
        return most

    return sent, asyncio.run(go())
