"""A known key in UTF-16 text read as bytes is masked as the key is.

A Windows file (PowerShell 5 writes `>` redirections as UTF-16), a registry export or a
Windows tool's output holds each character as two bytes, a NUL beside each ASCII letter.
A tool reading it as bytes returns it decoded as Latin-1 or UTF-8 (`s\\x00k\\x00-...`),
as its bytes (their repr: `b's\\\\x00k\\\\x00-...'`), JSON-escaped (`s\\\\u0000k...`) or in
hex (`73006b00...`): each reads as the key to the model and to whoever reads the run.
Real dev server, scripted model, real `openai` client.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-utf16_Q7wE2rT9yU4iO1pA8sD"
#: The `.env` line as PowerShell 5 writes it (`echo ... > .env`): UTF-16LE with its BOM.
FILE = f"OPENAI_API_KEY={KEY}\r\n".encode("utf-16")
SPELLINGS = {
    "latin-1": FILE.decode("latin-1"),
    "utf-8-replaced": FILE.decode("utf-8", "replace"),
    "big-endian": f"{KEY}".encode("utf-16-be").decode("latin-1"),
    "bytes-repr": repr(FILE),
    "json-escaped": json.dumps(FILE.decode("latin-1")),
    "hex": FILE.hex(),
    "hex-big-endian": KEY.encode("utf-16-be").hex().upper(),
}


def _read(text: str) -> str:
    """`text` as a reader of UTF-16 sees it: every way of writing a NUL dropped, and each
    hex dump decoded (either byte order), in lower case."""
    for blob in re.findall(r"(?:[0-9A-Fa-f]{4}){6,}", text):
        for start in (0, 2):
            data = bytes.fromhex(blob[start : start + (len(blob) - start) // 4 * 4])
            text += "\n" + data.decode("utf-16-le", "replace") + data.decode("utf-16-be", "replace")
    return re.sub(r"\x00|\\+u0000|\\+x00", "", text).lower()


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_in_utf16_text_read_as_bytes_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
) -> None:
    """A tool returning (or raising with) a UTF-16 file's text read as bytes, in each way
    a tool may write it, shows `***` in the result, the model's next request, the store,
    history and the log; the model's reply quoting it too."""
    caplog.set_level(logging.WARNING)
    for name, spelled in SPELLINGS.items():
        assert KEY.lower() in _read(spelled) and KEY not in spelled, name

    @function_tool
    def read_env(which: str) -> str:
        """Read a settings file.

        Args:
            which: The spelling.
        """
        if outcome == "raised":
            raise RuntimeError(f"cannot parse: {SPELLINGS[which]}")
        return SPELLINGS[which]

    names = sorted(SPELLINGS)
    script = [*(CallTool("read_env", {"which": name}) for name in names)]
    script.append(Reply(f"The file says {SPELLINGS['latin-1']} and {SPELLINGS['hex']}."))
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Env Agent", read_env, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert len(answers) == len(names)
    shown = {
        **{
            f"tool result {n}": f"{a.result} {a.error or ''}"
            for n, a in zip(names, answers, strict=True)
        },
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    assert all("***" in a.result for a in answers if outcome == "returned"), answers
    assert [where for where, text in shown.items() if KEY.lower() in _read(text)] == []
