"""A URL's password holding `#`, `?`, `/`, `[` or `]` as it is (not percent-encoded) never
shows.

Such passwords are generated every day and work as written in a connection string
(SQLAlchemy's URLs and libpq's take everything between the user's `:` and the `@` before
the host). A URL parser ends the authority at the first `/`, `?` or `#` (or refuses a lone
bracket), so the password of `DATABASE_URL=postgresql://app:<pass#word>@db/prod` was never
known as a secret: a tool returning the connection string recorded it whole, and an error
quoting another such URL showed its password too. Real dev server, scripted model, real
`openai` client.
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

KEY = "sk-userinfo_Q7wE2rT9yU4iO1pA8sDf3G"
#: Passwords of the process's DATABASE_URL, each with one character a URL parser stops at.
PASSWORDS = {
    "hash": "Zx8#1kQp0aLm3Yt7Rw2v",
    "question": "Zx8?1kQp0aLm3Yt7Rw2v",
    "slash": "Zx8/1kQp0aLm3Yt7Rw2v",
    "bracket": "Zx8]1kQp0aLm3Yt7Rw2v",
}
#: The password of a URL no one told the process of, quoted by a tool's error.
UNKNOWN = "Pq4#9vLz2mWx7Nc5Bt1k"


@pytest.mark.parametrize("kind", sorted(PASSWORDS))
async def test_a_urls_raw_password_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """A tool returning the process's DATABASE_URL (its password holding `#`, `?`, `/` or
    `]`), and raising with another such URL's, shows `***` for each password in the
    results, the model's next request, the final output, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    password = PASSWORDS[kind]
    url = f"postgresql://app:{password}@db.internal:5432/prod"
    monkeypatch.setenv("DATABASE_URL", url)
    other = f"redis://:{UNKNOWN}@cache.internal:6379/0"

    @function_tool
    def connection(action: str) -> str:
        """Show the database connection, or open the cache's.

        Args:
            action: show or open.
        """
        if action == "open":
            raise ConnectionError(f"could not connect to {other}: timed out")
        return f"connected to {url}"

    script = [
        CallTool("connection", {"action": "show"}),
        CallTool("connection", {"action": "open"}),
        Reply(f"The database is {url}"),
    ]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Url Agent", connection, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert [a.result for a in answers] == [
        "connected to postgresql://app:***@db.internal:5432/prod",
        "Error: ConnectionError: could not connect to redis://***@cache.internal:6379/0: timed out",
    ]
    shown = {
        "model request": sent,
        **await recorded(result, client, tmp_path, caplog),
    }
    pieces = [password, password[4:], UNKNOWN, UNKNOWN[4:]]
    assert [(where, p) for where, text in shown.items() for p in pieces if p in text] == []


#: An OAuth implicit grant's redirect: the token in the URL's fragment, as a query's.
FRAGMENT_TOKEN = "Vt3kQ9zLm2Xw8Rb5Nc1Jp7"


async def test_a_token_in_a_urls_fragment_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool failing on an OAuth redirect (`#access_token=...&token_type=bearer`, a
    token no one told the process of) and one returning the process's CALLBACK_URL
    holding such a fragment show `***` for the token in the results, the model's next
    request, the store, history and the log."""
    caplog.set_level(logging.WARNING)
    callback = f"https://app.example/cb#access_token={FRAGMENT_TOKEN}X&expires_in=3600"
    monkeypatch.setenv("CALLBACK_URL", callback)
    redirect = f"https://app.example/cb#access_token={FRAGMENT_TOKEN}&token_type=bearer"

    @function_tool
    def login(action: str) -> str:
        """Log in, or show the callback.

        Args:
            action: login or show.
        """
        if action == "login":
            raise RuntimeError(f"unexpected redirect to {redirect}")
        return f"callback {callback}"

    script = [
        CallTool("login", {"action": "login"}),
        CallTool("login", {"action": "show"}),
        Reply("done"),
    ]
    with ScriptedModelServer(script) as model:
        agent = keyed_agent("Oauth Agent", login, model, KEY, client, task_queue, tmp_path)
        result = await agent.arun(PROMPT)
        sent = json.dumps(model.requests[-1]["messages"])
    assert result.status == "completed", result.error
    answers = [e for e in result.events if e.type == "tool_result"]
    assert [a.result for a in answers] == [
        "Error: RuntimeError: unexpected redirect to https://app.example/cb#access_token=***"
        "&token_type=***",
        "callback https://app.example/cb#access_token=***&expires_in=3600",
    ]
    shown = {
        "model request": sent,
        "store": "\n".join(p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()),
        "history": await history_text(client, result.run_id),
        "logs": "\n".join(r.getMessage() for r in caplog.records),
    }
    assert [where for where, text in shown.items() if FRAGMENT_TOKEN[4:] in text] == []
