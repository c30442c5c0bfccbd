"""A known key holding `=` in a mail's quoted-printable text never shows.

Quoted-printable writes every `=` of a mail's text as `=3D`: an Azure storage key (base64,
ending in `==`) in a connection string a mail quotes reads `...GMGw=3D=3D` in the mail's
source, cut by a soft line break (`=` ending a line) wherever the 76th character falls. No
form of the key matched either way, so a tool fetching the mail's source (IMAP's RFC822,
an `.eml`) showed all of the key but its padding: in its result, the model's requests, the
JSONL, history and a model's reply quoting it. Real dev server, scripted model, real
`openai` client.
"""

from __future__ import annotations

import email.message
import json
import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-mail-equals_Q7wE3rT9yU1iO5pA8sD2"
STORAGE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: The key but its padding, a quarter at a time: what a reader of the mail sees of it.
QUARTERS = [STORAGE_KEY[i : i + 21] for i in range(0, 84, 21)]


def _mail(before: str) -> str:
    message = email.message.EmailMessage()
    message["Subject"] = "Storage account rotated"
    message.set_content(
        f"Hello,\n{before}DefaultEndpointsProtocol=https;AccountName=acme;"
        f"AccountKey={STORAGE_KEY};EndpointSuffix=core.windows.net\n",
        cte="quoted-printable",
    )
    return message.as_string()


#: The key is longer than a line: cut by a soft line break in its text, or in its padding.
MAILS = {"in-text": _mail("The new one: "), "in-padding": _mail("x" * 200 + "\n")}


async def test_a_key_holding_equals_in_a_mails_quoted_printable_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool returning the mail's source shows `***` for the storage key its process
    knows (AZURE_STORAGE_KEY) in its result, the model's next request, the final output (a
    reply quoting it), the store, history and the log."""
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("AZURE_STORAGE_KEY", STORAGE_KEY)
    for name, mail in MAILS.items():
        assert "GMGw=3D" in mail and STORAGE_KEY not in mail, name
    assert "=3D=\n=3D" in MAILS["in-padding"] and "=3D=3D" in MAILS["in-text"]

    @function_tool
    def fetch_mail(which: str) -> str:
        """Fetch a mail's source.

        Args:
            which: in-text or in-padding.
        """
        return MAILS[which]

    calls = [CallTool("fetch_mail", {"which": w}, id=f"call_{w}") for w in sorted(MAILS)]
    quoted = MAILS["in-padding"].split("\n\n", 1)[1]
    script = [calls, Reply(f"The mail says:\n{quoted}")]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Mail Agent", fetch_mail, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert len(answers) == 2 and all("***" in a.result for a in answers), answers
    shown = {
        **{f"tool result {a.args}": a.result or "" for a in answers},
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    unwrapped = {
        where: text.replace("=\n", "").replace("=\\n", "") for where, text in shown.items()
    }
    assert [(w, q) for w, text in unwrapped.items() for q in QUARTERS if q in text] == []
