"""Agents inside users' own Temporal apps: `AgentorPlugin` and `run_agent`.

The user's workflow is `examples/order_workflow.py` as shipped; its agent is
`examples/support_agent.py`, pointed at this test's scripted model.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import forkserver
import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.worker import Replayer, Worker

from agentor_temporal import Agentor, AgentorPlugin, FileStore, TemporalStore
from agentor_temporal.testing import CallTool, Fail, Hang, Reply, ScriptedModelServer
from agentor_temporal.workflow import run_agent

from helpers import ROOT, ledger_lines, scripted_agent, until, weather_tool

sys.path.insert(0, str(ROOT / "examples"))

from order_workflow import OrderDecision, OrderWorkflow, issue_refund  # noqa: E402
from support_agent import lookup_order  # noqa: E402

REFUND_SCRIPT = [CallTool("lookup_order", {"order_id": "A-1001"}), Reply("REFUND\nIt broke.")]


def support(model: ScriptedModelServer, store: FileStore | None = None, **kw: object) -> Agentor:
    """The example's support agent, on this test's model, with no worker of its own."""
    return Agentor(
        name="Support Agent",
        model="gpt-4o-mini",
        instructions="Decide refunds.",
        tools=[lookup_order],
        store=store,
        base_url=model.base_url,
        api_key="test-key",
        embedded_worker=False,
        **kw,  # type: ignore[arg-type]
    )


def user_worker(client: Client, queue: str, agent: Agentor, store: FileStore) -> Worker:
    """The user's worker as the README shows it: their workflow, their activity, the plugin."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[OrderWorkflow],
        activities=[issue_refund],
        plugins=[AgentorPlugin(agents=[agent], store=store)],
    )


async def test_a_users_workflow_runs_an_agent_as_an_ordinary_run(
    client: Client, task_queue: str, tmp_path: Path, temporal_address: str
) -> None:
    """The child run has a JSONL log, resumes as finished, and `show` reads it."""
    store = FileStore(tmp_path / "runs")
    with ScriptedModelServer(REFUND_SCRIPT) as model:
        agent = support(model, temporal=client, task_queue=task_queue)
        order_id = f"order-{uuid.uuid4().hex[:6]}"
        async with user_worker(client, task_queue, agent, store):
            decision = await client.execute_workflow(
                OrderWorkflow.run, "A-1001", id=order_id, task_queue=task_queue
            )
        asked = model.request_count
        assert isinstance(decision, OrderDecision)
        assert decision.refunded and decision.reason == "It broke."
        child = decision.agent_run_id
        assert child == f"{order_id}-support"
        # the mirror has the whole run, as the history does
        logged = [e.to_dict() for e in store.load(child)]
        assert [e["type"] for e in logged][0] == "run_start" and logged[-1]["type"] == "run_end"
        assert logged == [e.to_dict() for e in await TemporalStore(client).aload(child)]
        # resume returns the finished run: no worker needed, no model request
        result = await agent.aresume(child)
        assert result.status == "completed" and result.final_output == "REFUND\nIt broke."
        assert model.request_count == asked
    shown = forkserver.run(
        [sys.executable, "-m", "agentor_temporal", "show", child, "--temporal", temporal_address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "Support Agent" in shown.stdout and "lookup_order" in shown.stdout
    # the parent's history replays with the plugin, the way users test theirs
    history = await client.get_workflow_handle(order_id).fetch_history()
    await Replayer(workflows=[OrderWorkflow], plugins=[AgentorPlugin()]).replay_workflow(history)


async def test_a_run_id_used_before_attaches_to_that_run_instead_of_running_it_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`run_agent(run_id=X)` where X already ran (the same order workflow started again, a
    redelivered message) returns X's outcome: the agent is not run, nor paid for, twice.
    An X that is not an agent run is a failed outcome naming it."""
    store = FileStore(tmp_path / "runs")
    with ScriptedModelServer(REFUND_SCRIPT * 2) as model:
        agent = support(model, temporal=client, task_queue=task_queue)
        order_id = f"order-{uuid.uuid4().hex[:6]}"
        async with user_worker(client, task_queue, agent, store):
            first = await client.execute_workflow(
                OrderWorkflow.run, "A-1001", id=order_id, task_queue=task_queue
            )
            asked = model.request_count
            segments = await TemporalStore(client).segments(first.agent_run_id)
            again = await client.execute_workflow(
                OrderWorkflow.run, "A-1001", id=order_id, task_queue=task_queue
            )
        assert again == first and again.refunded
        assert model.request_count == asked == 2
        after = await TemporalStore(client).segments(first.agent_run_id)
        assert [s.execution_run_id for s in after] == [s.execution_run_id for s in segments]
        history = await client.get_workflow_handle(order_id).fetch_history()
        await Replayer(workflows=[OrderWorkflow], plugins=[AgentorPlugin()]).replay_workflow(
            history
        )

    # two workflows naming one run id at once: the second waits for the first's run
    slow = [Hang(3, REFUND_SCRIPT[0]), REFUND_SCRIPT[1]]
    with ScriptedModelServer(slow * 2) as model:
        agent = support(model, temporal=client, task_queue=task_queue)
        child = f"shared-{uuid.uuid4().hex[:6]}"
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[SharedRunWorkflow],
            plugins=[AgentorPlugin(agents=[agent], store=store)],
        ):
            parents = [
                await client.start_workflow(
                    SharedRunWorkflow.run, child, id=uuid.uuid4().hex, task_queue=task_queue
                )
                for _ in range(3)
            ]

            # one that waits for the run (whichever parent did not start it: the
            # first to start it is any of the three) is cancelled as a parent of its
            # own run would be
            deadline = asyncio.get_running_loop().time() + 30
            waiting: list[Any] = []
            while not waiting:
                assert asyncio.get_running_loop().time() < deadline, "no outcome read"
                await asyncio.sleep(0.05)
                for parent in parents:
                    if (await parent.describe()).raw_description.pending_activities:
                        waiting.append(parent)
            leaver = waiting[0]
            await leaver.cancel()
            with pytest.raises(WorkflowFailureError) as cancelled:
                await asyncio.wait_for(leaver.result(), 10)
            assert isinstance(cancelled.value.cause, CancelledError)
            rest = [p for p in parents if p is not leaver]
            outcomes = [await asyncio.wait_for(p.result(), 30) for p in rest]

            # an id the app's own workflow (another type) holds, running or closed: a
            # failed outcome naming it. Before, a running one's outcome was asked again
            # until it ended, and a closed one's result, read as an outcome, failed every try
            running, closed = f"taken-{uuid.uuid4().hex[:6]}", f"taken-{uuid.uuid4().hex[:6]}"
            for taken in (running, closed):  # a type no worker here runs
                await client.start_workflow("OtherWorkflow", "x", id=taken, task_queue="nobody")
            await client.get_workflow_handle(closed).terminate("done with it")
            for taken in (running, closed):
                other = await asyncio.wait_for(
                    client.execute_workflow(
                        SharedRunWorkflow.run, taken, id=uuid.uuid4().hex, task_queue=task_queue
                    ),
                    20,
                )
                assert other["status"] == "failed", other
                assert f"{taken!r} is a workflow of type 'OtherWorkflow'" in other["error"]
            await client.get_workflow_handle(running).terminate("test over")

            # and one another agent's run holds (an agent no worker serves), running or
            # closed: a failed outcome naming that agent. Before, a running one was asked
            # again for ever, a closed one's result was given as Support Agent's answer
            running, closed = f"billing-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
            for taken in (running, closed):
                await client.start_workflow(
                    "AgentRun",
                    {"agent": "Billing Agent", "input": "x"},
                    id=taken,
                    task_queue="nobody",
                )
            await client.get_workflow_handle(closed).terminate("done with it")
            for taken in (running, closed):
                other = await asyncio.wait_for(
                    client.execute_workflow(
                        SharedRunWorkflow.run, taken, id=uuid.uuid4().hex, task_queue=task_queue
                    ),
                    20,
                )
                assert other["status"] == "failed", other
                assert f"Run {taken!r} belongs to agent 'Billing Agent'" in other["error"], other
            await client.get_workflow_handle(running).terminate("test over")
        assert outcomes[0] == outcomes[1]
        assert outcomes[0]["status"] == "completed" and outcomes[0]["run_id"] == child
        assert model.request_count == 2


@workflow.defn(sandboxed=False)
class SharedRunWorkflow:
    @workflow.run
    async def run(self, run_id: str) -> dict[str, Any]:
        outcome = await run_agent("Support Agent", "Refund order A-1001?", run_id=run_id)
        return outcome.to_dict()


async def test_a_plugin_on_the_client_reaches_every_worker_built_on_it(
    client: Client, task_queue: str, tmp_path: Path, temporal_address: str
) -> None:
    """`Client.connect(plugins=[AgentorPlugin(...)])`: workers on that client serve agent runs."""
    with ScriptedModelServer(REFUND_SCRIPT) as model:
        agent = support(model)
        plugged = await Client.connect(
            temporal_address, plugins=[AgentorPlugin(agents=[agent], store=FileStore(tmp_path))]
        )
        async with Worker(
            plugged, task_queue=task_queue, workflows=[OrderWorkflow], activities=[issue_refund]
        ):
            decision = await plugged.execute_workflow(
                OrderWorkflow.run, "A-1001", id=uuid.uuid4().hex, task_queue=task_queue
            )
    assert decision.refunded


async def test_an_unknown_agent_comes_back_as_a_failed_outcome(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A child run the workflow refuses is a failed outcome naming the known agents."""
    with ScriptedModelServer(REFUND_SCRIPT) as model:
        other = Agentor(
            name="Billing Agent", base_url=model.base_url, api_key="k", embedded_worker=False
        )
        async with user_worker(client, task_queue, other, FileStore(tmp_path)):
            decision = await client.execute_workflow(
                OrderWorkflow.run, "A-1001", id=uuid.uuid4().hex, task_queue=task_queue
            )
    assert not decision.refunded
    assert "agent failed" in decision.reason and "'Billing Agent'" in decision.reason


#: `run_agent` settings the server would refuse, and the refusal's start and end
ODD_STARTS: dict[str, tuple[dict[str, Any], str, str]] = {
    "negative-limit": (
        {"execution_timeout": timedelta(seconds=-1)},
        "execution_timeout must be a timedelta",
        "got -1 s",
    ),
    "number-limit": ({"execution_timeout": 30}, "execution_timeout must be a", "got int 30"),
    "long-queue": ({"task_queue": "q" * 1001}, "task_queue must be text of at most", "qq..."),
    "number-queue": ({"task_queue": 5}, "task_queue must be text", "got 5"),
    # over 2 MB: the server refused the child's start in every task of the parent
    "huge-input": (
        {"input": "x" * 2_500_000},
        "The agent's input is too large: 2.50 MB",
        "let a tool read it.",
    ),
    # the server takes these, and the child waited for ever for a worker
    "blank-queue": ({"task_queue": "  "}, "task_queue '  ' is blank", "(default 'agentor')."),
    "spaced-queue": (
        {"task_queue": "orders "},
        "task_queue 'orders ' begins or ends with whitespace",
        "(default 'agentor').",
    ),
    "invisible-queue": (
        {"task_queue": "ord\u200bers"},
        "task_queue 'ord\\u200bers' holds control or invisible characters",
        "would wait for ever. Name the queue your workers poll (default 'agentor').",
    ),
}


@workflow.defn(sandboxed=False)
class OddStartWorkflow:
    """Starts its agent run with a setting the server would refuse, and catches the refusal."""

    @workflow.run
    async def run(self, case: str) -> str:
        try:
            settings = {"input": "Is A-1001 refundable?", **ODD_STARTS[case][0]}
            await run_agent("Support Agent", **settings)
        except ValueError as exc:
            return str(exc)
        return "started"


async def test_a_setting_the_server_refuses_is_a_value_error_before_anything_starts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The child's start was refused in every workflow task of the parent, for ever
    ("BadStartChildExecutionAttributes: negative duration", "taskQueue length exceeds
    limit"), or waited for ever on a queue no worker polls ("  "); now `run_agent`
    raises, and the parent can catch it."""
    with ScriptedModelServer(REFUND_SCRIPT) as model:
        agent = support(model)
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[OddStartWorkflow],
            plugins=[AgentorPlugin(agents=[agent], store=FileStore(tmp_path))],
        ):
            for case, (_, begins, ends) in ODD_STARTS.items():
                handle = await client.start_workflow(
                    OddStartWorkflow.run, case, id=uuid.uuid4().hex, task_queue=task_queue
                )
                refused = await asyncio.wait_for(handle.result(), 20)
                assert refused.startswith(begins) and refused.endswith(ends), (case, refused)
                kinds = {e.event_type for e in (await handle.fetch_history()).events}
                assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds, case
                assert EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED not in kinds
        assert model.request_count == 0


@pytest.mark.parametrize("queue", ["  ", "orders ", "ord\u200bers", "/_sys/orders"])
def test_a_queue_no_worker_could_poll_is_refused_by_the_facade_and_worker(
    queue: str, client: Client
) -> None:
    """`Agentor(task_queue=...)`, setting it later (the CLI's --task-queue) and
    `build_worker` refuse a name whose runs would wait for ever, naming it."""
    from agentor_temporal.worker import build_worker

    with pytest.raises(ValueError, match="no worker would poll it"):
        Agentor(name="Support Agent", model="gpt-4o-mini", task_queue=queue)
    agent = Agentor(name="Support Agent", model="gpt-4o-mini", task_queue="orders")
    with pytest.raises(ValueError, match="no worker would poll it"):
        agent.task_queue = queue
    assert agent.task_queue == "orders"
    with pytest.raises(ValueError, match="no worker would poll it"):
        build_worker(client, [agent], task_queue=queue)


@pytest.mark.parametrize("how", ["cancel", "terminate", "cancel-agent"])
async def test_a_parent_that_goes_away_cancels_its_agent_run_which_resumes_later(
    client: Client, task_queue: str, tmp_path: Path, how: str
) -> None:
    """Cancelling or terminating the parent cancels the agent run; `resume` finishes it later.

    Cancelling only the agent run gives the parent a failed outcome, not a cancellation.
    """
    store = FileStore(tmp_path / "runs")
    answers = {"n": 0}

    def script(request: dict[str, object]) -> object:
        answers["n"] += 1
        if answers["n"] == 1:
            # the agent is thinking when the parent goes away; its answer, come after
            # the cancel, is kept for resume (behaviour level 14)
            return Hang(5, Reply("NO REFUND\nWorn twice."))
        return Reply("NO REFUND\nWorn twice.")

    with ScriptedModelServer(script) as model:
        agent = support(model, temporal=client, task_queue=task_queue)
        order_id = uuid.uuid4().hex
        child = f"{order_id}-support"
        async with user_worker(client, task_queue, agent, store):
            handle = await client.start_workflow(
                OrderWorkflow.run, "A-1002", id=order_id, task_queue=task_queue
            )
            await until(lambda: model.request_count >= 1, "the agent's first model request")
            if how == "cancel":
                await handle.cancel()
            elif how == "terminate":
                await handle.terminate("order withdrawn")
            else:
                await client.get_workflow_handle(child).cancel()
            if how == "cancel-agent":
                decision = await handle.result()
                assert not decision.refunded and "cancelled" in decision.reason
            else:
                with pytest.raises(WorkflowFailureError):
                    await handle.result()

            async def child_closed() -> WorkflowExecutionStatus | None:
                for _ in range(600):
                    status = (await client.get_workflow_handle(child).describe()).status
                    if status != WorkflowExecutionStatus.RUNNING:
                        return status
                    await asyncio.sleep(0.05)
                return None

            assert await child_closed() == WorkflowExecutionStatus.CANCELED
            # the cancelled run is continued by resume, as any cancelled run
            result = await agent.aresume(child)
    assert result.status == "completed" and result.final_output == "NO REFUND\nWorn twice."
    assert [e.type for e in store.load(child)].count("run_start") == 2
    assert answers["n"] == 1  # resume went on from the kept answer


async def test_the_plugin_encrypts_a_users_app_when_given_keys(
    client: Client, task_queue: str, tmp_path: Path, temporal_address: str
) -> None:
    """`AgentorPlugin(encryption_keys=...)` on the client: the whole app's history is ciphertext."""
    pytest.importorskip("cryptography")
    from temporalio.worker import Worker as _Worker

    from agentor_temporal.codec import is_encrypted, new_key
    from agentor_temporal.plugin import ConfigError

    keys = f"app:{new_key()}"
    with ScriptedModelServer(REFUND_SCRIPT) as model:
        agent = support(model)
        plugin = AgentorPlugin(agents=[agent], store=FileStore(tmp_path), encryption_keys=keys)
        plugged = await Client.connect(temporal_address, plugins=[plugin])
        order_id = uuid.uuid4().hex
        async with _Worker(
            plugged, task_queue=task_queue, workflows=[OrderWorkflow], activities=[issue_refund]
        ):
            decision = await plugged.execute_workflow(
                OrderWorkflow.run, "A-1001", id=order_id, task_queue=task_queue
            )
        assert decision.refunded
        # a client without the key sees ciphertext, in the parent's history and the agent's
        for run_id in (order_id, decision.agent_run_id):
            history = await client.get_workflow_handle(run_id).fetch_history()
            started = history.events[0].workflow_execution_started_event_attributes
            assert is_encrypted(started.input.payloads[0])
            assert b"A-1001" not in started.input.payloads[0].data
        with pytest.raises(ConfigError, match="needs the plugin on the client"):
            _Worker(
                client,
                task_queue=task_queue,
                workflows=[OrderWorkflow],
                plugins=[AgentorPlugin(agents=[agent], encryption_keys=keys)],
            )


PRELOAD_PROBE = """
import asyncio, sys
from temporalio.client import Client
from temporalio.worker import Worker
from agentor_temporal import Agentor, AgentorPlugin

async def main():
    client = await Client.connect(sys.argv[1])
    agent = Agentor(name="Probe", model="m", base_url="http://127.0.0.1:9", api_key="k",
                    temporal=client, embedded_worker=False)
    before = "openai.resources.chat.completions" in sys.modules
    Worker(client, task_queue="probe", plugins=[AgentorPlugin([agent])])
    print(before, "openai.resources.chat.completions" in sys.modules)

asyncio.run(main())
"""


def test_a_worker_imports_what_a_model_call_needs_when_built_not_when_it_runs(
    temporal_address: str,
) -> None:
    """A run this process starts may hand its first task to the worker at once (eager start).

    That task's 5 s timeout runs from the start. Importing the model client
    when the worker began to run took 3-4 s of it on a loaded machine, and
    once all of it: the task timed out and the run came 5 s late.
    """
    probe = subprocess.run(
        [sys.executable, "-c", PRELOAD_PROBE, temporal_address],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["False", "True"]


@workflow.defn(sandboxed=False)
class TwoAgentsWorkflow:
    """Two agent runs side by side (the second once signalled `go`); the workflow fails when
    the second one does."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def start_second(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, name: str) -> str:
        wid = workflow.info().workflow_id
        looking = asyncio.ensure_future(
            run_agent(name, "Look up Oslo and Rome.", run_id=f"{wid}-look")
        )
        await workflow.wait_condition(lambda: self.go)
        failing = await run_agent(name, "Break.", run_id=f"{wid}-break")
        if failing.status != "completed":
            raise ApplicationError(f"the other agent failed: {failing.error}", non_retryable=True)
        return str((await looking).final_output)


async def test_a_parent_failing_on_another_agents_model_error_keeps_its_agents_finished_calls(
    client: Client, task_queue: str, tmp_path: Path, ledger: str
) -> None:
    """A workflow that fails because one agent run failed on a model error cancels the agent run
    beside it mid-turn: that run records what its calls did, so its resume runs none again."""

    def script(request: dict[str, Any]) -> Any:
        messages = request.get("messages") or []
        if messages[-1].get("role") == "tool":
            return Reply("Oslo and Rome looked up.")
        if "Break" in str(messages[-1].get("content")):
            return Fail(400, "the model refused the request")
        return [
            CallTool("get_weather", {"city": "Oslo"}, id="c_oslo"),
            CallTool("get_weather", {"city": "Rome"}, id="c_rome"),
        ]

    with ScriptedModelServer(script) as model:
        agent = scripted_agent(
            model,
            client,
            task_queue,
            tools=[weather_tool(ledger, delay=3.0, delay_city="Rome")],
            embedded_worker=False,
        )
        parent = uuid.uuid4().hex
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[TwoAgentsWorkflow],
            plugins=[AgentorPlugin(agents=[agent], store=FileStore(tmp_path / "runs"))],
        ):
            handle = await client.start_workflow(
                TwoAgentsWorkflow.run, agent.name, id=parent, task_queue=task_queue
            )
            await until(lambda: len(ledger_lines(ledger)) == 2, "both lookups to start")
            # the other run fails while Rome's lookup still runs
            await handle.signal(TwoAgentsWorkflow.start_second)
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            looking = client.get_workflow_handle(f"{parent}-look")
            with pytest.raises(WorkflowFailureError):  # cancelled with its parent
                await asyncio.wait_for(looking.result(), 60)
            events = await TemporalStore(client).aload(f"{parent}-look")
            answers = {e.call_id: e.error for e in events if e.type == "tool_result"}
            assert answers == {"c_oslo": None, "c_rome": None}, answers
            resumed = await asyncio.wait_for(agent.aresume(f"{parent}-look"), 60)
    assert resumed.status == "completed", resumed.error
    assert sorted(line.split()[0] + " " + line.split()[-1] for line in ledger_lines(ledger)) == [
        "get_weather Oslo",
        "get_weather Rome",
    ]
