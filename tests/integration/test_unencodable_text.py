"""Text no UTF-8 encoder takes (a lone surrogate, JSON's "\\ud800") never fails our own code.

A provider's error message can hold one (its JSON escapes it), and so can a
person's reason for a denial: a Temporal failure message and a terminal are
strict UTF-8, so such text reaches them with U+FFFD in the surrogate's place,
never as an encoder's error in place of the run's own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import FileStore
from agentor_temporal.testing import CallTool, Fail, Raw, Reply, ScriptedModelServer

from helpers import scripted_agent, transfer_tool, weather_tool
from integration.test_cli import cli


async def test_a_providers_refusal_holding_a_lone_surrogate_fails_the_run_at_once(
    client: Client, task_queue: str
) -> None:
    """A 400 whose message holds a lone surrogate fails the run at once, saying it."""
    refusal = '{"error": {"message": "bad \\ud800 request", "type": "invalid_request_error"}}'
    # behind it, what a retry would be answered: the run must not get there
    script = [Raw(refusal, status=400), Fail(400, "bad \ud800 again"), Reply("retried")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[weather_tool()])
        result = await agent.arun("go", run_id=uuid.uuid4().hex)
    # before: the failure could not be encoded ('Failed building exception result:
    # ... surrogates not allowed'), which Temporal retries: 3 requests, the run completed
    assert model.request_count == 1
    assert result.status == "failed", result
    assert result.error == "Model request failed with 400: bad \ufffd request", result.error


async def test_a_denial_holding_a_lone_surrogate_is_shown(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`show` prints a run whose recorded text holds a lone surrogate, as U+FFFD."""
    script = [[CallTool("transfer", {"amount": 5, "to": "bob"}, id="call_pay")], Reply("done")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool()], store=FileStore(tmp_path)
        )
        run_id = uuid.uuid4().hex
        paused = await agent.arun("pay bob", run_id=run_id)
        assert paused.status == "awaiting_approval", paused
        await agent.adeny(run_id, paused.pending_approvals[0], reason="no \ud800 way")
        assert (await agent.aresume(run_id)).status == "completed"
    shown = cli("show", run_id, "--temporal", temporal_address)
    # before: exit 1, "UnicodeEncodeError: 'utf-8' codec can't encode character '\ud800'"
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    assert "no \ufffd way" in shown.stdout
