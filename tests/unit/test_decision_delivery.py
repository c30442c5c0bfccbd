"""A decision Temporal aborted before a worker took it is sent again, as the same update."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal._runs import _update_decision
from agentor_temporal.workflows.types import Decision


class AbortingHandle:
    """A workflow handle whose server aborts the first `aborts` updates (as under load)."""

    def __init__(self, aborts: int, status: RPCStatusCode = RPCStatusCode.UNAVAILABLE) -> None:
        self.aborts, self.status = aborts, status
        self.ids: list[str | None] = []

    async def execute_update(self, name: str, arg: Any, *, id: str | None = None, **_: Any) -> Any:
        self.ids.append(id)
        if len(self.ids) <= self.aborts:
            raise RPCError("workflow update was aborted", self.status, b"")
        return {"call_id": arg.call_id, "approved": arg.approved}


async def test_an_aborted_update_is_sent_again_under_its_id() -> None:
    """Three hundred decisions sent at once: a third were aborted, and raised ValueError."""
    handle = AbortingHandle(aborts=2)
    decided = await _update_decision(handle, Decision("call_1", True))  # type: ignore[arg-type]
    assert decided == {"call_id": "call_1", "approved": True}
    assert len(handle.ids) == 3 and handle.ids[0] and len(set(handle.ids)) == 1


async def test_other_refusals_are_not_sent_again() -> None:
    handle = AbortingHandle(aborts=1, status=RPCStatusCode.INVALID_ARGUMENT)
    with pytest.raises(RPCError):
        await _update_decision(handle, Decision("call_1", True))  # type: ignore[arg-type]
    assert len(handle.ids) == 1
