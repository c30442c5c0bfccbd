"""Which spec a starter sends with a run: only one every worker here would record."""

from __future__ import annotations

import asyncio
import threading

from agentor_temporal import MemoryStore
from agentor_temporal._local_spec import serving, starter_spec
from agentor_temporal.activities import AgentActivities, AgentRegistry
from agentor_temporal.plugin import definition_of
from agentor_temporal.workflows import policies

from helpers import until, weather_agent


def registry(**options: object) -> AgentRegistry:
    agent = weather_agent(base_url="http://127.0.0.1:9/v1", task_queue="q", **options)
    return AgentRegistry([definition_of(agent)])


def test_a_starter_gives_the_spec_of_the_workers_in_its_process_when_they_agree() -> None:
    one, same = registry(), registry()
    assert starter_spec("q", "Weather Agent", None) is None  # no worker here
    with serving("q", one):
        spec = starter_spec("q", "Weather Agent", None)
        assert spec is not None and spec.behaviour == policies.BEHAVIOUR
        assert spec.fingerprint == one.get("Weather Agent").fingerprint()
        assert starter_spec("q", "Weather Agent", spec.fingerprint) == spec
        # another queue, another agent, another definition: nothing to give
        assert starter_spec("other", "Weather Agent", None) is None
        assert starter_spec("q", "Unknown Agent", None) is None
        assert starter_spec("q", "Weather Agent", "built-otherwise") is None
        with serving("q", same):
            assert starter_spec("q", "Weather Agent", None) == spec
        # a worker here that would record another spec (it mirrors into a store)
        with serving("q", registry(store=MemoryStore())):
            assert starter_spec("q", "Weather Agent", None) is None
        assert starter_spec("q", "Weather Agent", None) == spec
    assert starter_spec("q", "Weather Agent", None) is None  # the worker stopped


def test_a_spec_too_large_for_a_header_is_not_given() -> None:
    big = registry(instructions="x" * 40_000)
    with serving("q", big):
        assert starter_spec("q", "Weather Agent", None) is None


async def test_an_execution_ended_in_a_workflow_thread_is_forgotten_on_the_workers_loop() -> None:
    """The live calls belong to the worker's loop: iterating them from the workflow's
    thread raced it and failed a run's last workflow task (a model request asked again)."""
    bundle = AgentActivities(registry())
    bundle.loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    forgotten: list[tuple[str, str, bool, int]] = []
    bundle.calls.forget_execution = (  # type: ignore[method-assign]
        lambda wid, rid, recorded=True: (
            forgotten.append((wid, rid, recorded, threading.get_ident())) or 0
        )
    )
    await asyncio.to_thread(bundle.execution_ended, "run-1", "execution-1")
    await until(lambda: forgotten, "the forget to run on the loop", 5)
    # closed in a task the server may yet refuse: its local answers are kept a while
    assert forgotten == [("run-1", "execution-1", False, loop_thread)]
