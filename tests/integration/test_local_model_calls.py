"""`local_model_calls=True`: each model request is a local activity inside the run's workflow task.

Fewer round trips to the server per run (no activity task to schedule, poll
and complete for each generation), so the same log, JSONL and result must
come out of it: the request rides in the local activity's result, the one
place history keeps it, and `TemporalStore` reads it from there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, weather_agent


async def _shape(client: Client, run_id: str) -> tuple[list[str], list[str], int]:
    """(scheduled activity types, local activity types, workflow tasks) of a run's history."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled, local, tasks = [], [], 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details
            if "data" in details:
                local.append(json.loads(details["data"].payloads[0].data)["activity_type"])
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            tasks += 1
    return scheduled, local, tasks


async def test_the_seed_run_asks_the_model_in_local_activities(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """Same events, JSONL and result as the default; two workflow tasks fewer."""
    runs = {}
    for local in (False, True):
        store = FileStore(tmp_path / str(local))
        agent = weather_agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=store,
            name=f"Weather {local}",
            local_model_calls=local,
        )
        result = await agent.arun(PROMPT)
        assert result.status == "completed" and result.final_output == ANSWER
        projected = [e.to_dict() for e in await TemporalStore(client).aload(result.run_id)]
        assert [e["type"] for e in projected] == SEED_EVENT_TYPES
        # the generations' requests are read back whole, from the markers
        assert projected[1]["messages"] == projected[0]["messages"]
        assert len(projected[4]["messages"]) == 4
        assert [e.to_dict() for e in store.load(result.run_id)] == projected
        assert [e.to_dict() for e in result.events] == projected
        runs[local] = (projected, await _shape(client, result.run_id))

    (default, (scheduled, markers, tasks)), (mine, (l_scheduled, l_markers, l_tasks)) = (
        runs[False],
        runs[True],
    )
    assert scheduled == ["generate", "call_tool", "generate"] and "generate" not in markers
    assert l_scheduled == ["call_tool"] and l_markers.count("generate") == 2
    assert l_tasks == tasks - 2

    def comparable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the scripted model names each call afresh; times and agent names differ
        text = json.dumps(events).replace(str(events[2]["call_id"]), "call")
        skip = {"started_at", "ended_at", "agent"}
        return [{k: v for k, v in e.items() if k not in skip} for e in json.loads(text)]

    assert comparable(mine) == comparable(default)
