"""A known key cut in pieces across texts is masked in each piece.

A tool reading a file in chunks (`read_file(offset, limit)`, as coding agents do) cuts
its text where the chunk ends, not where the key does: one result ends with the key's
beginning, the next begins with its end, and a long key across three chunks makes the
middle one all key. No result holds the whole key, yet the model, history and the
JSONL read it from the pieces put together. Real dev server, scripted model, real
`openai` client.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-proj-Zq81fJ2xVb7Kc0LmN4pRt6Yw9AeHs3Ud5GiOxW7k"
ENV = f"HOME=/root\nOPENAI_API_KEY={KEY}\nDEBUG=1\n"
CHUNK = 20
#: The key's pieces as long as the shortest one masked (`key_pieces.PIECE_CHARS`).
PIECES = [KEY[at : at + 12] for at in range(len(KEY) - 11)]


@pytest.mark.parametrize("shape", ["text", "json"])
async def test_a_key_read_in_chunks_never_shows_in_any_chunk(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    shape: str,
) -> None:
    """An env file read 20 characters at a time (the key across three chunks, the middle
    one all key) as plain text or a JSON object: no chunk shows 12 characters of the key
    in the results, the model's requests, the store, history or the log."""
    caplog.set_level(logging.WARNING)

    @function_tool
    def read_file(offset: int) -> str:
        """Read the settings file, 20 characters from an offset.

        Args:
            offset: Where to begin.
        """
        chunk = ENV[offset : offset + CHUNK]
        return json.dumps({"content": chunk, "next": offset + CHUNK}) if shape == "json" else chunk

    offsets = range(0, len(ENV), CHUNK)
    script = [*(CallTool("read_file", {"offset": at}) for at in offsets)]
    script.append(Reply("The file sets HOME, OPENAI_API_KEY and DEBUG."))
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Env Agent", read_file, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps([request["messages"] for request in model.requests])
    assert result.status == "completed", result.error
    answers = [str(e.result) for e in result.events if e.type == "tool_result"]
    assert len(answers) == len(offsets)
    # the text around the key as it was: the chunks before and after it
    assert "OPENAI_AP" in answers[0] and "I_KEY=" in answers[1] and "DEBUG" in answers[3]
    assert sum("***" in answer for answer in answers) == 3, answers
    shown = {
        "tool results": "\n".join(answers),
        "model requests": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    assert [where for where, text in shown.items() if any(p in text for p in PIECES)] == []
