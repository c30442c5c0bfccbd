"""Logs a Windows tool re-saved: read as Agentor 0.1.1 reads them, or refused in one line.

An Agentor log opened and saved by a Windows editor or shell may come back
with CRLF line ends, a UTF-8 BOM, or in UTF-16 (PowerShell 5's `>` and
`Out-File`, Notepad's "Unicode"). Read as UTF-8 line by line, a UTF-16 log
gave its first event alone, every other line skipped as unreadable: resumed,
the run started over, asking the model again and running its tools again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import FileStore, function_tool
from agentor_temporal.testing import ScriptedModelServer

from helpers import scripted_agent

#: the fixture's events, the run killed after its tool answered
SEED_PREFIX = ["run_start", "generation", "tool_call", "tool_result"]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def weather(calls: list[str]) -> object:
    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        calls.append(city)
        return f"The weather in {city} is sunny and 22C."

    return get_weather


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
async def test_a_utf16_log_is_refused_in_one_line_and_nothing_runs(
    encoding: str, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Resuming a log saved as UTF-16 or UTF-32 runs nothing and says what the file is."""
    run_id = f"utf16-{encoding}-{task_queue}"
    text = (FIXTURES / "crashed-after-tool.jsonl").read_text()
    path = tmp_path / f"{run_id}.jsonl"
    path.write_bytes(text.encode(encoding))
    before = path.read_bytes()
    calls: list[str] = []
    with ScriptedModelServer() as model:
        agent = scripted_agent(
            model, client, task_queue, store=FileStore(tmp_path), tools=[weather(calls)]
        )
        with pytest.raises(Exception) as caught:
            await agent.aresume(run_id)
    assert model.request_count == 0 and calls == []
    message = str(caught.value)
    assert "UTF-8" in message and str(path) in message and "\n" not in message
    assert path.read_bytes() == before
    with pytest.raises(Exception, match="UTF-8"):
        FileStore(tmp_path).load(run_id)


@pytest.mark.parametrize("kind", ["crlf", "bom-crlf"])
async def test_a_log_resaved_on_windows_is_resumed_and_stays_agentors(
    kind: str, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """CRLF, a BOM, blank lines at the end: resumed with no tool run again, model asked once.

    Agentor's own FileStore reads the resumed log as this project does, but for
    a BOM: it skips the first line (its `json.loads` of a `str` refuses one).
    """
    run_id = f"win-{kind}-{task_queue}"
    data = (FIXTURES / "crashed-after-tool.jsonl").read_bytes()
    if "crlf" in kind:
        data = data.replace(b"\n", b"\r\n")
    if "bom" in kind:
        data = b"\xef\xbb\xbf" + data
    data += b"\n\r\n\n"  # blank lines at the end (and between, once resumed)
    (tmp_path / f"{run_id}.jsonl").write_bytes(data)
    calls: list[str] = []
    with ScriptedModelServer() as model:
        agent = scripted_agent(
            model, client, task_queue, store=FileStore(tmp_path), tools=[weather(calls)]
        )
        result = await agent.aresume(run_id)
    assert result.status == "completed"
    assert model.request_count == 1 and calls == []
    types = [e.type for e in FileStore(tmp_path).load(run_id)]
    assert types == [e.type for e in result.events]
    assert types == [*SEED_PREFIX, "run_start", "generation", "message", "run_end"]

    import agentor_ref

    theirs = agentor_ref.load()
    if theirs is not None:  # Agentor's own store reads the log as this project's does
        skipped = 1 if "bom" in kind else 0
        assert [e.type for e in theirs.FileStore(tmp_path).load(run_id)] == types[skipped:]
