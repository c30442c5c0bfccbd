"""What the private-run tests share: a secret prompt, key files, and a leak detector.

The detector reads `temporal workflow show -o json`, which prints payloads
as base64, so it looks in the text itself and in every string that decodes
from base64 (recursively: a stream item is a payload inside a payload).
"""

from __future__ import annotations

import base64
import binascii
import json
import subprocess
from pathlib import Path
from typing import Any

from agentor_temporal.codec import EncryptionKeys, new_key, parse_keys
from agentor_temporal.connection import temporal_binary

#: A prompt whose city the scripted model passes to the tool, so the city is
#: in the prompt, the tool's arguments, its result and the answer.
CITY = "Quixotica"
SECRET_PROMPT = f"What is the weather in {CITY}?"
SECRET_ANSWER = f"Answer based on tool: The weather in {CITY} is sunny and 22C."
#: Fragments of the prompt, the tool's args and result, the answer, the instructions.
SECRETS = [CITY, "weather in", "sunny and 22C", "Answer based on tool", "helpful weather"]
TOOL_SUMMARY = f"get_weather(city='{CITY}')"


def make_keys(*ids: str) -> dict[str, str]:
    """`{key_id: entry}` for fresh random keys."""
    return {key_id: f"{key_id}:{new_key()}" for key_id in ids}


def keys_of(*entries: str) -> EncryptionKeys:
    return parse_keys(",".join(entries))


def key_file(path: Path, *entries: str) -> Path:
    """A key file (0600), one entry per line, the first current."""
    path.write_text("".join(f"{e}\n" for e in entries))
    path.chmod(0o600)
    return path


def history_json(address: str, run_id: str, execution: str | None = None, *args: str) -> str:
    """`temporal workflow show -o json` of a run's execution, as the CLI prints it."""
    command = [
        temporal_binary(),
        "workflow",
        "show",
        "--workflow-id",
        run_id,
        "--address",
        address,
        "-o",
        "json",
        *args,
    ]
    if execution:
        command += ["--run-id", execution]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _texts(value: Any, depth: int = 0) -> list[str]:
    """Every string in a JSON value, and what each decodes to from base64."""
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in [k, *_texts(v, depth)]]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v, depth)]
    if not isinstance(value, str):
        return []
    found = [value]
    if depth < 4 and len(value) >= 4:
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return found
        found.append(decoded)
        try:
            found.extend(_texts(json.loads(decoded), depth + 1))
        except ValueError:
            pass
    return found


def leaks(history: str, secrets: list[str] = SECRETS) -> list[str]:
    """The secrets readable anywhere in a history dump (case-insensitive)."""
    texts = [history, *_texts(json.loads(history))]
    lowered = [t.lower() for t in texts]
    return [s for s in secrets if any(s.lower() in t for t in lowered)]
