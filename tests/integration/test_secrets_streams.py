"""A key a tool writes past `print` on a command's streams: through their byte buffer
(`sys.stdout.buffer.write`, a command's captured output passed on as it came) or on
`sys.__stderr__`, the interpreter's own stream. Each is the process's stdout or stderr, where a
container's log collector keeps it, so each shows `***` as a printed line does."""

from __future__ import annotations

import uuid
from pathlib import Path

from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import run_agent_module

WRITING_AGENT = '''
import os, sys
from agentor_temporal import Agentor, function_tool

@function_tool
def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: The city.
    """
    key = os.environ["OPENAI_API_KEY"]
    # what a command the tool ran printed, passed on as the bytes it came as
    sys.stdout.buffer.write(f"curl: > Authorization: Bearer {key}\\n".encode())
    sys.stdout.buffer.write(b"in byte pieces: " + key[:9].encode())
    sys.stdout.buffer.write(key[9:].encode() + b"\\n")
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(f"stderr bytes: {key}\\n".encode())
    sys.stderr.buffer.flush()
    print(f"interpreter's stderr: {key}", file=sys.__stderr__)
    print(f"interpreter's stdout: {key}", file=sys.__stdout__)
    return "sunny"

agent = Agentor(
    name="Weather Agent",
    tools=[get_weather],
    base_url=os.environ["MODEL_BASE_URL"],
    task_queue=os.environ["AGENT_TASK_QUEUE"],
)
'''


def test_a_tools_bytes_and_interpreter_stream_writes_never_show_the_key(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A tool run by a command's embedded worker writes a key its process knows as bytes on
    stdout and stderr (whole, and cut across two writes) and on `sys.__stdout__` and
    `sys.__stderr__`: every such line shows `***`, and the lines keep their order."""
    key = f"sk-streams-{uuid.uuid4().hex}"
    script = [CallTool("get_weather", {"city": "Oslo"}), Reply("Cold.")]
    with ScriptedModelServer(script) as model:
        ran = run_agent_module(
            WRITING_AGENT, "writing_agent", key, model, temporal_address, task_queue, tmp_path
        )
    assert ran.returncode == 0, ran.stderr
    assert key not in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    assert key[:9] not in ran.stdout + ran.stderr
    assert "curl: > Authorization: Bearer ***\n" in ran.stdout
    assert "in byte pieces: ***\n" in ran.stdout
    assert "interpreter's stdout: ***" in ran.stdout
    assert "stderr bytes: ***\n" in ran.stderr and "interpreter's stderr: ***" in ran.stderr
    # the run's answer comes after what its tool wrote
    assert ran.stdout.index("interpreter's stdout") < ran.stdout.index('"Cold."')
