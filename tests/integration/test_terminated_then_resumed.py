"""A run terminated mid-call and resumed at once joins the call still running in its worker.

The terminated execution's call goes on in the worker until the worker hears
that the server no longer knows it (its next heartbeat). The resume's same
call (the same model request; the same tool call, same idempotency key) was
made a second time meanwhile: a second paid request for the turn, or the tool
twice at once. It now joins the call, as a reset execution's same call does.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Hang, Reply, ScriptedModelServer
from agentor_temporal.worker import build_worker

from helpers import ledger_lines, ledger_write, scripted_agent, until


async def test_a_model_request_of_a_terminated_run_is_joined_by_its_resume(
    client: Client, task_queue: str
) -> None:
    """Terminate the run while its model request is answered slowly, resume at once: one
    request, its answer the run's."""
    with ScriptedModelServer() as model:
        model.set_script([Hang(3, Reply("It is sunny.")), Reply("asked again")])
        agent = scripted_agent(model, client, task_queue, embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            await until(lambda: model.request_count, "the model request", timeout=30)
            await client.get_workflow_handle(run_id).terminate("test")
            assert (await asyncio.wait_for(started, 30)).status != "completed"
            result = await agent.aresume(run_id)
        assert (model.request_count, result.final_output) == (1, "It is sunny.")


@pytest.mark.parametrize("sync", [False, True], ids=["async_tool", "sync_tool"])
async def test_a_tool_call_of_a_terminated_run_is_joined_by_its_resumes_same_call(
    client: Client, task_queue: str, ledger: str, sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Terminate the run while its tool runs, resume at once: the resume's same call (the
    model's answer, same call id and arguments) joins it, the tool runs once, and the
    model is asked twice in all (the call, the answer)."""
    caplog.set_level(logging.INFO, logger="agentor_temporal.activities._joining")
    release = asyncio.Event()
    freed = False

    @function_tool(name="get_weather")
    async def async_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        await release.wait()
        return f"The weather in {city} is sunny and 22C."

    @function_tool(name="get_weather")
    def sync_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        for _ in range(1500):  # 30 s at most
            if freed:
                break
            time.sleep(0.02)
        return f"The weather in {city} is sunny and 22C."

    def respond(request: dict) -> object:  # type: ignore[type-arg]
        last = (request.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            return Reply(f"Answer: {last.get('content')}")
        return CallTool("get_weather", {"city": "Paris"}, id="call_1")

    with ScriptedModelServer() as model:
        model.set_script(respond)
        tool = sync_weather if sync else async_weather
        agent = scripted_agent(model, client, task_queue, tools=[tool], embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            try:
                await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
                await client.get_workflow_handle(run_id).terminate("test")
                assert (await asyncio.wait_for(started, 30)).status != "completed"
                resumed = asyncio.ensure_future(agent.aresume(run_id))

                def joined_or_ran_again() -> bool:
                    joined = f"call_tool of run {run_id} joins the same call"
                    return joined in caplog.text or len(ledger_lines(ledger)) > 1

                await until(joined_or_ran_again, "the resume's tool call", timeout=30)
            finally:
                release.set()
                freed = True
            result = await asyncio.wait_for(resumed, 30)
        assert result.status == "completed", result.error
        assert len(ledger_lines(ledger)) == 1, ledger_lines(ledger)
        assert model.request_count == 2


#: what the worker logs once it heard that a call's run ended (terminated)
HEARD_OF_THE_END = ("the run ended while it was running", "kept for a resume to join")


@pytest.mark.parametrize("call", ["model_request", "tool_call"])
async def test_a_call_of_a_terminated_run_is_joined_by_a_resume_after_its_worker_heard_of_the_end(
    client: Client, task_queue: str, ledger: str, call: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Terminate mid-call, resume only once the worker has heard (at the call's next
    heartbeat) that the run ended: the call was stopped then, and the resume paid the
    model again (2 requests for 1), or ran the tool again; it is now kept for a while
    for the resume's same call to join."""
    caplog.set_level(logging.INFO, logger="agentor_temporal.activities")

    @function_tool(name="get_weather")
    async def weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "get_weather", city)
        for _ in range(200):  # 4 s
            await asyncio.sleep(0.02)
        return f"The weather in {city} is sunny and 22C."

    def respond(request: dict) -> object:  # type: ignore[type-arg]
        last = (request.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            return Reply(f"Answer: {last.get('content')}")
        if call == "model_request":
            return Hang(5, Reply("It is sunny."))
        return CallTool("get_weather", {"city": "Paris"}, id="call_1")

    with ScriptedModelServer() as model:
        model.set_script(respond)
        agent = scripted_agent(model, client, task_queue, tools=[weather], embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            if call == "model_request":
                await until(lambda: model.request_count, "the model request", timeout=30)
            else:
                await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
            await client.get_workflow_handle(run_id).terminate("test")
            assert (await asyncio.wait_for(started, 30)).status != "completed"
            await until(
                lambda: any(line in caplog.text for line in HEARD_OF_THE_END),
                "the worker to hear that the run ended",
                timeout=30,
            )
            result = await asyncio.wait_for(agent.aresume(run_id), 30)
        assert result.status == "completed", result.error
        if call == "model_request":
            assert (model.request_count, result.final_output) == (1, "It is sunny.")
        else:
            assert len(ledger_lines(ledger)) == 1, ledger_lines(ledger)
            assert model.request_count == 2


async def test_a_call_kept_for_a_resume_stops_once_the_resume_runs_it_on_another_worker(
    client: Client, task_queue: str, ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The terminated run's call is kept for a resume to join, but the resume's same call
    went to another worker (this one stopped polling): the kept call is stopped then, not
    left running beside it for the rest of the grace."""
    caplog.set_level(logging.INFO, logger="agentor_temporal.activities")

    @function_tool(name="get_weather")
    async def weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        first = not ledger_lines(ledger)
        ledger_write(ledger, "start", city)
        try:
            for _ in range(400 if first else 100):  # 8 s unless stopped, then 2 s
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            ledger_write(ledger, "stopped", city)
            raise
        ledger_write(ledger, "end", city)
        return f"The weather in {city} is sunny and 22C."

    def respond(request: dict) -> object:  # type: ignore[type-arg]
        last = (request.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            return Reply(f"Answer: {last.get('content')}")
        return CallTool("get_weather", {"city": "Paris"}, id="call_1")

    with ScriptedModelServer() as model:
        model.set_script(respond)
        agent = scripted_agent(model, client, task_queue, tools=[weather], embedded_worker=False)
        run_id = uuid.uuid4().hex
        async with build_worker(client, [agent], task_queue=task_queue):
            started = asyncio.ensure_future(agent.arun("Weather in Paris?", run_id=run_id))
            await until(lambda: ledger_lines(ledger), "the tool to start", timeout=30)
            await client.get_workflow_handle(run_id).terminate("test")
            assert (await asyncio.wait_for(started, 30)).status != "completed"
            await until(
                lambda: "kept for a resume to join" in caplog.text,
                "the worker to hear that the run ended",
                timeout=30,
            )
        other = await Client.connect(
            client.service_client.config.target_host,
            namespace=client.namespace,
            identity="another-worker",
        )
        async with build_worker(other, [agent], task_queue=task_queue):
            result = await asyncio.wait_for(agent.aresume(run_id), 30)
            assert result.status == "completed", result.error
            await until(lambda: len(ledger_lines(ledger)) >= 4, "the kept call to end", timeout=30)
        kinds = [line.split()[0] for line in ledger_lines(ledger)]
        assert kinds.count("stopped") == 1 and kinds.count("end") == 1, ledger_lines(ledger)
