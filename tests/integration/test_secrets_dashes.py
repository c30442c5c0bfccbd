"""A known key whose hyphens are written as typographic dashes is masked as the key is.

GPT models write the non-breaking hyphen (U+2011) for `-`, in a key they repeat too
(`sk‑proj‑...`), and a word processor's or a web page's text holds hyphens and minus signs
(U+2010, U+2212) where a key had `-`: each reads as the key, and is pasted as one. NFKC
keeps these dashes apart from `-`, so no form of the key matched: the model's reply showed
the key whole (final output, JSONL, history), and a tool's result and error the key's
pieces between the dashes shorter than a masked piece. Real dev server, scripted model,
real `openai` client.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-proj-Q7wE2rT9yU4iO1pA-Zk4Mx8Nc"
DASHES = {"non-breaking-hyphen": "\u2011", "hyphen": "\u2010", "minus-sign": "\u2212"}


def _read(text: str) -> str:
    """`text` as a person reads it: every dash a `-`, lower case."""
    for dash in DASHES.values():
        text = text.replace(dash, "-")
    return text.lower()


#: What must not be read anywhere: the key, and its parts between hyphens of 8 characters
#: or more (the last one is shorter than a masked piece of the key).
LEAKS = [KEY.lower()] + [part.lower() for part in KEY.split("-") if len(part) >= 8]


@pytest.mark.parametrize("outcome", ["returned", "raised"])
@pytest.mark.parametrize("dash", sorted(DASHES))
async def test_a_key_written_with_dashes_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    dash: str,
    outcome: str,
) -> None:
    """A tool's result or error and the model's reply holding the key with its hyphens as
    dashes show `***` for it, in the model's next request, the store, history and log."""
    caplog.set_level(logging.WARNING)
    written = KEY.replace("-", DASHES[dash])
    assert KEY not in written and _read(written) == KEY.lower()

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        page = f"Your key {written} was refused."
        if outcome == "raised":
            raise RuntimeError(page)
        return page

    script = [CallTool("get_weather", {"city": "London"}), Reply(f"Your key is {written}.")]
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
    leaks = {where: [p for p in LEAKS if p in _read(text)] for where, text in shown.items()}
    assert {where: found for where, found in leaks.items() if found} == {}
    assert "Your key *** was refused" in sent, sent
    assert str(result.final_output) == "Your key is ***."
