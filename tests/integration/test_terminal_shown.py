"""What a model, a tool or a provider wrote reaches a person's terminal escaped, never acting.

A model's reply, a tool's result, a tool name the model made up and a provider's error
message are text a prompt or a web page can steer: an escape sequence in it (clear the
screen, set the title, move the cursor up), a carriage return or a backspace printed raw
by `run`'s progress and answer, `show` or `list` acts on the reader's terminal, and can
forge a line (an "approved" row over the real one). Human-readable output shows them as
escapes (`\\x1b`); `--json`, `--jsonl` and `export` keep the exact text.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
import uuid

from temporalio.client import Client

from agentor_temporal.testing import CallTool, Fail, Reply, ScriptedModelServer

from integration.test_cli import AGENT, PROMPT, cli, cli_all

#: Clears the screen, moves up a line and writes over it, sets the window title, rings.
ACTS = "\x1b[2J\x1b[1A\r\x1b[2Kcompleted, 0 tokens\x1b]0;pwned\x07\x08\x9b2J"
REPLY = f"The answer.{ACTS}\nSecond line."
CITY = f"Oslo{ACTS}"
#: A tool name the model made up: it is recorded and narrated as it came.
MADE_UP = f"get_weather{ACTS}"


def _env(model: ScriptedModelServer, task_queue: str, ledger: str) -> dict[str, str]:
    return {
        "MODEL_BASE_URL": model.base_url,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_LEDGER": ledger,
    }


def acting(text: str) -> list[str]:
    """The characters in `text` that act on a terminal (controls other than newline, tab)."""
    return [c for c in text if unicodedata.category(c) == "Cc" and c not in "\n\t"]


def test_a_models_reply_and_a_tools_result_are_shown_escaped_and_exported_exact(
    temporal_address: str, task_queue: str, ledger: str
) -> None:
    """`run`'s progress and answer and `show` escape what the model and the tool wrote;
    `export` gives it as it is."""
    script = [
        CallTool("get_weather", {"city": CITY}),
        CallTool(MADE_UP, {"city": "Bergen"}),
        Reply(REPLY),
    ]
    with ScriptedModelServer(script) as model:
        env = _env(model, task_queue, ledger)
        ran = cli("run", "--agent", AGENT, "--temporal", temporal_address, PROMPT, env=env)
    assert ran.returncode == 0, ran.stderr
    assert acting(ran.stdout) == [] and acting(ran.stderr) == [], (ran.stdout, ran.stderr)
    run_id = ran.stdout.splitlines()[0].split()[1]
    # the answer keeps its lines; the sequences show as escapes
    assert "The answer.\\x1b[2J\\x1b[1A\\r\\x1b[2Kcompleted" in ran.stdout
    assert "Second line." in ran.stdout.splitlines()
    assert "get_weather\\x1b[2J" in ran.stderr

    shown, exported = cli_all(
        [
            ("show", run_id, "--temporal", temporal_address),
            ("export", run_id, "--temporal", temporal_address),
        ]
    )
    assert shown.returncode == 0, shown.stderr
    assert acting(shown.stdout) == [], shown.stdout
    assert "output   The answer.\\x1b[2J" in shown.stdout
    assert "Oslo\\x1b[2J" in shown.stdout and "get_weather\\x1b[2J" in shown.stdout
    assert exported.returncode == 0, exported.stderr
    events = [json.loads(line) for line in exported.stdout.splitlines()]
    assert REPLY in [e.get("text") for e in events]
    assert f"The weather in {CITY} is sunny and 22C." in [e.get("result") for e in events]
    assert MADE_UP in [e.get("name") for e in events]


def test_a_providers_error_is_shown_escaped(
    temporal_address: str, task_queue: str, ledger: str
) -> None:
    """A provider's refusal quoting what it was sent is said escaped by `run` and `show`."""
    with ScriptedModelServer([Fail(400, f"refused: {ACTS}")]) as model:
        env = _env(model, task_queue, ledger)
        failed = cli("run", "--agent", AGENT, "--temporal", temporal_address, PROMPT, env=env)
    assert failed.returncode == 1, failed.stderr
    assert acting(failed.stdout) == [] and acting(failed.stderr) == [], failed.stderr
    assert "refused: \\x1b[2J" in failed.stderr
    run_id = failed.stdout.splitlines()[0].split()[1]
    shown, exported = cli_all(
        [
            ("show", run_id, "--temporal", temporal_address),
            ("export", run_id, "--temporal", temporal_address),
        ]
    )
    assert shown.returncode == 0, shown.stderr
    assert acting(shown.stdout) == [] and "refused: \\x1b[2J" in shown.stdout, shown.stdout
    errors = [json.loads(line).get("error") or "" for line in exported.stdout.splitlines()]
    assert any(f"refused: {ACTS}" in error for error in errors), errors


async def test_a_plain_clients_agent_name_is_shown_escaped(
    client: Client, temporal_address: str, task_queue: str
) -> None:
    """`show` heads a run a plain client started (no worker took it yet) with the agent name
    that client sent, escaped."""
    run_id, name = uuid.uuid4().hex, f"Weather Agent{ACTS}"
    handle = await client.start_workflow(
        "AgentRun", {"agent": name, "input": "hi"}, id=run_id, task_queue=f"none-{task_queue}"
    )
    try:
        shown = await asyncio.to_thread(cli, "show", run_id, "--temporal", temporal_address)
    finally:
        await handle.terminate("test over")
    assert shown.returncode == 0, shown.stderr
    assert acting(shown.stdout) == [], shown.stdout
    assert "agent    Weather Agent\\x1b[2J" in shown.stdout, shown.stdout
