"""A known key whose JSON escapes were escaped again never shows.

PHP's `json_encode` writes `/` as `\\/`, .NET's System.Text.Json writes `+` as `\\u002B`:
a response quoting an AWS secret access key or an Azure storage key (base64: `/` and `+`)
holds them so. A tool that puts that response in its error with `!r` (`RuntimeError(f"...
{resp.text!r}")`), or returns it inside JSON of its own (`json.dumps({"body": resp.text})`),
escapes each escape's backslash once more: `\\\\/`, `\\\\u002B`. One level of escapes was
read as the character; the second was not, so the key's pieces between them showed (the
whole key where no piece of it was looked for: a model's reply quoting it).
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

KEY = "sk-twice_Q7wE3rT9yU1iO5pA8sD2"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY+EXAMPLEKEY2"
#: The key's pieces between its `/` and `+`: each a run of its own once they are escaped.
PIECES = re.split(r"[/+]", SECRET)
#: A PHP service's answer (`\/`) and a .NET one's (`\u002B`), as their clients read them.
PHP = json.dumps({"error": "SignatureDoesNotMatch", "secret": SECRET}).replace("/", "\\/")
DOTNET = json.dumps({"error": "Forbidden", "key": SECRET}).replace("+", "\\u002B")
SPELLINGS = {
    "php-repr": repr(PHP),
    "php-in-json": json.dumps({"status": 403, "body": PHP}),
    "dotnet-repr": repr(DOTNET),
    "dotnet-in-json": json.dumps({"status": 403, "body": DOTNET}),
    "thrice": json.dumps(json.dumps({"body": PHP})),
}


def _shows(text: str) -> list[str]:
    return [piece for piece in PIECES if piece in text]


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_escaped_twice_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    outcome: str,
) -> None:
    """A tool returning (or raising with) each spelling shows `***` for the key in its
    result, the model's next request, the final output, the store, history and the log;
    the model's reply quoting two of them too."""
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    for name, spelled in SPELLINGS.items():
        assert SECRET not in spelled and "\\\\" in spelled, name

    @function_tool
    def call_storage(which: str) -> str:
        """Ask the storage service.

        Args:
            which: The service's spelling.
        """
        if outcome == "raised":
            raise RuntimeError(f"storage refused: {SPELLINGS[which]}")
        return SPELLINGS[which]

    names = sorted(SPELLINGS)
    # one turn: failures are counted a turn, and a tool failing in two is withdrawn
    calls = [
        CallTool("call_storage", {"which": name}, id=f"call_{i}") for i, name in enumerate(names)
    ]
    script = [calls, Reply(f"It said {SPELLINGS['php-repr']} and {SPELLINGS['dotnet-in-json']}.")]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Twice Agent", call_storage, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert sorted(str(a.args["which"]) for a in answers) == names
    shown = {
        **{
            f"tool result {n}": f"{a.result} {a.error or ''}"
            for n, a in ((str(a.args["which"]), a) for a in answers)
        },
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    assert all("***" in a.result for a in answers), [a.result for a in answers]
    assert {where: _shows(text) for where, text in shown.items() if _shows(text)} == {}
