"""A known key in a hex dump is masked: its bytes' digits and its characters' column.

A tool looking at a file byte by byte (`xxd .env` to find a stray BOM or CR, `hexdump -C`,
`od -A x -t x1z`, `tcpdump -X` of a request, `bytes.hex(" ")`, `xxd -p`) shows the key's
bytes in hex split by spaces and line breaks, and its characters cut every 16 into the
column at each line's end: no form of the key matched the digits, and the column's middle
pieces were no word's edge. Real dev server, scripted model, real `openai` client.
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

KEY = "sk-dump_Q7wE2rT9yU4iO1pA8sDf3Gh6Jk"
FILE = f"# settings\nDEBUG=1\nOPENAI_API_KEY={KEY}\nPORT=8080\n".encode()


def _column(chunk: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)


def _xxd(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        digits = " ".join(chunk.hex()[i : i + 4] for i in range(0, len(chunk) * 2, 4))
        lines.append(f"{at:08x}: {digits:<39}  {_column(chunk)}")
    return "\n".join(lines) + "\n"


def _hexdump_c(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        left = " ".join(f"{b:02x}" for b in chunk[:8])
        right = " ".join(f"{b:02x}" for b in chunk[8:])
        lines.append(f"{at:08x}  {left:<23}  {right:<23}  |{_column(chunk)}|")
    return "\n".join([*lines, f"{len(data):08x}"]) + "\n"


def _tcpdump_x(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        digits = " ".join(chunk.hex()[i : i + 4] for i in range(0, len(chunk) * 2, 4))
        lines.append(f"\t0x{at:04x}:  {digits:<40} {_column(chunk)}")
    return "\n".join(lines)


DUMPS = {
    "xxd": _xxd(FILE),
    "hexdump-C": _hexdump_c(FILE),
    "tcpdump-X": _tcpdump_x(
        b"POST /v1 HTTP/1.1\r\nAuthorization: Bearer " + KEY.encode() + b"\r\n"
    ),
    "hex-spaced": FILE.hex(" "),
    "hex-colons": FILE.hex(":").upper(),
    "xxd-p": "\n".join(FILE.hex()[i : i + 60] for i in range(0, len(FILE) * 2, 60)),
    "utf16-hexdump": _hexdump_c(f"OPENAI_API_KEY={KEY}\r\n".encode("utf-16")),
}


def _dumped(text: str) -> bytes:
    """The bytes each line's hex digits spell (after its offset), read as a person reads a
    dump: NULs dropped, letters folded."""
    data = bytearray()
    for line in re.split(r"\r?\n|\\r\\n|\\n", text):
        line = re.sub(
            r"^(?:\s|\\t)*(?:0x[0-9a-fA-F]+:|[0-9a-fA-F]{4,}:|[0-9a-fA-F]{6,}(?= ))", "", line
        )
        run = re.match(r"(?:[\s:]*(?:[0-9a-fA-F]{2})+(?![^\s:]))*", line)
        digits = re.sub(r"[^0-9a-fA-F]", "", run.group(0) if run else "")
        data += bytes.fromhex(digits[: len(digits) // 2 * 2])
    return bytes(data).replace(b"\x00", b"").lower()


def _shows_key(text: str) -> bool:
    """The key in a dump's digits, or 12 of its characters in a row (a dump's column)."""
    pieces = any(KEY[i : i + 12].lower() in text.lower() for i in range(len(KEY) - 11))
    return pieces or KEY.lower().encode() in _dumped(text)


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_in_a_hex_dump_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
) -> None:
    """A tool returning (or raising with) a dump of a file holding the key, in each layout
    a tool may write, shows `**` for the key's bytes in the result, the model's next
    request, the store, history and the log; the model's reply quoting one too."""
    caplog.set_level(logging.WARNING)
    for name, dump in DUMPS.items():
        assert _shows_key(dump) and KEY not in dump, name

    @function_tool
    def dump_file(layout: str) -> str:
        """Show a file's bytes.

        Args:
            layout: The dump's layout.
        """
        if outcome == "raised":
            raise RuntimeError(f"unexpected bytes:\n{DUMPS[layout]}")
        return DUMPS[layout]

    names = sorted(DUMPS)
    script = [*(CallTool("dump_file", {"layout": name}) for name in names)]
    script.append(Reply(f"The file is:\n{DUMPS['xxd']}"))
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Dump Agent", dump_file, model, KEY, client, task_queue, tmp_path)
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
    assert all("**" in a.result for a in answers if outcome == "returned"), answers
    assert [where for where, text in shown.items() if _shows_key(text)] == []
    if outcome == "raised":
        return  # an error is cut short for the model: the layout below is a result's
    # the dump's layout is kept, and its bytes that are not the key's
    xxd = str(answers[names.index("xxd")].result)
    assert len(xxd) == len(DUMPS["xxd"]) and xxd.endswith(
        "0a50 4f52 543d 3830 3830 0a    ****.PORT=8080.\n"
    )
    assert xxd.splitlines()[0] == DUMPS["xxd"].splitlines()[0]
