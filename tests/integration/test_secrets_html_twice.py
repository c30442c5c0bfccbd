"""A known key whose HTML character references were escaped again never shows.

An HTML encoder (OWASP's, a template's) writes a key's `/`, `+` and `=` as references
(`&#x2F;`), which were read as the characters; HTML quoted in HTML or XML escapes each
reference's `&` once more: an Atom feed's `type="html"` entry (a CI server's build log
quoting the AWS secret access key it was given), a SOAP fault holding the service's XML
as text, a page showing a page's source. `&amp;#x2F;` was read as no character of the key,
so a model's reply quoting such a text showed the key whole (final output, JSONL,
history), and a tool's result the pieces between the references. So did a reference whose
`&` was JSON-escaped (`\\u0026#x2F;`): Go's `encoding/json` and .NET's System.Text.Json
write every `&` so, and a JSON answer holding HTML holds its references so. Real dev server,
scripted model, real `openai` client.
"""

from __future__ import annotations

import html
import json
import logging
import re
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import Reply

from helpers import keyed_calls

KEY = "sk-htmltwice_Q7wE2rT9yU4iO1pA8sD3"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY+EXAMPLEKEY3"
#: The secret's pieces between its `/` and `+`: each a run of its own once they are escaped.
PIECES = re.split(r"[/+]", SECRET)


def _encoded(text: str) -> str:
    """`text` as an HTML encoder writes it: what is not a letter or digit as a reference."""
    return "".join(c if c.isalnum() else f"&#x{ord(c):X};" for c in text)


LOG = f"<pre>export AWS_SECRET_ACCESS_KEY={_encoded(SECRET)}</pre>"
SPELLINGS = {
    # an Atom feed's entry: the build log's HTML escaped for XML
    "atom-feed": (
        '<feed xmlns="http://www.w3.org/2005/Atom"><entry><title>build #42</title>'
        f'<content type="html">{html.escape(LOG)}</content></entry></feed>'
    ),
    # a SOAP fault holding the service's XML answer as text, escaped again by its client
    "soap-fault": (
        "<soap:Fault><faultstring>Signature mismatch</faultstring><detail>"
        + html.escape(html.escape(f"<Secret>{_encoded(SECRET)}</Secret>"))
        + "</detail></soap:Fault>"
    ),
    # the `&` escaped as a reference of its own
    "numeric-amp": _encoded(SECRET).replace("&", "&#38;"),
    # a Go service's JSON answer holding the build log's HTML: `encoding/json` escapes every
    # `&`, `<` and `>` (`\\u0026`), as .NET's System.Text.Json does
    "go-json": json.dumps({"build": 42, "log_html": LOG})
    .replace("&", "\\u0026")
    .replace("<", "\\u003c")
    .replace(">", "\\u003e"),
}


def _shows(text: str) -> list[str]:
    return [piece for piece in PIECES if piece in text]


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_in_references_escaped_again_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    outcome: str,
) -> None:
    """A tool returning (or raising with) each text shows `***` for the key in its result,
    the model's next request, the store, history and the log; the model's reply quoting
    two of them too (final output, store, history)."""
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    for name, spelled in SPELLINGS.items():
        read = html.unescape(html.unescape(html.unescape(spelled.replace("\\u0026", "&"))))
        assert SECRET in read and SECRET not in html.unescape(spelled), name

    @function_tool
    def read_feed(which: str) -> str:
        """Read a service's answer.

        Args:
            which: The answer's name.
        """
        if outcome == "raised":
            raise RuntimeError(f"the service refused: {SPELLINGS[which]}")
        return SPELLINGS[which]

    reply = Reply(
        f"It said {SPELLINGS['atom-feed']}, {SPELLINGS['go-json']} and {SPELLINGS['numeric-amp']}."
    )
    result, shown = await keyed_calls(
        "Feed Agent",
        read_feed,
        "which",
        sorted(SPELLINGS),
        reply,
        KEY,
        client,
        task_queue,
        tmp_path,
        caplog,
    )
    assert {where: _shows(text) for where, text in shown.items() if _shows(text)} == {}
    assert "***" in str(result.final_output)
