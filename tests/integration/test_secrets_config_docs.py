"""Credentials in the configuration documents a worker's environment holds for its tools never
show: a Docker login's `identitytoken` (Azure Container Registry's, in DOCKER_AUTH_CONFIG as
Docker writes it), a `.netrc`'s `password` (a CI's netrc kept in a variable), a kubeconfig's
`client-key-data` (a cluster's YAML kept in a variable) and the password an `.npmrc`'s `_auth`
encodes (base64 of npm's `user:password`, as DOCKER_AUTH_CONFIG's `auth` is). A tool
returning one recorded it as it was: only `auth`, `password:`/`password=` and a raw PEM key
were read out of such documents.
Real dev server, scripted model, real `openai` client.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from agentor_temporal import function_tool
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer

from helpers import PROMPT, keyed_agent, recorded

KEY = "sk-configdocs_R4tY8uI2oP6aS0dF3gH7"
#: Azure Container Registry's refresh token, as `az acr login` has Docker keep it.
IDENTITY_TOKEN = "Qm9rZ1h6ZXJ0eTk4MzJsa2pmZHNhbGtqZmRzWk"
#: A Docker registry token no one told the process of, quoted by a tool's error.
UNKNOWN_TOKEN = "Vt3kQ9zLm2Xw8Rb5Nc1Jp7Hd"
#: Heroku's API key as `heroku login` writes it into `.netrc`.
NETRC_PASSWORD = "3f9a1c7e-5b2d-4e8f-9a6c-1d2e3f4a5b6c"
#: A kubeconfig user's client key: base64 of its PEM private key.
CLIENT_KEY_DATA = base64.b64encode(
    b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBx7Kq2Zp9mLw4Rt8Vn3Yc6Jd1Fh5Gs0Qa2We7Rt9Yu\n"
    b"-----END EC PRIVATE KEY-----\n"
).decode()
#: The password of npm's basic login to a private registry.
NPM_PASSWORD = "Npm-Basic-7Hq2Lz9Wx4"

ENVIRONMENT = {
    "DOCKER_AUTH_CONFIG": json.dumps(
        {"auths": {"ci.azurecr.io": {"auth": "", "identitytoken": IDENTITY_TOKEN}}}
    ),
    "CI_NETRC": f"machine api.heroku.com\n  login ci@example.com\n  password {NETRC_PASSWORD}\n",
    "KUBE_CONFIG": (
        "apiVersion: v1\nkind: Config\nusers:\n- name: ci\n  user:\n"
        f"    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t\n"
        f"    client-key-data: {CLIENT_KEY_DATA}\n"
    ),
    "NPMRC": "//npm.corp.example/:_auth="
    + base64.b64encode(f"ci:{NPM_PASSWORD}".encode()).decode()
    + "\nalways-auth=true\n",
}


async def test_credentials_in_config_documents_never_show(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool returning each document's credential, and one raising with another Docker
    login's `identitytoken`, shows `***` for each in the results, the model's next request,
    the final output, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    other = json.dumps({"auths": {"other.azurecr.io": {"identitytoken": UNKNOWN_TOKEN}}})

    @function_tool
    def registry(action: str) -> str:
        """Read a login, or log in to another registry.

        Args:
            action: docker, netrc, kube, npm or other.
        """
        if action == "other":
            raise PermissionError(f"login refused with {other}")
        if action == "docker":
            return f"token {IDENTITY_TOKEN}"
        if action == "npm":
            return f"npm login ci / {NPM_PASSWORD}"
        if action == "netrc":
            return f"heroku password {NETRC_PASSWORD}"
        return f"client key {CLIENT_KEY_DATA}"

    script = [
        CallTool("registry", {"action": "docker"}),
        CallTool("registry", {"action": "netrc"}),
        CallTool("registry", {"action": "kube"}),
        CallTool("registry", {"action": "npm"}),
        CallTool("registry", {"action": "other"}),
        Reply(f"The token is {IDENTITY_TOKEN}"),
    ]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Config Agent", registry, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert [a.result for a in answers] == [
        "token ***",
        "heroku password ***",
        "client key ***",
        "npm login ci / ***",
        'Error: PermissionError: login refused with {"auths": {"other.azurecr.io":'
        ' {"identitytoken": "***"}}}',
    ]
    shown = {
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    secrets = [IDENTITY_TOKEN, UNKNOWN_TOKEN, NETRC_PASSWORD, CLIENT_KEY_DATA[20:60], NPM_PASSWORD]
    assert [(where, s) for where, text in shown.items() for s in secrets if s in text] == []
