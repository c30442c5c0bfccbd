"""The tests' fork server starts a Python process as an exec would, seen from both sides."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from forkserver import ForkedPopen

pytestmark = pytest.mark.skipif(
    os.environ.get("AGENTOR_TEST_FORK") == "0",
    reason="the fork server is off (AGENTOR_TEST_FORK=0)",
)

SCRIPT = textwrap.dedent(
    """
    import atexit, json, os, sys, threading, time
    main = sys.modules["__main__"]
    seen = {
        "argv": sys.argv,
        "path": sys.path[:4],
        "file": getattr(main, "__file__", None),
        "name": __name__,
        "spec": getattr(getattr(main, "__spec__", None), "name", None),
        "cwd": os.getcwd(),
        "env": os.environ.get("PROBE"),
        "sid": os.getsid(0) == os.getpid(),
        "stdin": sys.stdin.read(),
        "forked": "_forkserver" in sys.modules,
    }
    print(json.dumps(seen), flush=True)
    atexit.register(lambda: print("atexit ran", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined", flush=True))).start()
    how = sys.argv[1] if len(sys.argv) > 1 else ""
    if how == "raise":
        raise ValueError("boom")
    if how == "message":
        sys.exit("a message")
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "hang":
        print("hanging", flush=True)
        time.sleep(60)
    sys.exit(int(how or 0))
    """
)


def _start(cls: type[subprocess.Popen[str]], args: list[str], **kwargs: Any) -> Any:
    env = {**os.environ, "PROBE": "probe", "PYTHONPATH": kwargs.pop("pythonpath", "")}
    if not env["PYTHONPATH"]:
        del env["PYTHONPATH"]
    return cls(
        args,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _both(args: list[str], stdin: str = "", **kwargs: Any) -> list[tuple[int, str, str]]:
    outcomes = []
    for cls in (subprocess.Popen, ForkedPopen):
        proc = _start(cls, args, **kwargs)
        out, err = proc.communicate(stdin, timeout=60)
        outcomes.append((proc.returncode, out, err))
    return outcomes


def _seen(out: str) -> dict[str, Any]:
    return dict(json.loads(out.splitlines()[0]))


@pytest.fixture
def script(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    path = folder / "probe.py"
    path.write_text(SCRIPT)
    (folder / "probe_pkg").mkdir()
    (folder / "probe_pkg" / "__init__.py").write_text("")
    (folder / "probe_pkg" / "__main__.py").write_text(SCRIPT)
    return path


@pytest.mark.parametrize("how", ["", "3", "raise", "message", "interrupt"])
def test_a_forked_script_sees_and_ends_as_an_exec_one(
    script: Path, tmp_path: Path, how: str
) -> None:
    args = [sys.executable, str(script), *([how] if how else [])]
    (code, out, err), (fcode, fout, ferr) = _both(args, "in", cwd=str(tmp_path))
    execd, forked = _seen(out), _seen(fout)
    assert forked.pop("forked") and not execd.pop("forked")
    assert forked == execd and execd["stdin"] == "in" and execd["env"] == "probe"
    assert fcode == code == {"": 0, "3": 3, "raise": 1, "message": 1, "interrupt": -2}[how]
    assert fout.splitlines()[1:] == out.splitlines()[1:]
    assert "atexit ran" in out and "thread joined" in out
    assert err.splitlines()[-1:] == ferr.splitlines()[-1:]


def test_a_forked_module_and_code_see_what_an_exec_sees(script: Path, tmp_path: Path) -> None:
    folder = str(script.parent)
    module = _both([sys.executable, "-m", "probe_pkg", "5"], cwd=str(tmp_path), pythonpath=folder)
    assert module[0][0] == module[1][0] == 5
    execd, forked = _seen(module[0][1]), _seen(module[1][1])
    assert forked.pop("forked") and not execd.pop("forked")
    assert forked == execd and execd["argv"][0].endswith("__main__.py")
    code = _both([sys.executable, "-c", SCRIPT, "7"], cwd=str(tmp_path), pythonpath=folder)
    assert code[0][0] == code[1][0] == 7
    execd, forked = _seen(code[0][1]), _seen(code[1][1])
    assert forked.pop("forked") and not execd.pop("forked")
    assert forked == execd and execd["path"][0] == ""


def test_a_forked_process_takes_signals_a_new_session_and_waits_as_an_exec_one(
    script: Path,
) -> None:
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = _start(ForkedPopen, [sys.executable, str(script), "hang"], start_new_session=True)
        proc.stdin.close()  # the probe reads its stdin to the end first
        assert proc.stdout.readline() and proc.stdout.readline() == "hanging\n"
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.2)
        proc.send_signal(sig)
        assert proc.wait(30) == -sig
        assert proc.poll() == -sig
        proc.stdout.close()
        proc.stderr.close()
    proc = _start(ForkedPopen, [sys.executable, str(script)], start_new_session=True)
    out, _ = proc.communicate("", timeout=30)
    assert _seen(out)["sid"] and _seen(out)["forked"]


def test_a_start_the_fork_cannot_give_exactly_is_execd(script: Path) -> None:
    for kwargs in ({"preexec_fn": os.getpid}, {"pass_fds": (0,)}):
        proc = _start(ForkedPopen, [sys.executable, str(script)], **kwargs)
        out, _ = proc.communicate("", timeout=60)
        assert not _seen(out)["forked"]
    proc = _start(ForkedPopen, [sys.executable, "-X", "dev", str(script)])
    out, _ = proc.communicate("", timeout=60)
    assert not _seen(out)["forked"]


def test_a_fork_costs_less_than_an_exec(script: Path) -> None:
    """Not a timing bound: the fork's child must not import temporalio again."""
    code = "import time; t = time.process_time(); import temporalio.client, openai; " + (
        "print(time.process_time() - t)"
    )
    proc = _start(ForkedPopen, [sys.executable, "-c", code])
    out, _ = proc.communicate("", timeout=60)
    assert float(out) < 0.05, out  # already imported: an exec's child takes ~1 s of CPU here
