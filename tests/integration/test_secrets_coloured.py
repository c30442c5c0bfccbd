"""A known key a command coloured in part never shows.

`grep --color=always` wraps its match in a terminal's colour codes (`ESC[01;31mESC[K` ...
`ESC[mESC[K`), so a tool grepping a settings file for `sk-[a-z]+` got the key cut in two by
them, which a terminal shows as the key whole. No form of the key matched: a command's
stdout and log (masked of whole keys) showed it as it was, and a tool's result (masked of a
key's pieces at a word's edge) kept the piece under 12 characters before the codes.
Real dev server, scripted model, real `openai` client, real `grep`.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded, run_agent_module

pytestmark = pytest.mark.skipif(shutil.which("grep") is None, reason="no grep")

KEY = "sk-coloured-Q7wE3rT9yU1iO5pA8sD2"
#: What grep highlights: the key's first 11 characters.
HEAD = KEY[:11]


def _grep(folder: Path, key: str) -> str:
    env = folder / ".env"
    env.write_text(f"OPENAI_API_KEY={key}\nDEBUG=1\n")
    ran = subprocess.run(
        ["grep", "--color=always", "-E", "sk-[a-z]+", str(env)],
        capture_output=True,
        text=True,
        check=True,
    )
    return ran.stdout


@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_coloured_in_part_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outcome: str,
) -> None:
    """A tool returning (or raising with) grep's coloured line, and its repr, shows `***`
    for the key in its result, the model's next request, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    folder, store = tmp_path / "project", tmp_path / "store"
    folder.mkdir()
    line = _grep(folder, KEY)
    assert KEY not in line and "\x1b[" in line and HEAD in line

    @function_tool
    def find_key(spelling: str) -> str:
        """Find the project's key.

        Args:
            spelling: as grep wrote it, or its repr.
        """
        found = line if spelling == "plain" else repr(line)
        if outcome == "raised":
            raise RuntimeError(f"more than one key: {found}")
        return found

    calls = [CallTool("find_key", {"spelling": s}, id=f"call_{s}") for s in ("plain", "repr")]
    with ScriptedModelServer([calls, Reply("Found it.")]) as model:
        agent = keyed_agent("Grep Agent", find_key, model, KEY, client, task_queue, store)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert len(answers) == 2 and all("***" in a.result for a in answers), answers
    shown = {
        **{f"tool result {a.args}": f"{a.result} {a.error or ''}" for a in answers},
        "model request": sent,
        **await recorded(result, client, store, caplog),
    }
    assert [where for where, text in shown.items() if HEAD in text] == []


GREPPING_AGENT = '''
import logging, os, subprocess, sys
from agentor_temporal import Agentor, function_tool

@function_tool
def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: The city.
    """
    ran = subprocess.run(
        ["grep", "--color=always", "-E", "sk-[a-z]+", ".env"], capture_output=True, check=True
    )
    # grep's output passed on as it came, and logged by the tool's own logger
    sys.stdout.buffer.write(ran.stdout)
    sys.stdout.buffer.flush()
    logging.getLogger("weather.tools").warning("found %s", ran.stdout.decode())
    return "sunny"

agent = Agentor(
    name="Weather Agent",
    tools=[get_weather],
    base_url=os.environ["MODEL_BASE_URL"],
    task_queue=os.environ["AGENT_TASK_QUEUE"],
)
'''


def test_a_key_coloured_in_part_never_shows_on_a_commands_streams(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A tool run by `agentor-temporal run`'s embedded worker writes grep's coloured line on
    stdout and logs it: both show `***` for the key its process knows."""
    key = KEY.replace("Q7wE", "Zk4M")
    _grep(tmp_path, key)
    script = [CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    with ScriptedModelServer(script) as model:
        ran = run_agent_module(
            GREPPING_AGENT, "grepping_agent", key, model, temporal_address, task_queue, tmp_path
        )
    assert ran.returncode == 0, ran.stderr
    both = ran.stdout + ran.stderr
    assert "OPENAI_API_KEY=" in ran.stdout and "found OPENAI_API_KEY=" in ran.stderr, both
    assert key[11:] not in both and HEAD not in both, both
