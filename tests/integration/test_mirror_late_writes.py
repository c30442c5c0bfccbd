"""A step of an execution that no longer runs the run never rewrites the run's log.

A worker whose workflow task was lost (stalled past its timeout, cut off
from the server) while another worker took the run on can still finish its
journal step and mirror late. Its events were never recorded: the run's
record holds the other execution's at those positions. The late step once
took the record's events in the log for "written ahead of the record",
moved them to a side file and wrote its own in their place, so a finished
run's log no longer equalled `TemporalStore.load`; and it moved away events
the current execution had written ahead of its record.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from agentor_temporal import Event, FileStore, TemporalStore
from agentor_temporal.activities.journal import journal
from agentor_temporal.activities.registry import AgentRegistry
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.workflows.activity_types import JournalInput

from helpers import PROMPT, scripted_agent


def stamped_anew(events: list[Event]) -> list[Event]:
    """The events as another execution of the same steps records them (its own times)."""
    again = [dataclasses.replace(e) for e in events]
    for event in again:
        if event.started_at is not None and event.ended_at is not None:
            event.started_at -= 1.0
            event.ended_at -= 0.5
    return again


@pytest.mark.parametrize("ahead", [0, 1], ids=["finished", "current-step-written-ahead"])
async def test_a_late_step_of_a_superseded_execution_leaves_the_log_to_the_record(
    ahead: int,
    client: Client,
    model: ScriptedModelServer,
    task_queue: str,
    tmp_path: Path,
) -> None:
    """The log keeps the record's events, and the current execution's written ahead of it."""
    runs = tmp_path / "runs"
    agent = scripted_agent(model, client, task_queue, store=FileStore(runs))
    result = await agent.arun(PROMPT)
    run_id = result.run_id
    assert run_id is not None
    recorded = await TemporalStore(client).aload(run_id)
    # the second generation onwards, as the superseded execution made them
    at = [e.type for e in recorded].index(
        "generation", 1 + [e.type for e in recorded].index("generation")
    )
    late = stamped_anew(recorded[at:])
    assert [e.to_dict() for e in late] != [e.to_dict() for e in recorded[at:]]
    path = runs / f"{run_id}.jsonl"
    ahead_lines = [
        Event(type="message", text=f"written ahead {n}", turn=9).to_json() + "\n"
        for n in range(ahead)
    ]
    with path.open("a") as f:  # the current execution's next step, not yet in history
        f.writelines(ahead_lines)
    before = path.read_bytes()

    # the superseded worker: its own process, so its own store and registry
    registry = AgentRegistry(default_store=FileStore(runs))
    step = JournalInput(
        run_id=run_id,
        agent=agent.name,
        mirror=True,
        start=at,
        events=[e.to_dict() for e in late],
        new_from=at,
    )
    await ActivityEnvironment(client=client).run(journal, registry, step)

    assert path.read_bytes() == before
    held = FileStore(runs).load(run_id)
    assert [e.to_dict() for e in held[: len(recorded)]] == [e.to_dict() for e in recorded]
    assert len(held) == len(recorded) + ahead
    assert sorted(p.name for p in runs.iterdir()) == [path.name]
