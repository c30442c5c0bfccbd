"""What a client sent, as the model reads it, with the keys this process knows masked.

A prompt, chat messages and a decision's reason are masked by the facade, the CLI
and serve before they are sent (`mask_input`), but a plain Temporal client
(`temporal workflow start`, a user's own workflow's `run_agent`, another language's
SDK) sends a run's input, and its `decide` update (or `decide_signal`) its denial,
as typed: the workflow cannot mask them (the keys are the worker process's
knowledge), so the run's history holds them. Readers mask them on the way out (the
JSONL mirror, `RunResult`, `show`); the model request did not, and a key pasted into
a prompt or a denial's reason was sent to the model. Only what a client wrote is
looked at (user messages, denials): the rest of a conversation was masked where it
came in (a tool's result, the model's reply), and masking every message of a long
conversation each turn would cost each request. System messages are left as they
are: the agent's instructions are one, and the model needs them as written (a key
in them is warned of when the worker starts, `registry`).
"""

from __future__ import annotations

from typing import Any

from agentor_temporal.activities._redact import mask_input, mask_secrets
from agentor_temporal.workflows.formatting import DENIED_ANSWER


def masked_client_text(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """`messages` with every known key masked in what a client wrote (each user message,
    each denial's answer), and whether any was.

    The list given is left as it is (a worker's cached conversation shares it).
    """
    out = messages
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user" and isinstance(content, (str, list)):
            masked: object = mask_input(content)
        elif role == "tool" and isinstance(content, str) and content.startswith(DENIED_ANSWER):
            masked = mask_secrets(content)
        else:
            continue
        if masked != content:
            if out is messages:
                out = list(messages)
            out[index] = {**message, "content": masked}
    return out, out is not messages
