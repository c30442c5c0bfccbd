"""The encryption keys a process holds are secrets of it, however it was given them.

A run's payloads are encrypted so that what Temporal stores is unreadable without
the keys; the JSONL mirror beside it is plain. A key read from a key file
(`AGENTOR_ENCRYPTION_KEYS_FILE`, `--encryption-keys-file`, `encryption_keys=Path`)
or given as text (`encryption_keys="id:base64"`) was never masked: a tool reading
the file, or an error quoting the key, recorded it as it was in the mirror, the
run's result and every decrypted view. Real dev server, scripted model, real
`openai` client.
"""

from __future__ import annotations

import base64
from pathlib import Path

from temporalio.client import Client

from agentor_temporal import Agentor, FileStore, function_tool
from agentor_temporal.codec import new_key
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import INSTRUCTIONS


def _forms(encoded: str) -> list[str]:
    """The key as a tool may show it: its base64 (both alphabets, padded or not) and hex."""
    raw = base64.b64decode(encoded)
    urlsafe = base64.urlsafe_b64encode(raw).decode()
    return [
        encoded,
        encoded.rstrip("="),
        urlsafe,
        urlsafe.rstrip("="),
        raw.hex(),
        raw.hex().upper(),
    ]


async def test_a_key_files_encryption_key_is_never_recorded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A tool reading the worker's key file (and showing the key in hex and URL-safe
    base64): the key is `***` in the tool's result, the run's result and the JSONL mirror."""
    encoded = new_key()
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# rotated monthly\nprod-1:{encoded}\n")
    keys.chmod(0o600)
    raw = base64.b64decode(encoded)

    @function_tool
    def read_config(path: str) -> str:
        """Read a configuration file.

        Args:
            path: The file.
        """
        urlsafe = base64.urlsafe_b64encode(raw).decode()
        return f"{Path(path).read_text()}hex {raw.hex()}\nurl-safe {urlsafe.rstrip('=')}"

    script = [CallTool("read_config", {"path": str(keys)}), Reply("Read.")]
    with ScriptedModelServer(script) as model:
        agent = Agentor(
            name="Config Agent",
            instructions=INSTRUCTIONS,
            tools=[read_config],
            base_url=model.base_url,
            api_key="sk-test-model-key-0123456789",
            temporal=client,
            task_queue=task_queue,
            store=FileStore(tmp_path / "runs"),
            encryption_keys=keys,
        )
        result = await agent.arun("What is in the config?")
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.result is not None and "prod-1:***" in answer.result, answer.result
    texts = {
        "result": repr(result),
        "store": (tmp_path / "runs" / f"{result.run_id}.jsonl").read_text(),
    }
    leaked = [(where, form) for where, text in texts.items() for form in _forms(encoded)]
    assert [(where, form) for where, form in leaked if form in texts[where]] == []
