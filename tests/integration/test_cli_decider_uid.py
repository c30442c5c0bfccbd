"""Commands run under a uid the system has no user for (a container's): `approve` with no
`--by`, and any command with no HOME either.

OpenShift gives a pod a random uid, and `docker run --user 12345` or a Kubernetes
`runAsUser` another than the image's user: /etc/passwd has no entry for it and no
USER or LOGNAME is set, so `getpass.getuser()` raises (KeyError; OSError from Python
3.13). The command that was to name who decided failed with that traceback instead,
and no decision could be made from such a container without `--by`.
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentor_temporal.testing import ScriptedModelServer

from helpers import ledger_lines
from integration.test_cli import _env, cli
from integration.test_cli_approval import AGENT, agent_env, pay_script

#: names getpass.getuser() reads before the password database
LOGIN_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")


def unknown_uid() -> int:
    """A uid /etc/passwd has no entry for."""
    uid = 54321
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_approve_without_by_under_a_uid_with_no_user_decides_naming_the_uid(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """The decision is taken, recorded as by `uid N`; the transfer runs once.

    The command runs in a user namespace of its own (`unshare --user`, no privilege
    needed) where its uid is one /etc/passwd lacks; its files are still this user's.
    """
    ledger = str(tmp_path / "ledger")
    uid = unknown_uid()
    with ScriptedModelServer(pay_script()[:2]) as model:
        env = agent_env(model, task_queue, ledger)
        common = ["--temporal", temporal_address]
        started = cli("run", "--agent", AGENT, "Pay bob 5000", "--json", *common, env=env)
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]

        anonymous = {k: v for k, v in _env(**env).items() if k not in LOGIN_VARIABLES}
        approved = subprocess.run(
            ["unshare", "--user", f"--map-user={uid}", f"--map-group={uid}",
             sys.executable, "-m", "agentor_temporal", "approve", run_id, "call_pay",
             "--agent", AGENT, "--wait", "120", *common],
            env=anonymous,
            capture_output=True,
            text=True,
            timeout=180,
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "Traceback" not in approved.stderr
        assert f"approved call_pay (turn 1) of run {run_id} (by uid {uid})" in approved.stdout

        done = cli("resume", run_id, "--agent", AGENT, "--json", *common, env=env)
        assert done.returncode == 0, done.stderr
        finished = json.loads(done.stdout)
    assert finished["final_output"] == "Paid."
    decision = next(e for e in finished["events"] if e["type"] == "approval_decision")
    assert (decision["status"], decision["result"]) == ("approved", f"uid {uid}")
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_command_with_no_home_at_all_says_where_it_looked_for_temporal(tmp_path: Path) -> None:
    """No HOME, and a uid with no passwd entry (so no home directory at all), and no
    Temporal settings: `list` says it cannot reach the default address, as it does with a
    home. It ended in `RuntimeError: Could not determine home directory.` (the default
    config file's path), a traceback from every command that looks for Temporal's."""
    uid = unknown_uid()
    env = {
        k: v
        for k, v in _env().items()
        if k not in LOGIN_VARIABLES and k != "HOME" and not k.startswith(("TEMPORAL_", "XDG_"))
    }
    listed = subprocess.run(
        ["unshare", "--user", f"--map-user={uid}", f"--map-group={uid}",
         sys.executable, "-m", "agentor_temporal", "list"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert "Traceback" not in listed.stderr, listed.stderr
    # (a dev server of another test may listen there: then the runs are listed)
    assert listed.returncode == 0 or (
        listed.returncode == 1 and "Cannot reach Temporal at localhost:7233" in listed.stderr
    ), listed.stderr
