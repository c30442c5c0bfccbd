"""How long a waiting caller rides out an unreachable server, and what it says when it gives up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._outage import (
    OUTAGE_PATIENCE,
    outage_patience,
    riding_outages,
    unreachable,
)
from agentor_temporal.connection import ConnectionFailed


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


async def test_other_errors_pass_through_at_once() -> None:
    async def step() -> None:
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")

    with pytest.raises(RPCError, match="not found"):
        await riding_outages(step, object(), what="reading run 'r1'")  # type: ignore[arg-type]
