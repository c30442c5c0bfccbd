"""A person's denial, as the model reads it, with the keys this process knows masked.

A decision's reason and name are masked by the facade, the CLI and serve
before they are sent (`mask_input`), but a plain Temporal client's `decide`
update (or `decide_signal`) reaches the run as typed: the workflow cannot mask
it (the keys are the worker process's knowledge), so the run's history holds
it. Readers mask it on the way out (the JSONL mirror, `RunResult`, `show`);
the model request did not, and a key pasted into a denial's reason was sent
to the model. Only denials are looked at: the rest of a conversation was
masked where it came in (a tool's result, the model's reply), and masking
every message of a long conversation each turn would cost each request.
"""

from __future__ import annotations

from typing import Any

from agentor_temporal.activities._redact import mask_secrets
from agentor_temporal.workflows.formatting import DENIED_ANSWER


def masked_denials(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """`messages` with every known key masked in each denial's answer, and whether any was.

    The list given is left as it is (a worker's cached conversation shares it).
    """
    out = messages
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        content = message.get("content")
        if not isinstance(content, str) or not content.startswith(DENIED_ANSWER):
            continue
        masked = mask_secrets(content)
        if masked != content:
            if out is messages:
                out = list(messages)
            out[index] = {**message, "content": masked}
    return out, out is not messages
