"""A new run's history holds its steps and little else (behaviour level 1).

Every history event is server work (persistence, a visibility write for an
upsert) and worker work (the SDK converts each payload). A run recorded at
`policies.BEHAVIOUR` 1 takes the changes that used to be patches without
their markers and TemporalChangeVersion upserts, and sends the search
attributes one workflow task changes as one upsert (AgentTokens alone at most
once per `policies.TOKENS_INTERVAL`): the seed's run went from 34 events to
27, its upserts from 7 to 2. Runs recorded before keep replaying as they were
(`test_goldens.py`: the older goldens and the `behaviour_1_*` ones).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentor_temporal import FileStore, TemporalStore
from agentor_temporal.testing import ScriptedModelServer
from agentor_temporal.workflows import policies

from helpers import ANSWER, PROMPT, SEED_EVENT_TYPES, scripted_agent

UPSERT = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED


async def test_a_new_run_records_no_patch_markers_and_one_upsert_per_task(
    client: Client, model: ScriptedModelServer, task_queue: str, tmp_path: Path
) -> None:
    """The seed's run: 26 events, no patch marker, 2 upserts, the attributes as before.

    Started beside its embedded worker, it takes its spec from the start's
    header (level 6: no describe step); mirrored, it ends with a journal step.
    """
    agent = scripted_agent(model, client, task_queue, store=FileStore(tmp_path))
    result = await agent.arun(PROMPT)
    assert result.status == "completed" and result.final_output == ANSWER
    handle = client.get_workflow_handle(result.run_id)
    events = (await handle.fetch_history()).events

    markers = [
        e.marker_recorded_event_attributes.marker_name for e in events if e.event_type == MARKER
    ]
    assert markers == ["core_local_activity"]  # the run's end, into the mirror
    kinds = Counter(e.event_type for e in events)
    assert kinds[UPSERT] == 2 and len(events) == 26
    # no workflow task sends more than one upsert
    per_task, upserts = [], 0
    for event in events:
        if event.event_type == TASK_COMPLETED:
            per_task.append(upserts)
            upserts = 0
        upserts += event.event_type == UPSERT
    per_task.append(upserts)
    assert max(per_task) == 1
    # the level is recorded in the run's spec, where a replay reads it: the header
    started = events[0].workflow_execution_started_event_attributes
    spec = started.header.fields[policies.SPEC_HEADER].data.replace(b" ", b"")
    assert b'"behaviour":%d' % policies.BEHAVIOUR in spec

    attributes = (await handle.describe()).search_attributes
    assert attributes["AgentName"] == ["Weather Agent"]
    assert attributes["AgentStatus"] == ["completed"]
    assert attributes["AgentTokens"] == [result.usage.total_tokens] != [0]
    assert "TemporalChangeVersion" not in attributes
    assert [e.type for e in await TemporalStore(client).aload(result.run_id)] == SEED_EVENT_TYPES
