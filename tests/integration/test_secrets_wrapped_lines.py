"""A known key cut by a line break, or split between two string literals, is masked whole.

`textwrap` and `fold` break a long line at a key's hyphen (`sk-proj-` ending one line) or
inside a long key, a log's or a help text's wrapped lines go on indented, a shell script
goes on past a `\\` ending its line, and code holds a long key in two literals
(`"sk-proj-..." +` then `"..."` on the next line): each reads as the key once the break is
taken out, and is pasted so. Only wrapped base64 (no indentation, 16 base64 characters
ending the line) was searched across lines: a model's reply so writing the key showed it
(final output, JSONL, history), though a tool's result had its pieces masked. Real dev
server, scripted model, real `openai` client.
"""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-proj-Q7wE2rT9yU4iO1pA8Zk4Mx8NcLm3Vb6Xs0Dh5Fj2Gk7Pq1Wr9Ty4Ui6Op3As8Df0Gh2"

#: The key as each writer cuts it.
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


def _read(text: str) -> str:
    """`text` as a person pastes it: its line breaks (as they are or JSON-escaped), quotes,
    `+`s, backslashes and spaces taken out, lower case."""
    text = text.replace("\\n", "").replace("\\t", "")
    return re.sub(r"[\s\\\"'+]", "", text).lower()


def _leaks(text: str) -> list[str]:
    """The key's runs of 16 characters or more that `text` shows, read as pasted."""
    read = _read(text)
    key = KEY.lower()
    return [key[i : i + 16] for i in range(len(key) - 15) if key[i : i + 16] in read]


@pytest.mark.parametrize("spelling", sorted(WRITTEN))
async def test_a_key_cut_by_a_line_break_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    spelling: str,
) -> None:
    """A tool's result and the model's reply holding the key cut so show `***` for it, in
    the final output, the model's next request, the store, history and log."""
    caplog.set_level(logging.WARNING)
    written = WRITTEN[spelling]
    assert KEY not in written and KEY.lower() in _read(written)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        return written

    script = [CallTool("get_weather", {"city": "London"}), Reply(written)]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Weather Agent", get_weather, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = str(model.requests[-1]["messages"][-1]["content"])
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    shown = {
        "tool result": f"{answer.result} {answer.error or ''}",
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    leaks = {where: _leaks(text)[:1] for where, text in shown.items()}
    assert {where: found for where, found in leaks.items() if found} == {}
    assert "***" in str(result.final_output)
