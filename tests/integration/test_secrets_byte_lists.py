"""A known key written as its bytes' numbers never shows.

Several languages show a byte string as a list of numbers: Go's `fmt.Println` of a
`[]byte`, Java's `Arrays.toString(bytes)`, Node's `JSON.stringify(buffer)`, a C array as
`xxd -i` writes it, .NET's `BitConverter.ToString`. A tool's debug output or a service's
error holding the bytes of a request or a settings file showed the key in numbers no form
of it matched: in the tool's result, the model's requests, a reply quoting them, the JSONL
and history. Real dev server, scripted model, real `openai` client.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import Reply

from helpers import keyed_calls

KEY = "sk-numbers_Q7wE2rT9yU4iO1pA8sDf3Gh6"
REQUEST = f"POST /v1/chat HTTP/1.1\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()


def _xxd_i(data: bytes) -> str:
    items = ",".join(("\n  " if i % 12 == 0 else " ") + f"0x{b:02x}" for i, b in enumerate(data))
    return f"unsigned char req[] = {{{items}\n}};\nunsigned int req_len = {len(data)};\n"


LAYOUTS = {
    "go": "request bytes: " + str(list(REQUEST)).replace(",", ""),
    "java": "java.io.IOException: bad frame " + str(list(REQUEST)),
    "node": json.dumps({"error": "bad frame", "raw": {"type": "Buffer", "data": list(REQUEST)}}),
    "xxd-i": _xxd_i(REQUEST),
    "bitconverter": "Frame: " + "-".join(f"{b:02X}" for b in REQUEST),
}


def _spelled(text: str) -> bytes:
    """The bytes each run of numbers in `text` spells, as a reader decodes them."""
    found = b""
    for run in re.findall(r"(?:[0-9A-F]{2}-){5,}[0-9A-F]{2}", text):
        found += bytes(int(d, 16) for d in run.split("-")) + b"|"
    for run in re.findall(r"(?:(?:0x[0-9a-f]{2}|\b\d{1,3}\b)[,\s\\nrt]*){6,}", text):
        numbers = re.findall(r"0x[0-9a-f]{2}|\b\d{1,3}\b", run)
        values = [int(n, 16) if n.startswith("0x") else int(n) for n in numbers]
        found += bytes(v for v in values if v < 256) + b"|"
    return found


def _shows_key(text: str) -> bool:
    spelled = _spelled(text)
    return any(KEY[i : i + 12].encode() in spelled for i in range(len(KEY) - 11))


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_in_its_bytes_numbers_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
) -> None:
    """A tool returning (or raising with) the bytes of a request holding the key, in each
    layout, shows `***` for the key's numbers in the result, the model's next request, the
    store, history and the log; the model's reply quoting one too."""
    caplog.set_level(logging.WARNING)
    for name, layout in LAYOUTS.items():
        assert _shows_key(layout) and KEY not in layout, name

    @function_tool
    def capture(layout: str) -> str:
        """Show the last request's bytes.

        Args:
            layout: How to show them.
        """
        if outcome == "raised":
            raise RuntimeError(LAYOUTS[layout])
        return LAYOUTS[layout]

    names = sorted(LAYOUTS)
    reply = Reply(f"The request was: {LAYOUTS['java']}")
    result, shown = await keyed_calls(
        "Wire Agent", capture, "layout", names, reply, KEY, client, task_queue, tmp_path, caplog
    )
    assert [where for where, text in shown.items() if _shows_key(text)] == []
