"""A known key in a mail's source, cut by a quoted-printable soft line break, is masked.

A tool reading a mailbox (IMAP's RFC822 fetch, a `.eml` file, Gmail's raw format) returns
the mail's source: a text part in quoted-printable keeps its lines under 76 characters by
ending one in `=` and going on in the next, wherever the 76th character falls, so a key in
the mail's text (a CI notice quoting the worker's token, "your new API key is ...") is cut
in two by `=` and a line break. Each half passed the mask; the model, history and the
JSONL read the key from the two put together. Real dev server, scripted model, real
`openai` client.
"""

from __future__ import annotations

import email.message
import json
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-proj-Mq81fJ2xVb7Kc0LmN4pRt6Yw9AeHs3Ud5GiOxW7k"


#: Key characters on the line before the soft break: 8 (its end on the next line) or 40.
CUTS = {"after-8": 8, "after-40": 40}


def _mail(line_ending: str, cut: int) -> str:
    message = email.message.EmailMessage()
    message["Subject"] = "Your new API key"
    # a quoted-printable line, as `email` writes it, holds 77 characters and its `=`
    before = "x" * (77 - len(" your key: ") - cut)
    message.set_content(
        f"Hello,\n{before} your key: {KEY} (keep it safe)\n", cte="quoted-printable"
    )
    return message.as_string().replace("\n", line_ending)


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("shape", ["lf", "crlf", "json"])
async def test_a_key_cut_by_a_soft_line_break_never_shows(
    client: Client, task_queue: str, tmp_path: Path, shape: str, cut: str
) -> None:
    """A mail's source returned as it is (LF or CRLF line ends) or inside a JSON object, the
    soft break leaving 8 or 40 of the key's characters before it: the mail read as its
    reader reads it (soft breaks taken out) shows `your key: *** (keep`, not a piece of the
    key, in the result, the model's request, the model's answer quoting the mail, the store
    and history."""
    source = _mail("\r\n" if shape == "crlf" else "\n", CUTS[cut])
    assert f"{KEY[: CUTS[cut]]}=" in source

    @function_tool
    def fetch_mail(uid: int) -> str:
        """Fetch a mail's source.

        Args:
            uid: The mail's id.
        """
        return json.dumps({"uid": uid, "rfc822": source}) if shape == "json" else source

    # the model quotes the mail's body as its source has it (a reply's text is masked whole,
    # not by pieces: only the soft break's own reading masks the key there)
    quoted = source[source.index("Hello,") :]
    script = [CallTool("fetch_mail", {"uid": 7}), Reply(f"It says:\n{quoted}")]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Mail Agent", fetch_mail, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps([request["messages"] for request in model.requests])
    assert result.status == "completed", result.error
    answers = [str(e.result) for e in result.events if e.type == "tool_result"]
    assert "***" in answers[0] and "Your new API key" in answers[0], answers
    shown = {
        "tool result": answers[0],
        "model requests": sent,
        **await recorded(result, client, tmp_path),
    }

    def joined(text: str) -> str:
        # the soft line breaks as a reader of the mail takes them out, as they are or escaped
        for brk in ("=\r\n", "=\n", "=\\r\\n", "=\\n", "=\\\\r\\\\n", "=\\\\n"):
            text = text.replace(brk, "")
        return text

    assert [
        where for where, text in shown.items() if "your key: *** (keep" not in joined(text)
    ] == []
    # no piece of the key, however short, where the mail put it
    assert [where for where, text in shown.items() if KEY[:8] in text or KEY[-8:] in text] == []
