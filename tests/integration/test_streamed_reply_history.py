"""A long reply streamed a word a chunk costs its run's history its text, not 30 times it.

Each delta item is a payload of its own in the publish signal (~190 bytes
besides its text): a provider streaming a token a chunk faster than the
publisher's batch interval (fast inference, a replayed stream) put one item
per word in history, 14.7 MB for a 480 kB reply, an execution far over its
budget in one generation, which no continue-as-new can split. Deltas that
come within one batch interval now go as one item.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import TemporalStore
from agentor_temporal.testing import Reply, ScriptedModelServer

from helpers import scripted_agent

#: ~60 kB of short words: ~10,000 chunks, one a word
WORDS = 10_000


async def test_a_reply_streamed_a_word_a_chunk_adds_about_its_text_to_history(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    text = " ".join(f"w{i}" for i in range(WORDS))
    with ScriptedModelServer([Reply(text)]) as model:
        agent = scripted_agent(model, client, task_queue)
        run_id = uuid.uuid4().hex
        received = [e async for e in agent.stream_chat("Write.", run_id=run_id, stream_text=True)]
    deltas = "".join(e.text or "" for e in received if e.type == "text_delta")
    assert deltas == text and received[-1].type == "run_end"
    result = await client.get_workflow_handle(run_id).result()
    assert result["status"] == "completed" and result["final_output"] == text
    total = 0
    for segment in await TemporalStore(client).segments(run_id):
        handle = client.get_workflow_handle(run_id, run_id=segment.execution_run_id)
        history = await handle.fetch_history()
        total += sum(event.ByteSize() for event in history.events)
    # the text is in history about five times (deltas, the activity's result,
    # generation, message, run_end), and the run's other events: 0.57-0.64 MB
    # here; one item a word made it 2.9 MB
    assert total < 20 * len(text), f"{total:,} bytes of history for {len(text):,} of text"
