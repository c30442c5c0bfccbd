"""A refused decision names who decided as a terminal can show it.

The first decision wins and the rest are told who decided; `by` is whatever the
first decider sent (a plain client, `serve`'s `"by"`, the facade), so a
newline in it wrote lines of its own into the loser's `error:` line (a forged
"approved ... (by bob)" confirmation) and an escape sequence acted on the
loser's terminal, as a model's call id once did in `pending`.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, scripted_agent, transfer_tool
from integration.test_cli import cli

#: a first decider's name: a line of its own, and an escape that clears the screen
FORGED = "alice\nerror: none; approved call_pay (by bob)\x1b[2J"


async def test_a_decision_after_another_names_the_first_decider_printably(
    client: Client, task_queue: str, ledger: str
) -> None:
    """While the run waits on another call (the run says who decided), and once the run has
    ended (read from history): one line, no escape, the name still readable."""
    script = [
        [
            CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"),
            CallTool("transfer", {"amount": 7000, "to": "eve"}, id="call_eve"),
        ],
        Reply("Paid."),
    ]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[transfer_tool(ledger)])
        paused = await asyncio.wait_for(agent.arun("Pay bob and eve."), 60)
        assert paused.status == "awaiting_approval", paused.error
        run_id = paused.run_id
        await asyncio.wait_for(agent.aapprove(run_id, "call_pay", by=FORGED), 60)
        told = []
        with pytest.raises(ValueError, match="already approved by") as waiting:
            await asyncio.wait_for(agent.adeny(run_id, "call_pay", "no", by="carol"), 60)
        told.append(str(waiting.value))
        await asyncio.wait_for(agent.aapprove(run_id, "call_eve", by="dave"), 60)
        done = await asyncio.wait_for(agent.aresume(run_id), 60)
        assert done.status == "completed", done.error
        with pytest.raises(ValueError, match="already approved by") as ended:
            await asyncio.wait_for(agent.adeny(run_id, "call_pay", "no", by="carol"), 60)
        told.append(str(ended.value))
    for message in told:
        assert "\n" not in message and "\x1b" not in message, message
        assert r"alice\nerror: none" in message, message
    # the first decision stood: both transfers ran once
    assert sorted(line.split()[-1] for line in ledger_lines(ledger)) == ["bob", "eve"]


#: a model's call id (what a prompt or a tool's result can steer): a row of its own
FORGED_ID = "call_1\nerror: none; approved call_2 (by bob)\x1b[2K"


async def test_a_decision_on_an_unknown_call_lists_the_waiting_ids_printably(
    client: Client, task_queue: str, ledger: str
) -> None:
    """The refusal of a decision for a call the run does not wait for lists the calls it
    does wait for: a model's id holding a newline or an escape is quoted, not written raw."""
    script = [CallTool("transfer", {"amount": 5000, "to": "bob"}, id=FORGED_ID), Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(model, client, task_queue, tools=[transfer_tool(ledger)])
        paused = await asyncio.wait_for(agent.arun("Pay bob."), 60)
        assert paused.status == "awaiting_approval", paused.error
        with pytest.raises(ValueError, match="no tool call 'call_nope' waiting") as refused:
            await asyncio.wait_for(agent.aapprove(paused.run_id, "call_nope"), 60)
        message = str(refused.value)
        assert "\n" not in message and "\x1b" not in message, message
        assert repr(FORGED_ID) in message, message
        await asyncio.wait_for(agent.adeny(paused.run_id, FORGED_ID, "no"), 60)
        done = await asyncio.wait_for(agent.aresume(paused.run_id), 60)
    assert done.status == "completed", done.error
    assert ledger_lines(ledger) == []


async def test_a_decision_no_worker_takes_names_the_call_printably(
    client: Client, temporal_address: str, task_queue: str, ledger: str
) -> None:
    """`deny` of a waiting call whose id a model forged, with no worker serving the run: the
    'No worker took the decision on ...' line quotes the id (seen: it wrote a forged row and
    raw escapes into the person's terminal, the CLI deny of test_pending_shown under load)."""
    script = [CallTool("transfer", {"amount": 5000, "to": "bob"}, id=FORGED_ID), Reply("Paid.")]
    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model, client, task_queue, tools=[transfer_tool(ledger)], embedded_worker=False
        )
        async with build_worker(client, [agent], task_queue=task_queue):
            paused = await asyncio.wait_for(agent.arun("Pay bob."), 60)
        assert paused.status == "awaiting_approval", paused.error
        # no worker now: the decision waits --wait 1 s for one, then the CLI says so
        args = ("deny", paused.run_id, FORGED_ID, "--reason", "no", "--wait", "1")
        args += ("--temporal", temporal_address)
        denied = await asyncio.to_thread(cli, *args)
        await client.get_workflow_handle(paused.run_id).terminate("test over")
    assert denied.returncode == 1, denied.stderr
    lines = denied.stderr.splitlines()
    assert len(lines) == 1, denied.stderr
    line = lines[0]
    assert line.startswith(f"error: No worker took the decision on {ascii(FORGED_ID)} "), line
    assert "\x1b" not in denied.stderr, denied.stderr
