"""The HTTP server's parts that need no server: the optional extra, the card, SSE, A2A states."""

from __future__ import annotations

import asyncio
import glob
import signal
import subprocess
import sys
import types
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal import Agentor, ConnectionFailed, Event, RunResult, function_tool
from agentor_temporal.cli import execute
from agentor_temporal.serve import _server, a2a
from agentor_temporal.serve._compat import project
from agentor_temporal.serve._events import frame, keepalive
from agentor_temporal.serve._state import Agents, RunView
from agentor_temporal.store import PendingApproval

from helpers import ROOT, free_port


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    return city


def agent(name: str = "Weather Agent", **kwargs: Any) -> Agentor:
    return Agentor(name=name, instructions="You are a helpful weather assistant.", **kwargs)


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin"},
    )


def test_the_core_never_imports_the_serve_extra() -> None:
    """Agents, runs and the CLI import no fastapi, uvicorn or a2a: the extra stays optional."""
    out = python(
        "import sys, agentor_temporal\n"
        "from agentor_temporal import Agentor\n"
        "import agentor_temporal.cli, agentor_temporal.worker, agentor_temporal.serve\n"
        "Agentor(name='x')\n"
        "agentor_temporal.cli.build_parser().parse_args(['serve', '--agents', 'a:b'])\n"
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'a2a', 'starlette') if m in sys.modules))"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_the_extra_serving_says_what_to_install() -> None:
    """No fastapi: agent.serve() and `agentor-temporal serve` name the extra, no traceback."""
    out = python(
        "import sys\n"
        "sys.modules['fastapi'] = None\n"
        "from agentor_temporal import Agentor\n"
        "from agentor_temporal.serve import ServeUnavailable\n"
        "try:\n"
        "    Agentor(name='x').serve()\n"
        "except ServeUnavailable as exc:\n"
        "    print('serve:', exc)\n"
        "from agentor_temporal.cli import execute\n"
        "print('cli:', execute(['serve', '--agents', 'procs.serve_agents:weather']))\n"
    )
    assert out.returncode == 0, out.stderr
    assert "serve: serving over HTTP needs fastapi: pip install 'agentor-temporal[serve]'" in (
        out.stdout
    )
    assert "cli: 2" in out.stdout
    assert "pip install 'agentor-temporal[serve]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_serve_command_refuses_bad_options_as_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bad ports and agent paths exit 2, no Temporal exits 1: one line, before anything listens."""
    with pytest.raises(SystemExit) as exited:
        execute(["serve", "--agents", "procs.serve_agents:weather", "--port", "70000"])
    assert exited.value.code == 2
    assert "expected a TCP port" in capsys.readouterr().err
    assert execute(["serve", "--agents", "procs.cli_agents:not_an_agent"]) == 2
    assert "not an agent" in capsys.readouterr().err
    assert execute(["serve", "--agents", "no_such_module:agent"]) == 2
    assert "cannot import 'no_such_module'" in capsys.readouterr().err
    assert execute(["serve", "--agents", ""]) == 2
    assert "no agents given" in capsys.readouterr().err
    unreachable = ["--temporal", "127.0.0.1:1", "--port", str(free_port())]
    assert execute(["serve", "--agents", "procs.serve_agents:weather", *unreachable]) == 1
    err = capsys.readouterr().err
    assert "Cannot reach Temporal at 127.0.0.1:1" in err and "Traceback" not in err


def test_a_server_needs_distinct_agents_on_one_temporal() -> None:
    """No agents, a non-agent, two agents of one name, or two Temporal servers are refused."""
    with pytest.raises(ValueError, match="at least one agent"):
        Agents([])
    with pytest.raises(ValueError, match="is not an agentor_temporal.Agentor"):
        Agents([object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="two agents are named 'A'"):
        Agents([agent("A"), agent("A")])
    with pytest.raises(ValueError, match="different Temporal servers"):
        Agents([agent("A", temporal="h1:7233"), agent("B", temporal="h2:7233")])
    served = Agents([agent("A"), agent("B")])
    assert served.get(None).name == "A" and served.get("B").name == "B"


def _agentor_a2a() -> Any:
    """Agentor 0.1.1's own `agentor/a2a.py`, run from its wheel (None without the wheel)."""
    wheels = glob.glob(str(ROOT / ".cache" / "wheels" / "agentor-0.1.1-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as wheel:
        sources = {n: wheel.read(f"agentor/{n}.py").decode() for n in ("core/schema", "a2a")}
    modules: dict[str, types.ModuleType] = {}
    for name in ("agentor", "agentor.core"):
        modules[name] = types.ModuleType(name)
        modules[name].__path__ = []
    saved = {k: sys.modules.get(k) for k in ("agentor", "agentor.core", "agentor.core.schema")}
    try:
        sys.modules.update(modules)
        schema = types.ModuleType("agentor.core.schema")
        sys.modules["agentor.core.schema"] = schema
        exec(compile(sources["core/schema"], "agentor/core/schema.py", "exec"), schema.__dict__)
        module = types.ModuleType("agentor.a2a")
        exec(compile(sources["a2a"], "agentor/a2a.py", "exec"), module.__dict__)
        return module
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value


def test_agent_card_is_field_for_field_agentors() -> None:
    """Without a token, the card is exactly what Agentor 0.1.1's A2AController serves."""
    reference = _agentor_a2a()
    if reference is None:
        pytest.skip("Agentor 0.1.1's wheel is not in .cache/wheels (scripts/test fetches it)")
    mine = agent(tools=[get_weather])
    skills = [
        reference.AgentSkill(
            id="tool_get_weather", name="get_weather", description=t.description, tags=[]
        )
        for t in mine.tools
    ]
    theirs = reference.A2AController(
        name=mine.name, description=mine.instructions, skills=skills, url="http://127.0.0.1:8000"
    ).agent_card.model_dump()
    assert a2a.agent_card(mine, "http://127.0.0.1:8000", False).model_dump() == theirs
    bare = reference.A2AController(name="Bare", url="http://h:1").agent_card.model_dump()
    assert a2a.agent_card(Agentor(name="Bare"), "http://h:1", False).model_dump() == bare
    secured = a2a.agent_card(mine, "http://h:1", True).model_dump(mode="json", exclude_none=True)
    assert secured["security"] == [{"bearer": []}]
    assert secured["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_chat_stream_projects_events_as_agentor_does() -> None:
    """message, tool_call, tool_result and an unfinished run_end speak; the rest is silent."""
    keys = ["type", "message", "chunk", "tool_action", "reasoning", "raw_event"]
    call = project(Event(type="tool_call", name="get_weather", args={"city": "Oslo"}), "r")
    assert call is not None and list(call) == keys
    assert call["tool_action"] == {"name": "get_weather", "type": "tool_called"}
    result = project(Event(type="tool_result", name="get_weather", result="sunny"), "r")
    assert result is not None and result["message"] == "sunny"
    assert result["tool_action"] == {"name": "get_weather", "type": "tool_output"}
    message = project(Event(type="message", text="Hi"), "r")
    assert message is not None and message["message"] == "Hi" and message["tool_action"] is None
    failed = project(Event(type="run_end", status="failed", error="boom"), "r")
    assert failed is not None and failed["message"] == "boom"
    for silent in ("run_start", "generation", "text_delta"):
        assert project(Event(type=silent), "r") is None  # type: ignore[arg-type]
    assert project(Event(type="run_end", status="completed"), "r") is None


def test_sse_frames_and_keepalive() -> None:
    """One JSON line per data field; a comment whenever the stream is idle; nothing lost."""
    assert frame({"a": 1}, id=3) == b'id: 3\ndata: {"a":1}\n\n'
    assert (
        frame({"error": "x"}, event="run_failed") == b'event: run_failed\ndata: {"error":"x"}\n\n'
    )

    async def slow() -> AsyncIterator[bytes]:
        yield b"one"
        await asyncio.sleep(0.25)
        yield b"two"

    async def collect() -> list[bytes]:
        return [chunk async for chunk in keepalive(slow(), 0.05)]

    chunks = asyncio.run(collect())
    assert chunks[0] == b"one" and chunks[-1] == b"two"
    assert set(chunks[1:-1]) == {b": keep-alive\n\n"} and len(chunks) >= 4


def view(execution: str, **result: Any) -> RunView:
    return RunView(agent("A"), RunResult(run_id="r1", **result), execution)


def test_a2a_task_states_follow_the_run() -> None:
    """working, input-required while approval waits, completed, failed, canceled."""
    assert a2a.task_of(view("running", status="running")).status.state.value == "working"
    waiting = a2a.task_of(
        view(
            "running",
            status="awaiting_approval",
            pending_approvals=[PendingApproval("c1", "transfer", {"amount": 5}, 1)],
        )
    )
    assert waiting.status.state.value == "input-required"
    assert waiting.status.message is not None
    assert "transfer(amount=5) (call_id c1)" in waiting.model_dump_json()
    done = a2a.task_of(
        view(
            "completed",
            status="completed",
            final_output="Sunny.",
            messages=[
                {"role": "system", "content": "be nice"},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Sunny."},
            ],
        ),
        history_length=1,
    )
    assert done.status.state.value == "completed" and done.id == "r1"
    assert done.artifacts is not None and done.artifacts[0].parts[0].root.text == "Sunny."  # type: ignore[union-attr]
    assert done.history is not None and [m.role.value for m in done.history] == ["agent"]
    capped = a2a.task_of(view("completed", status="max_turns"))
    assert capped.status.state.value == "failed" and capped.artifacts is None
    assert a2a.task_of(view("canceled", status="failed")).status.state.value == "canceled"
    assert a2a.task_of(view("terminated", status="failed")).status.state.value == "failed"


@pytest.mark.parametrize(
    "error, status",
    [
        (RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""), 503),
        (RPCError("Timeout expired", RPCStatusCode.CANCELLED, b""), 503),
        (RPCError("Namespace default is not found", RPCStatusCode.NOT_FOUND, b""), 502),
        # a rate limit: the request may go through later (it was 502, a refusal)
        (RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b""), 503),
    ],
    ids=["refused-connection", "never-answered", "refused", "throttled"],
)
async def test_temporal_not_answering_is_503_unreachable_not_a_refusal(
    error: RPCError, status: int
) -> None:
    """A server that holds the connection and never answers ('Timeout expired': stopped,
    partitioned away) is unreachable (503, try again), as a refused connection is; it was
    answered 502 'Temporal refused the request'."""
    from starlette.requests import Request

    from agentor_temporal.serve import create_app

    app = create_app([agent(temporal="127.0.0.1:1")])
    handler = app.exception_handlers[RPCError]
    request = Request({"type": "http", "method": "GET", "path": "/runs/r1", "headers": []})
    answer = await handler(request, error)
    assert answer.status_code == status
    said = "unreachable" if status == 503 else "refused the request"
    if error.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        said = "throttling requests: namespace rate limit exceeded"
    assert said in bytes(answer.body).decode()
    # an outage's 503 says when to ask again (a server restart takes seconds)
    assert answer.headers.get("retry-after") == ("5" if status == 503 else None)
    if status == 503:
        gave_up = await app.exception_handlers[ConnectionFailed](
            request, ConnectionFailed("Temporal at x has been unreachable for at least 30 s")
        )
        assert gave_up.status_code == 503 and gave_up.headers["retry-after"] == "5"


@pytest.mark.parametrize(
    ("first", "nested", "obeyed"),
    [
        # the same signal again while the first's line is written: obeyed (abandons)
        (signal.SIGTERM, signal.SIGTERM, [signal.SIGTERM]),
        # another one then (a supervisor escalating): noted too, not obeyed
        (signal.SIGINT, signal.SIGTERM, []),
    ],
    ids=["same", "other"],
)
def test_a_signal_coming_while_the_first_is_said_finds_it_noted(
    monkeypatch: pytest.MonkeyPatch,
    first: signal.Signals,
    nested: signal.Signals,
    obeyed: list[signal.Signals],
) -> None:
    """A signal arriving while the server's handler writes the first one's line runs the
    handler again, nested, before the first returns. Before, the first was recorded only
    after its line: a client escalating on reading the line (SIGINT, SIGTERM, then SIGTERM
    again) had its last signal taken for a new one, noted, never obeyed, and the process
    waited out the calls (seen in CI: still running 20 s after the third signal)."""
    ended: list[signal.Signals] = []
    said: list[signal.Signals] = []
    halted: list[int] = []
    stop = _server.StopSignals(lambda: True, lambda signum, frame: halted.append(signum))

    def note_line(signum: signal.Signals, then: str = "") -> None:
        said.append(signum)
        if len(said) == 1:
            stop(nested, None)  # delivered while the line is written

    monkeypatch.setattr(_server, "note_line", note_line)
    monkeypatch.setattr(_server, "end_by", ended.append)
    stop(first, None)
    assert ended == obeyed
    assert said == [first] + ([] if obeyed else [nested])
    assert stop.noted == [first] + ([] if obeyed else [nested])
    # a third, the same as the last noted: obeyed
    stop(nested, None)
    assert ended == [*obeyed, nested]
