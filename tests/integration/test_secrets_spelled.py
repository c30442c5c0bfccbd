"""A known key spelled so that it reads as the key is masked as the key is.

A tool echoing a gateway's HTML error page (the key as character references,
`&#115;&#107;...`), text copied with invisible characters between the key's letters
(zero-width space, word joiner, soft hyphen), a key in full-width letters: each
shows the key to whoever reads it. Real dev server, scripted model, real `openai`
client: the tool's result and error, the model's next request, the model's reply, the
JSONL store, history and the captured log records are all read as a person would
read them (references and escapes decoded, letters folded, invisible characters
dropped), and none shows the key.
"""

from __future__ import annotations

import html
import logging
import re
import unicodedata
import urllib.parse
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-spelled_Q7wE2rT9yU4iO1pA"

SPELLINGS = {
    "html-decimal": "".join(f"&#{ord(c)};" for c in KEY),
    "html-hex-and-named": "".join(f"&#x{ord(c):X};" for c in KEY[:10])
    + KEY[10:].replace("_", "&lowbar;"),
    "zero-width": "\u200b".join(KEY[:12]) + "\u2060" + "\u00ad".join(KEY[12:]),
    "full-width": "".join(chr(ord(c) + 0xFEE0) for c in KEY),
    # invisible characters that are not format characters (`Cf`)
    "variation-selectors": "\ufe0f".join(KEY[:8]) + "\u034f" + "\U000e0100".join(KEY[8:]),
    "hangul-fillers": "\u3164".join(KEY[:10]) + "\uffa0" + "\u180b".join(KEY[10:]),
    # an invisible character percent-encoded (its UTF-8 bytes) for a key all ASCII
    "percent-encoded-invisible": "%E2%80%8B".join(KEY[:8]) + "%e2%81%a0" + KEY[8:],
    # as written, after a letter whose lower case is two characters (`İ`: `i` and a dot)
    "after-dotted-capital-i": KEY,
}
#: What the page holds before the key: the Turkish words shift nothing masked after them.
BEFORE = {"after-dotted-capital-i": "İSTANBUL İZMİR "}


def _read(text: str) -> str:
    """`text` as a person reads it: escapes and references decoded, letters folded to
    their plain form and lower case, invisible characters dropped."""
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
    text = unicodedata.normalize("NFKC", html.unescape(urllib.parse.unquote(text)))
    return "".join(c for c in text if not _invisible(c)).lower()


def _invisible(char: str) -> bool:
    """Whether `char` is shown as nothing (Unicode's default-ignorable characters)."""
    return unicodedata.category(char) == "Cf" or char in _IGNORABLE


_IGNORABLE = {"\u034f", "\u180b", "\u3164", "\ufe0f", "\uffa0", "\u1160", "\U000e0100"}


@pytest.mark.parametrize("outcome", ["returned", "raised"])
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
async def test_a_key_spelled_to_read_as_the_key_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    spelling: str,
    outcome: str,
) -> None:
    """A tool's result or error and the model's reply holding the key as HTML references,
    with invisible characters between its letters or in full-width letters, show `***`."""
    caplog.set_level(logging.WARNING)
    spelled, before = SPELLINGS[spelling], BEFORE.get(spelling, "")
    assert KEY.lower() in _read(spelled) and (KEY not in spelled or before)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        page = f"<html><body><h1>401</h1><p>Invalid key: {before}{spelled}</p></body></html>"
        if outcome == "raised":
            raise RuntimeError(page)
        return page

    script = [
        CallTool("get_weather", {"city": "London"}),
        Reply(f"The gateway said {before}{spelled}."),
    ]
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
    assert "***" in shown["tool result"] and f"Invalid key: {before}***<" in sent, sent
    assert str(result.final_output) == f"The gateway said {before}***."
    assert [where for where, text in shown.items() if KEY.lower() in _read(text)] == []
