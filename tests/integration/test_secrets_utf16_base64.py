"""A known key in base64 of UTF-16 text never shows.

Windows writes text as UTF-16 and base64s it where text must pass as ASCII: PowerShell's
`-EncodedCommand` (a process list's command line starting a job with the key in its
environment), a `.reg` export or PowerShell-redirected file sent as a mail attachment
(MIME base64, wrapped at 76). The key's UTF-16 base64 was no form of it (its UTF-8's base64
was, and its UTF-16 as text or hex), so a tool returning such a command line or attachment
showed the key to anyone decoding it: in its result, the model's requests, the JSONL and
history. Real dev server, scripted model, real `openai` client.
"""

from __future__ import annotations

import base64
import logging
import re
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import Reply

from helpers import keyed_calls

KEY = "sk-utf16b64_Q7wE2rT9yU4iO1pA8sD"
COMMAND = f"$env:OPENAI_API_KEY='{KEY}'; python nightly.py"
SPELLINGS = {
    "encoded-command": "powershell.exe -NoProfile -EncodedCommand "
    + base64.b64encode(COMMAND.encode("utf-16-le")).decode(),
    "encoded-command-shifted": "pwsh -enc "
    + base64.b64encode(("#" + COMMAND).encode("utf-16-le")).decode(),
    # regedit's export: UTF-16 with its byte-order mark, base64-wrapped as a mail attaches it
    "mail-attachment": base64.encodebytes(
        f'Windows Registry Editor Version 5.00\r\n\r\n"ApiKey"="{KEY}"\r\n'.encode("utf-16")
    ).decode(),
}


def _decoded(text: str) -> str:
    """`text`'s base64 runs (wrapped too) decoded as UTF-16 from each alignment, NULs
    dropped: what a reader decoding them sees."""
    seen = [text]
    joined = re.sub(r"(?:\\n|\n)", "", text)
    for blob in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", joined):
        for skip in range(4):
            part = blob[skip:].rstrip("=")
            part = part[: len(part) // 4 * 4]
            try:
                data = base64.b64decode(part)
            except ValueError:
                continue
            for start in (0, 1):
                seen.append(data[start:].decode("utf-16-le", "replace"))
    return "\n".join(seen).replace("\x00", "")


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_in_base64_of_utf16_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
) -> None:
    """A tool returning (or raising with) each spelling shows `***` for the key in its
    result, the model's next request, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    for name, spelled in SPELLINGS.items():
        assert KEY in _decoded(spelled) and KEY not in spelled, name

    @function_tool
    def inspect_host(what: str) -> str:
        """Look at the Windows host.

        Args:
            what: What to look at.
        """
        if outcome == "raised":
            raise RuntimeError(f"unexpected: {SPELLINGS[what]}")
        return SPELLINGS[what]

    names = sorted(SPELLINGS)
    result, shown = await keyed_calls(
        "Host Agent",
        inspect_host,
        "what",
        names,
        Reply("Looked."),
        KEY,
        client,
        task_queue,
        tmp_path,
        caplog,
    )
    pieces = {KEY[i : i + 12] for i in range(len(KEY) - 11)}
    assert [w for w, text in shown.items() if any(p in _decoded(text) for p in pieces)] == []
