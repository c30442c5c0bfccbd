"""Credentials a worker's environment holds under names other than the usual words never
show: MySQL's `MYSQL_PWD` (its clients read the password there), sshpass's `SSHPASS`, an
LDAP bind's `LDAP_BIND_PW`, GitLab's `CI_JOB_JWT_V2` and Gradle's in-memory signing key
(`ORG_GRADLE_PROJECT_signingKey`: an OpenPGP private key, as `gpg --armor` writes it). No
name said credential and no value was read for one, so a tool returning one recorded it as
it was in its result, the model's requests, the JSONL and history.
Real dev server, scripted model, real `openai` client.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, history_text, keyed_agent, recorded

KEY = "sk-envnames_Q7wE3rT9yU1iO5pA8sD2"
MYSQL_PASSWORD = "My-Sql-Pa55-7Kq2Zx"
SSH_PASSWORD = "Ssh-Pa55-4Lm8Wn3Vb"
LDAP_PASSWORD = "Ldap-Bind-9Rt2Hy6Ju"
JOB_JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjQ0In0.eyJuYW1lc3BhY2VfaWQiOiI3MiIsInN1YiI6ImpvYiJ9"
    ".Yy3kQ9zLm2Xw8Rb5Nc1Jp7Hd0Fs4Ge6Ta"
)
#: A line of the OpenPGP private key's body.
PGP_LINE = "lQdGBGXyQ1kBEADJ3mKp9Zw2Lr7Tb4Vn8Yc1Xq6Hd0Fs5Ge3Ja9Kl2Mn7Pb4Rt8Wv"
PGP_KEY = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nComment: https://gnupg.org\n\n"
    f"{PGP_LINE}\nZx4Cv7Bn1Mq9Lk3Jh5Gf8Ds2Ap6Ow0Ie4Ur7Yt1Tr\n=Hq2w\n"
    "-----END PGP PRIVATE KEY BLOCK-----\n"
)

ENVIRONMENT = {
    "MYSQL_PWD": MYSQL_PASSWORD,
    "SSHPASS": SSH_PASSWORD,
    "LDAP_BIND_PW": LDAP_PASSWORD,
    "CI_JOB_JWT_V2": JOB_JWT,
    "ORG_GRADLE_PROJECT_signingKey": PGP_KEY,
}


async def test_credentials_under_other_names_never_show(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool returning each variable's credential shows `***` for it in its result, the
    model's next request, the final output, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)

    @function_tool
    def login(system: str) -> str:
        """Say how a system is logged in to.

        Args:
            system: mysql, ssh, ldap, ci or gradle.
        """
        if system == "gradle":
            return f"signing key {PGP_LINE}"
        return {
            "mysql": f"mysql -papp {MYSQL_PASSWORD}",
            "ssh": f"sshpass -p {SSH_PASSWORD}",
            "ldap": f"bind with {LDAP_PASSWORD}",
            "ci": f"id token {JOB_JWT}",
        }[system]

    systems = ["mysql", "ssh", "ldap", "ci", "gradle"]
    script = [*(CallTool("login", {"system": s}) for s in systems), Reply(f"It is {JOB_JWT}")]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Names Agent", login, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e.result for e in result.events if e.type == "tool_result"]
    assert answers == [
        "mysql -papp ***",
        "sshpass -p ***",
        "bind with ***",
        "id token ***",
        "signing key ***",
    ]
    shown = {
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    secrets = [MYSQL_PASSWORD, SSH_PASSWORD, LDAP_PASSWORD, JOB_JWT, PGP_LINE]
    assert [(where, s) for where, text in shown.items() for s in secrets if s in text] == []


async def test_a_jwt_written_over_lines_never_shows(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's answer quoting the job's JWT over lines (a code block wrapped at 40, cuts
    on both sides of its dots) shows `***` for it in the final output, the store and history,
    as a wrapped base64 key does: a `.` was no base64 character, so no cut JWT was joined."""
    monkeypatch.setenv("CI_JOB_JWT_V2", JOB_JWT)

    @function_tool
    def noop() -> str:
        """Do nothing."""
        return "done"

    wrapped = "\n".join(JOB_JWT[i : i + 40] for i in range(0, len(JOB_JWT), 40))
    with ScriptedModelServer([Reply(f"Your token:\n```\n{wrapped}\n```")]) as model:
        agent = keyed_agent("Wrap Agent", noop, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
    assert result.status == "completed", result.error
    assert str(result.final_output) == "Your token:\n```\n***\n```"
    shown = {
        "store": "\n".join(p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()),
        "history": await history_text(client, result.run_id),
    }
    lines = wrapped.splitlines()
    leaked = [(w, line) for w, text in shown.items() for line in lines if line in text]
    assert leaked == []
