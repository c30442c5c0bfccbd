"""A known key a streamed reply cuts by a line break never shows in its deltas.

A reply is masked whole once it ends (`sk-proj-` ending a line, an indented wrap, a shell's
`\\` continuation, a key split between string literals: `test_secrets_wrapped_lines`), but
its deltas go out as they come, holding back only an end that may begin a key: `sk-proj-\\n`
ended with a break, which no key's spelling holds, so it went out, and the rest of the key
after it, each delta holding no key whole. The followers (`stream`, serve's SSE, A2A) and
the run's history (the deltas are its stream's signals) showed the key as pasted. Real dev
server, scripted model streaming a word a delta, real `openai` client.
"""

from __future__ import annotations

import re
import textwrap
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal.testing import Reply, ScriptedModelServer

from helpers import PROMPT, history_text, keyed_agent, weather_tool

KEY = "sk-proj-Z3wE2rT9yU4iO1pA8Zk4Mx8NcLm3Vb6Xs0Dh5Fj2Gk7Pq1Wr9Ty4Ui6Op3As8Df0Gh2"

#: The key as each writer cuts it (as `test_secrets_wrapped_lines` has it).
WRITTEN = {
    "hyphen": f"Your key is sk-proj-\n{KEY[8:]}.",
    "indented": textwrap.fill(
        f"Error code: 401 - Incorrect API key provided: {KEY}. Check it.",
        40,
        subsequent_indent="    ",
    ),
    "shell": f"export OPENAI_API_KEY={KEY[:30]}\\\n    {KEY[30:]}",
    "literals": f'key = ("{KEY[:8]}" +\n       "{KEY[8:40]}"\n       "{KEY[40:]}")',
}


def _leaks(text: str) -> list[str]:
    """The key's runs of 16 characters or more that `text` shows, read as pasted (line
    breaks, as they are or JSON-escaped, quotes, `+`s, backslashes and spaces out)."""
    read = re.sub(r"[\s\\\"'+]", "", text.replace("\\n", "").replace("\\t", "")).lower()
    key = KEY.lower()
    return [key[i : i + 16] for i in range(len(key) - 15) if key[i : i + 16] in read]


@pytest.mark.parametrize("spelling", sorted(WRITTEN))
async def test_a_key_cut_by_a_line_break_never_shows_in_a_delta(
    client: Client, task_queue: str, tmp_path: Path, spelling: str
) -> None:
    """The deltas, as a follower joins them, show `***` for the key, as the recorded reply
    does; neither they nor the run's history show any 16 characters of it."""
    text = f"Here it is:\n{WRITTEN[spelling]}\nDone."
    # a word every 0.15 s: past the 0.1 s a published item gathers, so the key's pieces go
    # out in items of their own, as a real model's tokens do
    with ScriptedModelServer([Reply(text)], chunk_delay=0.15) as model:
        agent = keyed_agent(
            "Stream Agent", weather_tool(), model, KEY, client, task_queue, tmp_path
        )
        run_id = uuid.uuid4().hex
        events = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
    deltas = [e.text or "" for e in events if e.type == "text_delta"]
    answer = [e.text or "" for e in events if e.type == "generation"][-1]
    assert len(deltas) > 1 and "***" in answer and not _leaks(answer), answer
    streamed = "".join(deltas)
    assert _leaks(streamed)[:1] == [], streamed
    assert "***" in streamed
    assert _leaks(await history_text(client, run_id))[:1] == []
