"""A known key a streamed reply writes as its bytes' numbers never shows in its deltas.

A reply is masked whole once it ends, but its deltas are sent as they come, holding back an
end that may begin a key. A model quoting the bytes of a request (Java's `Arrays.toString`,
Go's `[]byte`, .NET's `BitConverter`, `xxd -i`) or a hex dump of a settings file (`xxd`)
streams them a number or a word a delta, and no delta held the key whole: each went out as
it came, the key spelled in the followers' deltas and in the run's history (the deltas are
its stream's signals). Real dev server, scripted model streaming word by word, real
`openai` client.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from agentor_temporal.testing import Reply, ScriptedModelServer

from helpers import PROMPT, history_text, keyed_agent, weather_tool

KEY = "sk-streamednum_Q7wE2rT9yU4iO1pA8sDf3Gh6"
REQUEST = f"POST /v1/chat HTTP/1.1\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()
SETTINGS = f"DEBUG=1\nOPENAI_API_KEY={KEY}\nREGION=eu\n".encode()


def _xxd(data: bytes) -> str:
    """`xxd`'s dump of `data`: offset, eight groups of two bytes, the bytes as characters."""
    lines = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        groups = " ".join(row[i : i + 2].hex() for i in range(0, len(row), 2))
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}: {groups:<39}  {shown}")
    return "\n".join(lines) + "\n"


def _xxd_i(data: bytes) -> str:
    items = ",".join(("\n  " if i % 12 == 0 else " ") + f"0x{b:02x}" for i, b in enumerate(data))
    return f"unsigned char req[] = {{{items}\n}};"


LAYOUTS = {
    "java": str(list(REQUEST)),
    "go": str(list(REQUEST)).replace(",", ""),
    "bitconverter": "-".join(f"{b:02X}" for b in REQUEST),
    "xxd-i": _xxd_i(REQUEST),
    "xxd": _xxd(SETTINGS),
}


def _pieces(data: bytes) -> list[str]:
    """Each 8-byte piece of `data` as the layouts spell it (a reader decoding any of them)."""
    found = []
    for at in range(len(data) - 7):
        piece = data[at : at + 8]
        found += [
            str(list(piece))[1:-1],
            " ".join(map(str, piece)),
            "-".join(f"{b:02X}" for b in piece),
            ", ".join(f"0x{b:02x}" for b in piece),
        ]
    return found


KEY_PIECES = _pieces(KEY.encode())


def _shows_key(text: str) -> bool:
    # the key's characters too: an xxd dump's column spells them, 16 a line
    flat = "".join(line[51:] for line in text.splitlines() if line[8:10] == ": ")
    return (
        any(piece in text for piece in KEY_PIECES)
        or any(KEY[i : i + 8] in text + flat for i in range(len(KEY) - 7))
        or KEY.encode()[10:18].hex() in text.replace(" ", "").replace("\n", "")
    )


async def test_a_key_streamed_as_its_bytes_numbers_never_shows_in_a_delta(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A reply spelling the key in five layouts, streamed a word a delta: the deltas spell
    what the recorded reply says (`***` for the key's numbers), and neither they nor the
    run's history show the key."""
    text = "Here is what the tool saw:\n\n" + "\n\nand\n\n".join(LAYOUTS.values()) + "\nDone."
    for name, layout in LAYOUTS.items():
        assert _shows_key(layout) and KEY not in layout, name
    with ScriptedModelServer([Reply(text)]) as model:
        agent = keyed_agent(
            "Stream Agent", weather_tool(), model, KEY, client, task_queue, tmp_path
        )
        run_id = uuid.uuid4().hex
        events = [e async for e in agent.stream_chat(PROMPT, run_id=run_id, stream_text=True)]
    deltas = [e.text or "" for e in events if e.type == "text_delta"]
    answer = [e.text or "" for e in events if e.type == "generation"][-1]
    assert len(deltas) > 5 and "***" in answer, answer
    streamed = "".join(deltas)
    assert not _shows_key(streamed), streamed
    assert streamed == answer
    assert not _shows_key(await history_text(client, run_id))
