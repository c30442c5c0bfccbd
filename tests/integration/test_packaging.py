"""The package as users install it: one top-level name, and no clash with their own modules."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from temporalio.client import Client

from agentor_temporal.testing import ScriptedModelServer

from helpers import ANSWER, PROCS, ROOT, free_port, scripted_agent

#: Files a checkout builds from (what `git ls-files` would list, without tests).
SOURCES = ["pyproject.toml", "README.md", "agentor_temporal", "workflows", "activities", "store"]


def test_the_wheel_installs_one_top_level_name(tmp_path: Path) -> None:
    """A wheel built from the repository holds `agentor_temporal` and nothing else at the top."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(
                path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy(path, src / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("agentor_temporal-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"agentor_temporal"}
    for module in ("workflows/agent_run.py", "activities/model.py", "store/file.py", "worker.py"):
        assert f"agentor_temporal/{module}" in names
    # the HTTP server's page is a package file, not code: it must ship too
    assert {"agentor_temporal/serve/app.py", "agentor_temporal/serve/page.html"} <= set(names)
    assert "agentor_temporal/py.typed" in names


USER_SCRIPT = """
import json, sys
# the user's own modules, named like ours were: imported first, they would
# shadow any top-level import of those names by the library
import activities, store, workflows, worker
from agentor_temporal import Agentor, FileStore, function_tool

@function_tool
def get_weather(city: str) -> str:
    '''Get the weather.

    Args:
        city: The city.
    '''
    return f"The weather in {city} is sunny and 22C."

agent = Agentor(name="Weather Agent", model="gpt-4o-mini",
                instructions="You are a helpful weather assistant.", tools=[get_weather],
                store=FileStore("runs"), base_url=sys.argv[1], api_key="k",
                temporal=sys.argv[2], task_queue=sys.argv[3])
first = agent.run("What is the weather in London?")
again = agent.resume(first.run_id)
mine = [m.MINE for m in (activities, store, workflows, worker)]
print(json.dumps({"run_id": first.run_id, "status": again.status,
                  "output": again.final_output, "mine": mine}))
"""


def test_a_project_with_its_own_activities_and_workflows_modules_uses_the_library(
    tmp_path: Path, temporal_address: str, task_queue: str
) -> None:
    """Temporal's project layout (activities.py, workflows.py, ...) next to the script works."""
    for name in ("activities", "store", "workflows", "worker"):
        (tmp_path / f"{name}.py").write_text(f"MINE = {name!r}\n")
    (tmp_path / "app.py").write_text(USER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    with ScriptedModelServer() as model:
        done = subprocess.run(
            [sys.executable, "app.py", model.base_url, temporal_address, task_queue],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "completed" and out["output"] == ANSWER
    assert out["mine"] == ["activities", "store", "workflows", "worker"]
    assert (tmp_path / "runs" / f"{out['run_id']}.jsonl").exists()


def _worker(agents: str, env: dict[str, str], log: Path | None = None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    clean.update(env)
    clean["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(PROCS)])
    return subprocess.Popen(
        [sys.executable, str(ROOT / "worker.py"), "--agents", agents],
        env=clean,
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_worker_py_connects_where_its_agents_say(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """With no flag or environment, `python worker.py` serves the server its agents name."""
    with ScriptedModelServer() as model:
        env = {
            "AGENT_TEMPORAL": temporal_address,
            "AGENT_TASK_QUEUE": task_queue,
            "MODEL_BASE_URL": model.base_url,
        }
        log = tmp_path / "worker.log"
        proc = _worker("addressed_agents:agent", env, log)
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
            assert line.startswith("worker ready"), log.read_text()
            agent = scripted_agent(model, client, task_queue, embedded_worker=False)
            result = await agent.arun("What is the weather in London?")
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    assert result.status == "completed" and result.final_output == ANSWER


def test_worker_py_refuses_agents_that_name_different_servers(temporal_address: str) -> None:
    """Agents disagreeing on their Temporal is a clear usage error, not a silent choice."""
    env = {"AGENT_TEMPORAL": temporal_address, "AGENT_TEMPORAL_OTHER": f"127.0.0.1:{free_port()}"}
    proc = _worker("addressed_agents:agent,addressed_agents:elsewhere", env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "name different Temporal servers" in err and "Traceback" not in err
