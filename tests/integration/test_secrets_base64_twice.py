"""A known key in base64 of a text holding its base64, or its percent-encoding, never shows.

A Kubernetes secret's data is base64 of what it holds: a registry secret holds a Docker
config, whose `auth` is base64 of `user:token` (`kubectl get secret regcred -o yaml`'s
`.dockerconfigjson`), and a secret holding a URL holds its credential percent-encoded
(`%2F` for `/`). No form of the key matched either (its base64 inside a longer base64 text
did, not that base64 again, nor its percent-encoding's), so a tool returning such a secret
showed the key to anyone decoding it: in its result, the model's requests, the JSONL and
history. Real dev server, scripted model, real `openai` client.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import Reply

from helpers import keyed_calls

KEY = "sk-b64twice_Q7wE2rT9+yU4iO1/pA8sD3fG6h"


def _secret(name: str, data: dict[str, str]) -> str:
    """`kubectl get secret NAME -o yaml`: each value base64'd."""
    lines = [f"  {k}: {base64.b64encode(v.encode()).decode()}" for k, v in data.items()]
    return "\n".join(["apiVersion: v1", "data:", *lines, "kind: Secret", f"  name: {name}"])


def _docker_config(user: str) -> str:
    auth = base64.b64encode(f"{user}:{KEY}".encode()).decode()
    return json.dumps({"auths": {"registry.example": {"auth": auth}}})


SPELLINGS = {
    # `user:` before the key puts it at each of base64's three alignments
    **{
        f"registry-{user}": _secret("regcred", {".dockerconfigjson": _docker_config(user)})
        for user in ("ci", "bot", "ci-bot")
    },
    "webhook-url": _secret(
        "hooks", {"url": f"https://hooks.example/v1/notify?api_key={quote(KEY, safe='')}"}
    ),
}


def _decoded(text: str, depth: int = 2) -> str:
    """`text` with its base64 runs decoded from each alignment, and theirs (`depth` times),
    percent-escapes read: what a reader decoding them sees."""
    seen = [text, unquote(text)]
    if depth:
        for blob in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
            for skip in range(4):
                part = blob[skip:].rstrip("=")
                part = part[: len(part) - (len(part) % 4 == 1)]
                part += "=" * (-len(part) % 4)
                try:
                    data = base64.b64decode(part).decode("latin-1")
                except ValueError:
                    continue
                seen.append(_decoded(data, depth - 1))
    return "\n".join(seen)


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_in_base64_of_its_base64_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
) -> None:
    """A tool returning (or raising with) each secret shows `***` for the key in its result,
    the model's next request, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    for name, spelled in SPELLINGS.items():
        assert KEY in _decoded(spelled) and KEY not in spelled, name

    @function_tool
    def get_secret(name: str) -> str:
        """Show a Kubernetes secret.

        Args:
            name: The secret's name.
        """
        if outcome == "raised":
            raise RuntimeError(f"unexpected secret:\n{SPELLINGS[name]}")
        return SPELLINGS[name]

    names = sorted(SPELLINGS)
    result, shown = await keyed_calls(
        "Cluster Agent",
        get_secret,
        "name",
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
