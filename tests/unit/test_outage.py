"""How long a waiting caller rides out an unreachable server, and what it says when it gives up."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._outage import (
    OUTAGE_PATIENCE,
    outage_of,
    outage_patience,
    patiently,
    riding_outages,
    throttled,
    unreachable,
    until_reachable,
)
from agentor_temporal.cli import _again
from agentor_temporal.connection import ConnectionFailed

ADDRESS = "temporal.internal:7233"


def _client(down: Callable[[], bool] = lambda: True) -> Any:
    """A client whose server at ADDRESS is unreachable while `down()`."""

    async def get_system_info(*args: object, **kwargs: object) -> None:
        if down():
            raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")

    return SimpleNamespace(
        service_client=SimpleNamespace(config=SimpleNamespace(target_host=ADDRESS)),
        workflow_service=SimpleNamespace(get_system_info=get_system_info),
    )


def test_patience_defaults_and_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTOR_OUTAGE_PATIENCE", raising=False)
    assert outage_patience() == OUTAGE_PATIENCE == 300
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "2.5")
    assert outage_patience() == 2.5
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", bad)
        with pytest.raises(ValueError, match="AGENTOR_OUTAGE_PATIENCE"):
            outage_patience()


def test_only_an_unreachable_server_is_waited_out() -> None:
    assert unreachable(RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""))
    assert unreachable(RPCError("transport error", RPCStatusCode.UNKNOWN, b""))
    assert not unreachable(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""))
    assert not unreachable(RPCError("bad", RPCStatusCode.INVALID_ARGUMENT, b""))
    assert not unreachable(ValueError("tcp connect error"))


async def test_past_the_patience_the_caller_is_told_where_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "0")
    client = SimpleNamespace(
        service_client=SimpleNamespace(config=SimpleNamespace(target_host="temporal.internal:7233"))
    )
    tries = 0

    async def step() -> None:
        nonlocal tries
        tries += 1
        raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")

    with pytest.raises(ConnectionFailed) as caught:
        await riding_outages(step, client, what="waiting for run 'r1'", run_id="r1")  # type: ignore[arg-type]
    message = str(caught.value)
    assert tries == 1
    assert "temporal.internal:7233" in message and "resume('r1')" in message
    assert "goes on in Temporal" in message and "AGENTOR_OUTAGE_PATIENCE" in message
    # a step of no run (a listing) ends its message in sentences too: 'default 300 s).
    # once the server is back' read as half a sentence
    with pytest.raises(ConnectionFailed) as caught:
        await riding_outages(step, client, what="listing runs")  # type: ignore[arg-type]
    assert "default 300 s). Once the server is back, try again." in str(caught.value)


async def test_a_throttling_server_is_waited_out_as_an_outage(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """RESOURCE_EXHAUSTED (a namespace rate limit, an overloaded frontend) is ridden out,
    said in one line, and past the patience told as throttling; an execution's update or
    signal cap is not (asking again meets it again). Seen: `run()` of four runs at once
    on a dev server with frontend.namespaceRPS=1 died with a traceback ending in
    "RPCError: namespace rate limit exceeded" while its run went on."""
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "30")
    limited = RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
    capped = RPCError("in-flight update limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
    assert throttled(limited) and not throttled(capped) and not unreachable(limited)
    tries = 0

    async def step() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise limited
        return "done"

    with caplog.at_level(logging.WARNING, logger="agentor_temporal"):
        assert await riding_outages(step, _client(), what="waiting for run 'r1'", run_id="r1")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "throttling requests (namespace rate limit" in said[0], said
    assert "the run goes on" in said[0]

    async def refused() -> None:
        raise capped

    with pytest.raises(RPCError, match="update limit"):
        await riding_outages(refused, _client(), what="deciding")
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "0")

    async def limiting() -> None:
        raise limited

    with pytest.raises(ConnectionFailed) as caught:
        await riding_outages(limiting, _client(), what="waiting for run 'r1'", run_id="r1")
    message = str(caught.value)
    assert "has been throttling requests (namespace rate limit exceeded)" in message, message
    assert "resume('r1')" in message and "unreachable" not in message


async def test_other_errors_pass_through_at_once() -> None:
    async def step() -> None:
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")

    with pytest.raises(RPCError, match="not found"):
        await riding_outages(step, object(), what="reading run 'r1'")  # type: ignore[arg-type]


async def test_each_entry_point_says_how_it_re_attaches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream says `stream(.., after=..)`, the CLI its own commands: not `resume(run_id)`."""
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "0")

    async def step() -> None:
        raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")

    again = "`stream('r1', after=<events you have>)` follows it on"
    with pytest.raises(ConnectionFailed) as caught:
        await riding_outages(step, _client(), what="following run 'r1'", run_id="r1", again=again)
    message = str(caught.value)
    assert again in message and "resume(" not in message and ADDRESS in message
    outage = outage_of(caught.value)
    assert outage is not None and outage.run_id == "r1" and outage.address == ADDRESS
    by_cli = outage.told(_again(argparse.Namespace(agent="app:agent"), "r1"))
    assert "`agentor-temporal resume r1 --agent app:agent` re-attaches" in by_cli
    assert "resume('r1')" not in by_cli and "AGENTOR_OUTAGE_PATIENCE" in by_cli
    assert "`agentor-temporal show r1`" in outage.told(_again(argparse.Namespace(), "r1"))
    assert outage_of(ConnectionFailed("refused")) is None


async def test_a_patient_wait_does_not_count_the_time_the_server_was_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bound on the worker (a decision's) outlasts an outage longer than itself."""
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "30")
    back_at = time.monotonic() + 1.5
    client = _client(lambda: time.monotonic() < back_at)

    async def step() -> str:
        if time.monotonic() < back_at:
            raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")
        return "decided"

    async def deciding() -> str:
        await asyncio.sleep(0.2)  # the worker's own time: counted
        return await riding_outages(step, client, what="deciding")

    assert await patiently(deciding(), 1.0) == "decided"
    # with the server there, the bound holds (and the wait is cancelled)
    slow = asyncio.ensure_future(asyncio.sleep(5))
    with pytest.raises(TimeoutError):
        await patiently(slow, 0.2)
    assert slow.cancelled()


async def test_a_patient_wait_outlasts_the_sdk_retries_before_an_outage_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`approve --wait 1` during an outage: the step spends the SDK's own retries (here
    1.5 s) failing before `riding_outages` sees the server gone. They are not the
    worker's time: the wait goes on while the server does not answer, and a decision
    taken once it is back is returned (before: TimeoutError, "no worker took it")."""
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "30")
    back_at = time.monotonic() + 2.5
    client = _client(lambda: time.monotonic() < back_at)

    async def step() -> str:
        if time.monotonic() < back_at:
            await asyncio.sleep(1.5)  # the SDK retrying the call, then giving up
            raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")
        return "decided"

    async def deciding() -> str:
        return await riding_outages(step, client, what="deciding")

    assert await patiently(deciding(), 1.0, client) == "decided"
    # nested (a decision's wait around the wait for its outcome): one outage, both clocks
    back_at = time.monotonic() + 2.5
    assert await patiently(patiently(deciding(), 1.0, client), 1.0, client) == "decided"
    # with the server there, the bound holds
    with pytest.raises(TimeoutError):
        await patiently(asyncio.sleep(5), 0.2, _client(lambda: False))


class Partition:
    """A TCP proxy to `upstream` that can stop passing bytes while keeping its connections
    (a server stopped, or a network dropping packets): calls through it time out."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.open = asyncio.Event()
        self.open.set()
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        #: seconds each chunk is held before it is passed on (a slow server, a congested link)
        self.delay = 0.0

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers += [writer, up_writer]

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            # each chunk passed on `delay` s after it came (latency: not added up)
            chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

            async def write() -> None:
                while True:
                    due, data = await chunks.get()
                    await asyncio.sleep(due - time.monotonic())
                    dst.write(data)
                    await dst.drain()

            writing = asyncio.ensure_future(write())
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    await self.open.wait()
                    chunks.put_nowait((time.monotonic() + self.delay, data))
            writing.cancel()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))


async def test_a_server_that_stops_answering_is_an_outage_ridden_out(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connected server that stops answering (stopped, partitioned away) is an outage: its
    calls end in 'Timeout expired', which was taken for a refusal (raised at once: a
    caller's traceback, a route's 502) and, from the probe, for the server being back."""
    partition = Partition(temporal_address)
    async with partition as address:
        client = await Client.connect(address)
        partition.open.clear()
        monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "60")
        waiting = asyncio.ensure_future(until_reachable(client, what="probing", run_id="r1"))
        await asyncio.sleep(2.5)  # past the probe's own 2 s deadline
        assert not waiting.done(), waiting.result() if not waiting.exception() else waiting
        partition.open.set()
        await asyncio.wait_for(waiting, 15)  # back: the wait ends

        partition.open.clear()
        monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "1")
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as info:
            await until_reachable(client, what="probing", run_id="r1")
        assert time.monotonic() - started < 10
        partition.open.set()
    assert f"Temporal at {address} has been unreachable for at least " in str(info.value)
    assert "while probing; gave up waiting" in str(info.value)


async def test_a_slow_server_is_waited_for_and_said_once(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server whose every answer takes longer than the probe's 2 s (a congested link) is
    there all the same. After a step timed out, the probe was taken for the server being
    gone at every try: the caller never asked again, never picked up the run's result,
    and gave up at the patience's end (300 s). A step that waits on such a server said
    nothing at all; it is said once, on the logger, and a normal wait says nothing."""
    partition = Partition(temporal_address)
    monkeypatch.setattr("agentor_temporal._outage._SLOW_AFTER", 0.3, raising=False)
    monkeypatch.setattr("agentor_temporal._outage._slow_said", {}, raising=False)
    async with partition as address:
        client = await Client.connect(address)
        calls = 0

        async def step() -> str:
            nonlocal calls
            calls += 1
            # a call's own deadline: the first try runs out of it (the server held it)
            timeout = timedelta(seconds=1 if calls == 1 else 20)
            await client.workflow_service.get_system_info(
                GetSystemInfoRequest(), retry=False, timeout=timeout
            )
            return "answered"

        async def waiting_normally() -> str:
            await asyncio.sleep(0.8)  # a long poll's wait, the server answering meanwhile
            return "ended"

        monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "20")
        with caplog.at_level(logging.WARNING, logger="agentor_temporal"):
            assert await riding_outages(waiting_normally, client, what="waiting") == "ended"
            assert not caplog.records  # no noise for a wait the server is there for
            partition.delay = 1.2  # each answer takes 2.4 s: over the probe's 2 s
            started = time.monotonic()
            assert await riding_outages(step, client, what="waiting for run 'r1'") == "answered"
            assert time.monotonic() - started < 15 and calls == 2
            # said once for the client: not again by its next step (a run's wait after its start)
            assert await riding_outages(step, client, what="reading run 'r1'") == "answered"
        slow = [r.getMessage() for r in caplog.records if "slow to answer" in r.getMessage()]
        assert len(slow) == 1 and "while waiting for run 'r1'" in slow[0], caplog.text
        assert address in slow[0]


async def test_a_starting_worker_waits_out_a_throttling_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker starting while the namespace is rate-limited waits to learn its search
    attributes, as it does for a restarting server (it failed to start at once)."""
    from temporalio.api.enums.v1 import IndexedValueType

    from agentor_temporal import plugin

    monkeypatch.setattr(
        plugin, "SEARCH_ATTRIBUTES", {"AgentName": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}
    )
    tries = 0

    async def list_search_attributes(request: object) -> Any:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
        return SimpleNamespace(
            custom_attributes={"AgentName": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD},
            system_attributes={},
        )

    client = SimpleNamespace(
        namespace="default",
        operator_service=SimpleNamespace(list_search_attributes=list_search_attributes),
    )
    assert await plugin._registered(client) == {"AgentName"}  # type: ignore[arg-type]
    assert tries == 3


@pytest.mark.parametrize("busy", [True, False], ids=["throttling", "unreachable"])
async def test_a_servers_message_cut_for_its_line_never_shows_part_of_a_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, busy: bool
) -> None:
    """The server's (or a proxy's) message is quoted in one line, cut at 200 characters: a key
    this process knows, or a URL's password, across the cut was cut first and masked after
    (by the log filter, the CLI), when the part left no longer read as either. Masked
    first now, in the log line and in the error the caller is given."""
    key = "tk-" + "Zq8" * 20
    monkeypatch.setenv("TEMPORAL_API_KEY", key)
    monkeypatch.setenv("AGENTOR_OUTAGE_PATIENCE", "0")
    password = "pw-" + "Hx4" * 20
    head = "rate limit: " if busy else "connect error: "
    for quoted in [f"key {key}", f"https://svc:{password}@proxy.internal/v1"]:
        # 20 characters of the key (the password) before the cut
        at = quoted.index(key if "key" in quoted else password) + 20
        text = head + "x" * (200 - len(head) - at) + quoted + " refused"
        code = RPCStatusCode.RESOURCE_EXHAUSTED if busy else RPCStatusCode.UNAVAILABLE
        error = RPCError(text, code, b"")

        async def step(error: RPCError = error) -> None:
            raise error

        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="agentor_temporal"),
            pytest.raises(ConnectionFailed) as caught,
        ):
            await riding_outages(step, _client(), what="waiting for run 'r1'", run_id="r1")
        outage = outage_of(caught.value)
        assert outage is not None
        said = [str(caught.value), outage.told("again"), *(r.getMessage() for r in caplog.records)]
        assert len(said) == 3, said
        for line in said:
            assert key[:8] not in line and password[:8] not in line, line
