"""Secrets never reach history, the store, results, logs or CLI output.

Real dev server, scripted model, real `openai` client. A tool whose exception
carries the API key and URL credentials, replies that are not chat
completions quoting the key, a read timeout against a base_url with
credentials, and the CLI failing to reach a Temporal server with
TEMPORAL_API_KEY set or credentials in the Temporal address, a provider
echoing a credential in another form than it was given (decoded,
percent-encoded, base64, the token of a header), client
settings that carry one, and a Temporal config file that does not parse
quoting its key: each test dumps the whole history (payloads decoded,
base64 nested inside them too), the store's files, the result and the
captured WARNING+ records, and names where a secret appeared.

Covered elsewhere (test_model_boundary, unit/test_redaction): a provider's
401 echoing the key, an unreachable base_url with credentials, keys in tool
call arguments and streamed text, extra_headers / extra_query, loggers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import forkserver
import pytest
from google.protobuf.json_format import MessageToJson
from temporalio.client import Client

from agentor_temporal import Agentor, ConnectionFailed, FileStore
from agentor_temporal._chat_wire import completion
from agentor_temporal.streaming import RunFailedError
from agentor_temporal.testing import CallTool, Fail, Hang, Raw, Reply, ScriptedModelServer

from helpers import (
    INSTRUCTIONS,
    PROMPT,
    ROOT,
    free_port,
    ledger_lines,
    transfer_tool,
    weather_tool,
    with_decoded,
)

API_KEY = "sk-leakaudit-APIKEY-0123456789"
URL_USER = "leakuser-USERINFO"
URL_PASSWORD = "leakpass-PASSWORD-4242"
TEMPORAL_KEY = "leak-TEMPORALKEY-8080"


def _agent(*, tools: list[Any] | None = None, **kwargs: Any) -> Agentor:
    """The seed's weather agent with these settings."""
    kwargs.setdefault("instructions", INSTRUCTIONS)
    return Agentor(
        name="Weather Agent",
        model="gpt-4o-mini",
        tools=tools if tools is not None else [weather_tool()],
        **kwargs,
    )


def _secret_url(port: int) -> str:
    return f"http://{URL_USER}:{URL_PASSWORD}@127.0.0.1:{port}/v1"


async def _history_json(client: Client, run_id: str) -> str:
    """Every run (segment) of the workflow's history, as JSON text."""
    handle = client.get_workflow_handle(run_id)
    history = await handle.fetch_history()
    text = history.to_json()
    # payloads are base64 in JSON: decode them so their text is searched too
    decoded = []
    for event in history.events:
        decoded.append(str(event))  # the text format shows bytes escaped, not base64
    desc = await handle.describe()
    text = text + "\n".join(decoded) + MessageToJson(desc.raw_description)
    # and base64 nested inside payloads (stream batches carry their items so)
    return with_decoded(with_decoded(text))


def _store_text(directory: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(directory.rglob("*")) if p.is_file())


def _found(where: dict[str, str], secrets: list[str]) -> list[str]:
    return [f"{s!r} in {name}" for name, text in where.items() for s in secrets if s in text]


@pytest.fixture
def warnings_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def _log_text(caplog: pytest.LogCaptureFixture) -> str:
    lines = []
    for record in caplog.records:
        lines.append(f"{record.name} {record.levelname} {record.getMessage()}")
        if record.exc_text:
            lines.append(record.exc_text)
        elif record.exc_info:
            lines.append(logging.Formatter().formatException(record.exc_info))
    return "\n".join(lines)


async def _wait_for_retry(client: Client, run_id: str, timeout: float = 30.0) -> str:
    """The last failure of a pending activity once it is on its second attempt."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            desc = await client.get_workflow_handle(run_id).describe()
        except Exception:
            desc = None
        if desc is not None:
            for act in desc.raw_description.pending_activities:
                if act.attempt >= 2:
                    return str(act.last_failure.message)
        await asyncio.sleep(0.05)
    raise AssertionError("the activity was not retried in time")


async def test_a_tools_exception_never_shows_the_key(
    client: Client, task_queue: str, tmp_path: Path, warnings_log: pytest.LogCaptureFixture
) -> None:
    """A tool whose exception message carries the key and the URL."""
    from agentor_temporal import function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        raise RuntimeError(
            f"upstream refused key {API_KEY} at http://{URL_USER}:{URL_PASSWORD}@h/x"
        )

    with ScriptedModelServer([CallTool("get_weather", {"city": "London"}), Reply("ok")]) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
            tools=[get_weather],
        )
        result = await agent.arun(PROMPT)
        requests = model.requests
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert answer.error == "RuntimeError: upstream refused key *** at http://***@h/x", answer
    where = {
        "history": await _history_json(client, result.run_id),
        "store": _store_text(tmp_path),
        "RunResult": repr(result),
        "logs": _log_text(warnings_log),
        "model request": repr(requests),
    }
    assert not _found(where, [API_KEY, URL_PASSWORD])


@pytest.mark.parametrize(
    "step",
    [
        Raw(
            f"<html>bad key {API_KEY} for http://{URL_USER}:{URL_PASSWORD}@h/v1</html>",
            200,
            "text/html",
        ),
        Raw(f"<html>502 for key {API_KEY}</html>", 502, "text/html"),
        Raw(f'{{"choices": "no", "echo": "{API_KEY}"}}'),
        Raw(f'{{"truncated": "{API_KEY}'),
        # the key across the 200th character of the reply's text, where its error cuts it
        Raw(json.dumps({"choices": "x" * 177 + API_KEY})),
    ],
    ids=["html-200", "html-502", "malformed-json", "broken-json", "key-at-the-cut"],
)
async def test_replies_that_are_not_completions_never_show_the_key(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    warnings_log: pytest.LogCaptureFixture,
    step: Raw,
) -> None:
    """Replies that are not chat completions, quoting the key: the errors made of them."""
    with ScriptedModelServer(lambda request: step) as model:
        agent = _agent(
            base_url=_secret_url(model.port),
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
        )
        run_id = f"leak-raw-{uuid.uuid4().hex[:8]}"
        pending = asyncio.create_task(agent.arun(PROMPT, run_id=run_id))
        try:
            assert await _wait_for_retry(client, run_id)
            history = await _history_json(client, run_id)
        finally:
            pending.cancel()
            await client.get_workflow_handle(run_id).terminate("test done")
    where = {
        "history+describe": history,
        "store": _store_text(tmp_path),
        "logs": _log_text(warnings_log),
    }
    # no part of the key either: a text cut inside it keeps its start
    assert not _found(where, [API_KEY, API_KEY[:10], URL_USER, URL_PASSWORD])


async def test_a_read_timeout_never_shows_url_credentials(
    client: Client, task_queue: str, tmp_path: Path, warnings_log: pytest.LogCaptureFixture
) -> None:
    """A read timeout (timeout=0.5 model setting) against a base_url with credentials."""
    with ScriptedModelServer([Hang(3)]) as model:
        agent = _agent(
            base_url=_secret_url(model.port),
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
            timeout=0.5,
        )
        result = await agent.arun(PROMPT)
    assert result.status == "completed", result
    where = {
        "history": await _history_json(client, result.run_id),
        "store": _store_text(tmp_path),
        "logs": _log_text(warnings_log),
    }
    assert "timed out at http://***@127.0.0.1" in where["history"]
    assert not _found(where, [API_KEY, URL_USER, URL_PASSWORD])


async def test_request_log_lines_never_show_url_credentials(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The HTTP client's request lines (INFO; `httpx2` under openai 3) mask the base_url's
    credentials and the query's values, at every level of every logger; its DEBUG line of
    the response's headers masks the session cookie the endpoint sets (a credential no one
    told us of) and keeps the plain headers."""
    caplog.set_level(logging.DEBUG)
    signature = "leak-QUERYSIG-31337"
    cookie = "leak-SESSIONCOOKIE-0b1c2d"
    answer = Raw(
        completion("chatcmpl-1", "gpt-4o-mini", {"role": "assistant", "content": "ok"}),
        headers={"Set-Cookie": f"sid={cookie}; Path=/; HttpOnly", "x-ratelimit-tokens": "9988"},
    )
    with ScriptedModelServer([answer]) as model:
        agent = _agent(
            base_url=_secret_url(model.port),
            task_queue=task_queue,
            temporal=client,
            api_key=API_KEY,
            extra_query={"sig": signature},
        )
        result = await agent.arun(PROMPT)
        query = model.last_query
    assert result.status == "completed", result.error
    assert signature in str(query)  # sent, so a request line had it to show
    logs = _log_text(caplog)
    assert "HTTP Request: POST http://***@127.0.0.1" in logs
    assert "(b'Set-Cookie', b'***'), (b'x-ratelimit-tokens', b'9988')" in logs
    assert not _found({"logs": logs}, [API_KEY, URL_USER, URL_PASSWORD, signature, cookie])


async def test_a_call_id_quoting_the_key_never_shows_it(
    client: Client,
    temporal_address: str,
    task_queue: str,
    tmp_path: Path,
    warnings_log: pytest.LogCaptureFixture,
) -> None:
    """A model naming its tool call with the key: the id is masked wherever it goes (history,
    store, result, `pending`), and the call is approved and run under the masked id."""
    ledger = str(tmp_path / "ledger")
    script = [CallTool("transfer", {"amount": 5, "to": "bob"}, id=f"call_{API_KEY}"), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path / "runs"),
            api_key=API_KEY,
            tools=[transfer_tool(ledger)],
        )
        waiting = await agent.arun(PROMPT)
        [pending] = waiting.pending_approvals
        assert pending.call_id == "call_***", pending
        listed = await asyncio.to_thread(_cli, tmp_path, temporal_address, "pending")
        await agent.aapprove(waiting.run_id, pending.call_id)
        result = await agent.aresume(waiting.run_id)
    assert result.status == "completed", result.error
    assert [line.split()[0] for line in ledger_lines(ledger)] == ["transfer"]
    where = {
        "history": await _history_json(client, result.run_id),
        "store": _store_text(tmp_path / "runs"),
        "RunResult": repr(waiting) + repr(result),
        "logs": _log_text(warnings_log),
        "pending": listed.stdout + listed.stderr,
    }
    assert "call_***" in where["pending"], where["pending"]
    assert not _found(where, [API_KEY])


class _DatabaseStore:
    """A store whose database is down; its error quotes its connection URL and the key."""

    dsn = f"postgresql://runs:{URL_PASSWORD}@127.0.0.1:5432/runs"

    def append(self, run_id: str, event: Any) -> None:
        raise ConnectionError(f"could not connect to {self.dsn} (token {API_KEY})")

    def load(self, run_id: str) -> list[Any]:
        return []

    def list_runs(self) -> list[str]:
        return []


async def test_a_stores_error_never_shows_its_credentials(
    client: Client, task_queue: str, warnings_log: pytest.LogCaptureFixture
) -> None:
    """A mirror store failing with its connection URL (and the key) in the message: the run
    completes, and the error recorded in history and logged is masked."""
    with ScriptedModelServer() as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=_DatabaseStore(),
            api_key=API_KEY,
        )
        result = await agent.arun(PROMPT)
    assert result.status == "completed", result.error
    where = {
        "history": await _history_json(client, result.run_id),
        "RunResult": repr(result),
        "logs": _log_text(warnings_log),
    }
    assert not _found(where, [API_KEY, URL_PASSWORD])
    assert "could not connect to postgresql://***@127.0.0.1" in where["history"]


async def test_a_long_error_cut_for_its_log_line_never_shows_part_of_the_key(
    client: Client, task_queue: str, warnings_log: pytest.LogCaptureFixture
) -> None:
    """An approval predicate's long exception, cut for its log line with the key across the
    cut: no piece of the key is logged (the log filter masks only whole keys)."""
    from agentor_temporal import function_tool

    def over(amount: float, to: str) -> bool:
        # "RuntimeError: " and the padding put the key across the log line's 2,000th character
        raise RuntimeError("x" * 1976 + API_KEY + "y" * 2000)

    @function_tool(requires_approval=over)
    def transfer(amount: float, to: str) -> str:
        """Send money.

        Args:
            amount: How much.
            to: To whom.
        """
        return "sent"

    script = [CallTool("transfer", {"amount": 5, "to": "bob"}), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            api_key=API_KEY,
            tools=[transfer],
        )
        paused = await agent.arun(PROMPT)
    await client.get_workflow_handle(paused.run_id).terminate("test done")
    assert paused.status == "awaiting_approval", paused.error
    logs = _log_text(warnings_log)
    assert "Approval predicate of transfer failed" in logs, logs[:300]
    assert not _found({"logs": logs}, [API_KEY, API_KEY[:10]])


async def test_a_tools_heartbeat_details_never_show_part_of_the_key(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool beating with details that hold the key: they are not recorded, and the DEBUG
    line saying so, which cuts them to 200 characters, shows no piece of the key."""
    from temporalio import activity

    from agentor_temporal import function_tool

    caplog.set_level(logging.DEBUG, logger="agentor_temporal.activities._private")

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        # "('" and the padding put the key across the line's 200-character cut
        activity.heartbeat("x" * 188 + API_KEY)
        return "sunny"

    script = [CallTool("get_weather", {"city": "London"}), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            api_key=API_KEY,
            tools=[get_weather],
        )
        result = await agent.arun(PROMPT)
    assert result.status == "completed", result.error
    logs = _log_text(caplog)
    assert "heartbeat details are not recorded" in logs
    assert not _found({"logs": logs}, [API_KEY, API_KEY[:10]])


#: A password in a Temporal address (`user:password@host:port`: a proxy in front of it)
TEMPORAL_PASSWORD = "leak-ADDRPASS-9191"


def test_the_cli_never_prints_the_temporal_api_key(tmp_path: Path, temporal_address: str) -> None:
    """A connection failure with TEMPORAL_API_KEY set does not print the key; nor does
    any message naming a Temporal address with credentials (TEMPORAL_ADDRESS, --temporal,
    with or without a scheme; unreachable, or reached and asked for a run it lacks)."""
    port = free_port()
    userinfo = f"bob:{TEMPORAL_PASSWORD}@"
    commands: list[tuple[str | None, list[str], dict[str, str]]] = [
        (
            None,
            ["list"],
            {"TEMPORAL_ADDRESS": f"{userinfo}127.0.0.1:{port}", "TEMPORAL_API_KEY": TEMPORAL_KEY},
        ),
        (f"http://{userinfo}127.0.0.1:{port}", ["list"], {}),
        (f"{userinfo}{temporal_address}", ["show", "no-such-run-4711"], {}),
    ]
    # side by side: each is a fresh interpreter
    with ThreadPoolExecutor(len(commands)) as pool:
        runs = list(pool.map(lambda c: _cli(tmp_path, c[0], *c[1], **c[2]), commands))
    for out in runs:
        shown = out.stdout + out.stderr
        assert out.returncode != 0, shown
        assert not _found({"output": shown}, [TEMPORAL_KEY, TEMPORAL_PASSWORD]), shown
        assert "***@" in shown, shown
    assert "no-such-run-4711" in runs[-1].stderr, runs[-1].stderr


async def test_a_client_on_an_address_with_credentials_never_shows_them(
    temporal_address: str,
) -> None:
    """Connected through `user:password@host:port`, the client's address is shown masked:
    by the store projecting its runs (and a definition holding that store), and by the
    message for a run it lacks."""
    from agentor_temporal import Agentor as Facade
    from agentor_temporal import connect
    from agentor_temporal.workflows import TemporalStore

    client = await connect(f"bob:{TEMPORAL_PASSWORD}@{temporal_address}", start_dev=False)
    store = TemporalStore(client)
    agent = Facade(name="A", model="m", store=store, temporal=client)
    with pytest.raises(Exception) as missing:
        await agent.aresume("no-such-run-4712")
    shown = {
        "store": repr(store),
        "definition": repr(agent.definition),
        "missing run": str(missing.value),
    }
    assert not _found(shown, [TEMPORAL_PASSWORD]), shown
    assert f"***@{temporal_address}" in shown["store"], shown


class _DownDatabaseStore:
    """A store whose repr shows its URL; once its database is down, reads fail quoting it."""

    dsn = f"postgresql://runs:{URL_PASSWORD}@127.0.0.1:5432/runs"
    down = False
    error: type[Exception] = ConnectionError

    def __repr__(self) -> str:
        return f"SQLStore({self.dsn!r})"

    def append(self, run_id: str, event: Any) -> None:
        if self.down:
            raise self.error(f"could not connect to {self.dsn} (token {API_KEY})")

    def load(self, run_id: str) -> list[Any]:
        self.append(run_id, None)
        return []

    def list_runs(self) -> list[str]:
        return []


async def test_a_run_gone_or_missing_is_told_without_the_stores_or_addresss_credentials(
    temporal_address: str, task_queue: str
) -> None:
    """The KeyError for a run Temporal lacks names the store (its repr) and, for a run the
    server lost (`run_gone`: it came back empty), the Temporal address and why the store
    could not be read: each masked.

    Before: `Run ... is gone from Temporal at bob:<password>@host ... Its mirror in
    SQLStore('postgresql://runs:<password>@...') could not be read (could not connect to
    ... (token <key>))`, raised to the caller, printed by the CLI, answered by HTTP routes.
    """
    from agentor_temporal import connect
    from agentor_temporal._gone import run_gone

    client = await connect(f"bob:{TEMPORAL_PASSWORD}@{temporal_address}", start_dev=False)
    store = _DownDatabaseStore()
    agent = _agent(
        base_url="http://127.0.0.1:9/v1",
        task_queue=task_queue,
        temporal=client,
        store=store,
        api_key=API_KEY,
    )
    with pytest.raises(KeyError) as missing:
        await agent.aresume("no-such-run-4713")
    with pytest.raises(KeyError) as unforked:
        await agent.afork("no-such-run-4714")
    # the message a waiter (run, resume, fork, a stream) gets once the server lost its run
    store.down = True
    gone = await run_gone(client, "lost-run-4715", store)
    shown = {"missing": str(missing.value), "unforked": str(unforked.value), "gone": str(gone)}
    assert not _found(shown, [URL_PASSWORD, API_KEY, TEMPORAL_PASSWORD]), shown
    for name in ("missing", "unforked"):
        assert "SQLStore('postgresql://***@127.0.0.1:5432/runs')" in shown[name], shown
    assert f"is gone from Temporal at ***@{temporal_address}" in shown["gone"], shown
    assert "could not be read (could not connect to postgresql://***@" in shown["gone"], shown


def _echo_case(case: str, model: ScriptedModelServer) -> tuple[dict[str, Any], Any, str]:
    """The agent settings, the model's answer and the secret it echoes, for one case."""
    password, token = f"p@ss/w0rd!{case}", f"echo-TOKEN-{case}-5f4e3d"
    key = f"sk-echo/Ab+Cd=Ef{case}"
    userinfo = f"http://bob:{quote(password, safe='')}@127.0.0.1:{model.port}/v1"
    return {
        "pw-decoded": (
            {"base_url": userinfo},
            Fail(400, f"login failed for user bob password {password}"),
            password,
        ),
        "basic-auth": (
            {"base_url": userinfo},
            lambda request: Fail(400, f"Rejected {model.last_headers.get('authorization')}"),
            base64.b64encode(f"bob:{password}".encode()).decode(),
        ),
        "bearer": (
            {"extra_headers": {"Authorization": f"Bearer {token}"}},
            Fail(401, f"invalid or expired token {token}"),
            token,
        ),
        "cookie": (
            {"extra_headers": {"Cookie": f"session={token}; theme=dark"}},
            Fail(401, f"unknown session {token}"),
            token,
        ),
        "any-header": (
            {"extra_headers": {"X-Gateway": token}},
            Fail(403, f"gateway refused {token}"),
            token,
        ),
        "key-urlencoded": (
            {"api_key": key},
            Fail(400, f"Invalid API key: {quote(key, safe='')}"),
            quote(key, safe=""),
        ),
        "key-base64": (
            {"api_key": key},
            Fail(400, f"Invalid credentials {base64.b64encode(key.encode()).decode()}"),
            base64.b64encode(key.encode()).decode(),
        ),
        "default-headers": (
            {"default_headers": {"Authorization": f"Bearer {token}"}},
            Reply("hello"),
            token,
        ),
        # a key read from a file in binary mode: the client sends bytes as they are
        "bytes-header": (
            {"default_headers": {"api-key": token.encode()}},
            Fail(401, f"Access denied due to invalid subscription key {token}"),
            token,
        ),
        "extra-body": ({"extra_body": {"api_key": token}}, Reply("hello"), token),
        "listed-tokens": (
            {"metadata": {"session_tokens": ["short", token]}},
            Fail(401, f"session {token} has expired"),
            token,
        ),
        "model-setting": ({"metadata": {"session_token": token}}, Reply("hello"), token),
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "pw-decoded",
        "basic-auth",
        "bearer",
        "cookie",
        "any-header",
        "key-urlencoded",
        "key-base64",
        "default-headers",
        "bytes-header",
        "extra-body",
        "listed-tokens",
        "model-setting",
    ],
)
async def test_credentials_echoed_in_another_form_never_show(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    warnings_log: pytest.LogCaptureFixture,
    case: str,
) -> None:
    """A credential the provider echoes decoded, encoded or in part (the token of a
    header), or one given as a client setting, is in no history, store, result or log."""
    with ScriptedModelServer() as model:
        settings, answer, secret = _echo_case(case, model)
        model.set_script(lambda request: answer)
        settings = {"base_url": model.base_url, "api_key": API_KEY, **settings}
        agent = _agent(
            task_queue=task_queue, temporal=client, store=FileStore(tmp_path), **settings
        )
        result = await agent.arun(PROMPT)
        sent = {**model.last_headers, **model.requests[-1]}
    if isinstance(answer, Reply):
        # a client setting: sent with the request, recorded nowhere
        assert result.status == "completed", result.error
        assert secret in repr(sent)
    else:
        assert result.status == "failed" and "***" in (result.error or ""), result.error
    where = {
        "history": await _history_json(client, result.run_id),
        "store": _store_text(tmp_path),
        "RunResult": repr(result),
        "logs": _log_text(warnings_log),
    }
    assert not _found(where, [secret])


@pytest.mark.parametrize(
    "line",
    [
        'api_key = "tcak-CONFIGKEY-abcdef12345\n',  # unterminated: the parser quotes it
        "api_key = 12345678987654321\n",  # not a string: the error names the value
        'tls = { client_key_data = "-----BEGIN tcak-CONFIGKEY-abcdef12345 }\n',
    ],
    ids=["unterminated", "wrong-type", "inline-table"],
)
async def test_a_malformed_config_file_never_shows_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """The error for a Temporal config file that does not parse masks the key line it quotes,
    in the CLI's output and in what run() raises."""
    secret = "tcak-CONFIGKEY-abcdef12345" if "tcak" in line else "12345678987654321"
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.default]\naddress = "127.0.0.1:{free_port()}"\n{line}')
    out = _cli_list(tmp_path, TEMPORAL_CONFIG_FILE=str(config))
    assert out.returncode != 0 and "configuration is invalid" in out.stderr + out.stdout
    assert secret not in out.stdout + out.stderr, out.stdout + out.stderr
    for name in [k for k in os.environ if k.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    agent = _agent(base_url="http://unused/v1", task_queue="q")
    with pytest.raises(ConnectionFailed, match="configuration is invalid") as failed:
        await agent.arun(PROMPT)
    assert secret not in str(failed.value)


async def test_a_profiles_grpc_metadata_is_a_secret_of_the_process(
    tmp_path: Path, temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Temporal profile's `grpc_meta` (a gateway's key, an authorization header) is sent
    with every call: once connected, the process masks it as it masks the profile's
    `api_key` (a proxy refusing a call may quote what it was sent); so are the API key and
    metadata of a `Client` a caller connected and hands over."""
    from agentor_temporal.activities import _redact
    from agentor_temporal.connection import connect

    gateway, token = f"gw-{uuid.uuid4().hex[:12]}", f"tok{uuid.uuid4().hex[:12]}"
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.default]\naddress = "{temporal_address}"\n[profile.default.grpc_meta]\n'
        f'x-gateway-key = "{gateway}"\nauthorization = "Token {token}"\n'
    )
    for name in [k for k in os.environ if k.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    connected = await connect(None)
    assert connected.service_client.config.rpc_metadata["x-gateway-key"] == gateway
    said = _redact.clean(f"refused: x-gateway-key {gateway}, authorization {token}")
    assert said == "refused: x-gateway-key ***, authorization ***", said
    # a Client the caller connected itself, given as `temporal=`: its key and metadata
    key, header = f"key-{uuid.uuid4().hex[:12]}", f"hdr-{uuid.uuid4().hex[:12]}"
    own = await Client.connect(
        temporal_address, api_key=key, tls=False, rpc_metadata={"x-gateway-key": header}
    )
    assert await connect(own) is own
    said = _redact.clean(f"refused: key {key}, x-gateway-key {header}")
    assert said == "refused: key ***, x-gateway-key ***", said


def _cli_list(cwd: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """`agentor-temporal list` in a process whose Temporal settings are only `settings`."""
    return _cli(cwd, None, "list", **settings)


def _cli(
    cwd: Path, address: str | None, *args: str, **settings: str
) -> subprocess.CompletedProcess[str]:
    """An `agentor-temporal` command in a process whose Temporal settings are only `settings`
    (and `--temporal address`, when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    env.update(settings)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    target = ["--temporal", address] if address else []
    return forkserver.run(
        [sys.executable, "-m", "agentor_temporal", *args, *target],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


SLASHED_KEY = "sk-leak/audit/KEY-0123456789"


def _json_escaped(how: str) -> str:
    """SLASHED_KEY as a JSON encoder may write it inside a string."""
    if how == "slash":
        return SLASHED_KEY.replace("/", "\\/")  # PHP's json_encode, some Java encoders
    # every character past letters and digits as \u00xx (Go escapes <, >, & so)
    return "".join(c if c.isalnum() else f"\\u{ord(c):04X}" for c in SLASHED_KEY)


@pytest.mark.parametrize("how", ["slash", "unicode"])
@pytest.mark.parametrize("outcome", ["returned", "raised"])
async def test_a_key_echoed_json_escaped_by_a_tool_never_shows(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    warnings_log: pytest.LogCaptureFixture,
    how: str,
    outcome: str,
) -> None:
    """A tool's result or error quoting the key JSON-escaped has it masked, like the key."""
    from agentor_temporal import function_tool

    echoed = _json_escaped(how)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        body = f'{{"error": "bad key", "key": "{echoed}"}}'
        if outcome == "raised":
            raise RuntimeError(body)
        return body

    with ScriptedModelServer([CallTool("get_weather", {"city": "London"}), Reply("ok")]) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=SLASHED_KEY,
            tools=[get_weather],
        )
        result = await agent.arun(PROMPT)
        sent = model.requests[-1]["messages"][-1]["content"]
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert '"key": "***"' in answer.result and '"key": "***"' in sent, answer
    texts = {"result": answer.result, "error": answer.error or "", "model": sent}
    texts["logs"] = _log_text(warnings_log)
    assert not _found(texts, [echoed, SLASHED_KEY])


def _base64_hides(text: str, secret: str) -> bool:
    """Whether no base64 run in `text`, read from any of its 4 character offsets, decodes
    to bytes holding `secret` (standard or URL-safe alphabet)."""
    for run in re.findall(r"[A-Za-z0-9+/_\-]{8,}", text):
        for start in range(4):
            part = run[start:]
            part = part[: len(part) // 4 * 4].replace("-", "+").replace("_", "/")
            if secret.encode() in base64.b64decode(part):
                return False
    return True


async def test_a_key_inside_a_longer_base64_text_never_shows(
    client: Client, task_queue: str, tmp_path: Path, warnings_log: pytest.LogCaptureFixture
) -> None:
    """A tool returning base64 of a text holding the key (a Kubernetes secret's env file), at
    each of base64's three alignments: no base64 run in what is recorded decodes to it."""
    from agentor_temporal import function_tool

    prefixes = ("KEY=", "export KEY=", "OPENAI_API_KEY=")
    assert sorted(len(prefix) % 3 for prefix in prefixes) == [0, 1, 2]
    files = [f"{prefix}{API_KEY}\n" for prefix in prefixes]

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather.

        Args:
            city: The city.
        """
        data = {f"f{i}": base64.b64encode(f.encode()).decode() for i, f in enumerate(files)}
        data["url"] = base64.urlsafe_b64encode(files[1].encode()).decode()
        return json.dumps({"kind": "Secret", "data": data})

    with ScriptedModelServer([CallTool("get_weather", {"city": "London"}), Reply("ok")]) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
            tools=[get_weather],
        )
        result = await agent.arun(PROMPT)
        sent = model.requests[-1]["messages"][-1]["content"]
    assert result.status == "completed", result.error
    [answer] = [e for e in result.events if e.type == "tool_result"]
    assert "***" in answer.result and '"kind": "Secret"' in answer.result, answer.result
    texts = {"result": answer.result, "model": sent, "store": _store_text(tmp_path)}
    assert [name for name, text in texts.items() if not _base64_hides(text, API_KEY)] == []


#: An Azure Functions key, given in a model endpoint's query (`?code=`)
FUNCTION_CODE = "azfn-CODE-0a1B2c3D4e5F"
API_VERSION = "2024-06-01"


async def test_a_base_urls_plain_query_values_are_data_and_its_keys_secrets(
    client: Client, task_queue: str, tmp_path: Path, warnings_log: pytest.LogCaptureFixture
) -> None:
    """With a worker's endpoint at `?api-version=2024-06-01&code=<key>`, the date in an answer,
    a tool result, the JSONL and the final output stays as it is; the key shows nowhere."""
    from agentor_temporal import function_tool

    @function_tool
    def get_deployment() -> str:
        """The model deployment in use."""
        return f"gpt-4o on api-version={API_VERSION}, code={FUNCTION_CODE}"

    answer = f"Deployed on {API_VERSION} (code {FUNCTION_CODE})."
    with ScriptedModelServer([CallTool("get_deployment"), Reply(answer)]) as model:
        # another agent of the process, on Azure: its endpoint's query is remembered
        Agentor(
            name="Azure Agent",
            model="gpt-4o-mini",
            base_url=f"{model.base_url}?api-version={API_VERSION}&code={FUNCTION_CODE}",
            api_key=API_KEY,
        )
        agent = _agent(
            base_url=model.base_url,
            api_key=API_KEY,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            tools=[get_deployment],
        )
        result = await asyncio.wait_for(agent.arun("Which deployment?"), 30)
        sent = model.requests[-1]["messages"][-1]["content"]
    assert result.status == "completed", result.error
    assert result.final_output == f"Deployed on {API_VERSION} (code ***)."
    [tool] = [e for e in result.events if e.type == "tool_result"]
    assert tool.result == f"gpt-4o on api-version={API_VERSION}, code=***"
    assert sent == tool.result
    mirrored = _store_text(tmp_path)
    assert mirrored.count(API_VERSION) >= 3  # the tool's result, the message, run_end
    where = {
        "history": await _history_json(client, result.run_id),
        "store": mirrored,
        "RunResult": repr(result),
        "logs": _log_text(warnings_log),
    }
    assert not _found(where, [FUNCTION_CODE])


async def test_a_request_that_failed_never_shows_credentials_in_the_servers_log(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A route failing with an error that quotes the store's URL and the key (the fork route
    asks the store whether the fork's id is taken; its database is down): the 500 answer,
    the 400 answer quoting a ValueError, and every log line of the HTTP server mask both.

    Before: our handler answered 500 and logged it redacted, then uvicorn logged the
    request's traceback as it was (`Exception in ASGI application ... ConnectionError: could
    not connect to postgresql://runs:<password>@... (token <key>)`); a 400 answer quoted the
    error as it was.
    """
    import threading

    import httpx
    import uvicorn

    from agentor_temporal.serve import create_app

    store = _DownDatabaseStore()
    with ScriptedModelServer() as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=store,
            api_key=API_KEY,
        )
        run_id = (await agent.arun(PROMPT)).run_id
    store.down = True
    agent.embedded_worker = False  # the route fails before any run would need one
    port = free_port()
    # uvicorn's own loggers, propagating to the test's capture (no log config of its own)
    config = uvicorn.Config(create_app([agent]), port=port, log_config=None, log_level="info")
    server = uvicorn.Server(config)
    serving = threading.Thread(target=server.run, daemon=True)
    caplog.set_level(logging.INFO)
    serving.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert serving.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            await asyncio.sleep(0.02)
        fork = (f"http://127.0.0.1:{port}/runs/{run_id}/fork", {"input": "And in Paris?"})
        async with httpx.AsyncClient(timeout=30) as http:
            failed = await http.post(fork[0], json=fork[1])
        # a driver raising ValueError: the route answers 400 with the error's text
        store.error = ValueError
        async with httpx.AsyncClient(timeout=30) as http:  # the failure closed the last one
            refused = await http.post(fork[0], json=fork[1])
        assert failed.status_code == 500, failed.text
        assert refused.status_code == 400, refused.text
        deadline = time.monotonic() + 10
        while "Exception in ASGI application" not in _log_text(caplog):
            assert time.monotonic() < deadline, "uvicorn never logged the failed request"
            await asyncio.sleep(0.02)
    finally:
        server.should_exit = True
        await asyncio.to_thread(serving.join, 10)
    where = {"answer": failed.text, "refused": refused.text, "logs": _log_text(caplog)}
    assert not _found(where, [API_KEY, URL_PASSWORD]), where["logs"]
    assert "could not connect to postgresql://***@127.0.0.1" in where["logs"]
    assert "could not connect to postgresql://***@127.0.0.1" in where["refused"]


DOWN_STORE_AGENT = f"""
from agentor_temporal import Agentor

DSN = "postgresql://runs:{URL_PASSWORD}@127.0.0.1:5432/runs"


class SQLStore:
    # a database store whose database is down: its errors quote its URL and the key
    def __repr__(self):
        return f"SQLStore({{DSN!r}})"

    def append(self, run_id, event):
        raise ConnectionError(f"could not connect to {{DSN}} (token {API_KEY})")

    def load(self, run_id):
        self.append(run_id, None)

    def list_runs(self):
        return []


agent = Agentor(name="A", model="m", base_url="http://127.0.0.1:9/v1", api_key="{API_KEY}",
                store=SQLStore())
"""


def test_the_cli_never_prints_a_stores_error_unmasked(
    tmp_path: Path, temporal_address: str
) -> None:
    """A command failing on the agent's store (its database is down, its error quoting its URL
    and the key): the CLI's one `error:` line masks both.

    Before: `error: could not connect to postgresql://runs:<password>@... (token <key>)`.
    """
    (tmp_path / "down_agent.py").write_text(DOWN_STORE_AGENT)
    out = _cli(
        tmp_path, temporal_address, "resume", "no-such-run-4716", "--agent", "down_agent:agent"
    )
    shown = out.stdout + out.stderr
    assert out.returncode == 1, shown
    assert not _found({"output": shown}, [API_KEY, URL_PASSWORD]), shown
    assert "error: could not connect to postgresql://***@127.0.0.1:5432/runs" in shown, shown


async def test_a_key_pasted_into_the_input_is_never_recorded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A user pasting the agent's key (or TEMPORAL_API_KEY, known to the process) into a
    prompt, a message list, or a fork's input: history, the JSONL, the result and the
    model's requests hold the mask, the rest of the text as typed."""
    with ScriptedModelServer([Reply("ok"), Reply("ok"), Reply("ok")]) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
        )
        typed = await agent.arun(f"my key is {API_KEY}, is it valid?")
        listed = await agent.arun(
            [
                {"role": "user", "content": [{"type": "text", "text": f"key={API_KEY}"}]},
                {"role": "assistant", "content": "noted"},
                {"role": "user", "content": f"and {base64.b64encode(API_KEY.encode()).decode()}"},
            ]
        )
        forked = await agent.afork(typed.run_id, f"and {API_KEY} again?")
        requests = model.requests
    assert [r.status for r in (typed, listed, forked)] == ["completed"] * 3
    start = typed.events[0]
    assert start.messages[-1]["content"] == "my key is ***, is it valid?", start
    assert requests[0]["messages"][-1]["content"] == "my key is ***, is it valid?"
    where = {"store": _store_text(tmp_path), "model requests": repr(requests)}
    for result in (typed, listed, forked):
        where[result.run_id] = await _history_json(client, result.run_id) + repr(result)
    assert not _found(where, [API_KEY, base64.b64encode(API_KEY.encode()).decode()])


async def test_a_key_pasted_into_a_decisions_reason_is_never_recorded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A person denying a call with the key in the reason: the model is told '***'."""
    script = [CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
            tools=[transfer_tool()],
        )
        paused = await agent.arun("Pay bob 5000.")
        assert paused.status == "awaiting_approval", paused.error
        await agent.adeny(paused.run_id, "call_pay", f"the key {API_KEY} is revoked")
        result = await agent.aresume(paused.run_id)
        requests = model.requests
    assert result.status == "completed", result.error
    [decision] = [e for e in result.events if e.type == "approval_decision"]
    assert decision.text == "the key *** is revoked", decision
    where = {
        "history": await _history_json(client, result.run_id),
        "store": _store_text(tmp_path),
        "RunResult": repr(result),
        "model requests": repr(requests),
    }
    assert not _found(where, [API_KEY])


async def test_a_key_in_a_plain_clients_denial_never_reaches_the_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A denial sent by a plain Temporal client (`temporal workflow update execute --name
    decide`), which masks nothing, with the key in its reason and name: the worker masks
    the denial the model reads. The model was sent the key (the store and the result
    masked it already)."""
    script = [CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=API_KEY,
            tools=[transfer_tool()],
        )
        paused = await agent.arun("Pay bob 5000.")
        assert paused.status == "awaiting_approval", paused.error
        plain = {
            "call_id": "call_pay",
            "approved": False,
            "reason": f"the key {API_KEY} is revoked",
            "by": f"ops ({API_KEY})",
        }
        async with agent._serving(client):
            await client.get_workflow_handle(paused.run_id).execute_update(
                "decide", plain, result_type=dict
            )
        result = await agent.aresume(paused.run_id)
        requests = model.requests
    assert result.status == "completed", result.error
    denial = next(m for m in requests[-1]["messages"] if m.get("tool_call_id") == "call_pay")
    assert "a person denied this call (ops (***)): the key *** is revoked" in denial["content"]
    where = {"store": _store_text(tmp_path), "RunResult": repr(result), "model": repr(requests)}
    assert not _found(where, [API_KEY])


async def test_failure_text_recorded_unmasked_is_masked_on_the_way_out(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """Failure text recorded as it was (a termination's reason typed by a person, a log an
    older version wrote with a tool's error and the run's error unmasked) is masked where
    it is shown: `list --json`, `show`, `show --jsonl`, `show --store`, GET /runs/{id}, the
    RunFailedError of `stream`."""
    import httpx

    from agentor_temporal.serve import create_app

    leaked = f"from http://{URL_USER}:{URL_PASSWORD}@db.internal/x (key {API_KEY})"
    script = [CallTool("transfer", {"amount": 5000, "to": "bob"}, id="call_pay"), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            api_key=API_KEY,
            tools=[transfer_tool()],
        )
        paused = await agent.arun("Pay bob 5000.")
        assert paused.status == "awaiting_approval", paused.error
        await client.get_workflow_handle(paused.run_id).terminate(reason=f"stopped {leaked}")
        agent.embedded_worker = False
        transport = httpx.ASGITransport(app=create_app([agent]))
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as http:
            answer = await http.get(f"/runs/{paused.run_id}")
        with pytest.raises(RunFailedError) as streamed:
            async for _ in agent.stream(paused.run_id):
                pass
    assert answer.status_code == 200, answer.text
    assert "stopped from http://***@db.internal/x (key ***)" in str(streamed.value)
    assert answer.json()["error"].startswith("terminated: stopped from http://***@db.internal/x")
    # a log as an older version wrote it: the errors as they were
    old = tmp_path / "old"
    old.mkdir()
    run_id = "old-run-4711"
    lines = [
        {"type": "run_start", "agent": "Weather Agent", "model": "gpt-4o-mini", "messages": []},
        {"type": "tool_result", "name": "get_weather", "call_id": "c1", "error": leaked},
        {"type": "run_end", "status": "failed", "error": f"Tool failed {leaked}"},
    ]
    (old / f"{run_id}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {"OPENAI_API_KEY": API_KEY}  # the reader's process knows the key
    show, store = ["show", paused.run_id], ["show", "--store", str(old), run_id]
    shown = {
        "GET /runs": answer.text,
        "stream": str(streamed.value),
        "list": _cli(tmp_path, temporal_address, "list", "--json", **env),
        "show": _cli(tmp_path, temporal_address, *show, **env),
        "show --jsonl": _cli(tmp_path, temporal_address, *show, "--jsonl", **env),
        "show --store": _cli(tmp_path, None, *store, **env),
        "--store --jsonl": _cli(tmp_path, None, *store, "--jsonl", **env),
    }
    texts = {}
    for name, value in shown.items():
        if isinstance(value, subprocess.CompletedProcess):
            assert value.returncode == 0, (name, value.stderr)
            value = value.stdout + value.stderr
        texts[name] = value
    assert "http://***@db.internal/x" in texts["show --store"], texts["show --store"]
    assert "http://***@db.internal/x" in texts["--store --jsonl"], texts["--store --jsonl"]
    assert not _found(texts, [URL_PASSWORD, URL_USER, API_KEY]), texts


def test_the_clis_traceback_of_a_bug_never_shows_a_key(
    tmp_path: Path, temporal_address: str
) -> None:
    """An exception the CLI does not expect (a store's driver failing with a RuntimeError
    quoting its URL and the key) still prints its traceback, for the bug report, but
    masked: the message and every line of it."""
    agent = DOWN_STORE_AGENT.replace("raise ConnectionError(", "raise RuntimeError(")
    (tmp_path / "buggy_agent.py").write_text(agent)
    out = _cli(
        tmp_path, temporal_address, "resume", "no-such-run-4718", "--agent", "buggy_agent:agent"
    )
    shown = out.stdout + out.stderr
    assert out.returncode == 1, shown
    assert "Traceback (most recent call last)" in shown, shown
    assert "RuntimeError: could not connect to postgresql://***@127.0.0.1:5432/runs" in shown
    assert not _found({"output": shown}, [API_KEY, URL_PASSWORD]), shown


ENV_SECRETS = {
    "GITHUB_TOKEN": "ghp_leakEnvToken0123456789abcdefABCDEF",
    # with the line break a Kubernetes secret made from a file keeps (the tool strips it)
    "DB_PASSWORD": "leak-db-Password-77\n",
    "AWS_SECRET_ACCESS_KEY": "leakAwsSecret/0123456789+abcdefABCDEF",
    # a credential inside a variable not named as one: the password of its URL
    "DATABASE_URL": "postgresql://app:leak-DbUrl-Pass-5150@db:5432/prod",
    # JSON credentials: GitLab's registry login (base64 `user:password`), Azure's login
    "DOCKER_AUTH_CONFIG": json.dumps(
        {"auths": {"registry.example.com": {"auth": "Y2ktYm90OmxlYWstUmVnaXN0cnktUGFzcy00Mg=="}}}
    ),
    "AZURE_CREDENTIALS": json.dumps(
        {"clientId": "app-0001", "clientSecret": "leak-Azure-ClientSecret-8d3f", "tenantId": "t"}
    ),
    # a setting whose name holds 'cred' but is none: its value is data, shown as it is
    "GIT_CONFIG_PARAMETERS": "credential.helper=manager-core",
}
#: What the JSON credentials hold, as a tool reads them out.
JSON_SECRETS = ["ci-bot:leak-Registry-Pass-42", "leak-Azure-ClientSecret-8d3f"]

ENV_TOOLS_AGENT = """
import asyncio
import base64
import gc
import json
import logging
import os
import threading
import warnings

from agentor_temporal import Agentor, function_tool

# as `load_dotenv()` does, once the command has set up its masking
os.environ["DOTENV_API_TOKEN"] = "leak-Dotenv-Token-0071"


async def _notify() -> None:
    raise RuntimeError(f"webhook refused token {os.environ['GITHUB_TOKEN']}")


def _refresh() -> None:
    raise RuntimeError(f"refresh refused token {os.environ['GITHUB_TOKEN']}")


@function_tool
async def read_config(name: str) -> str:
    '''Read a setting.

    Args:
        name: The setting.
    '''
    # the tool's own log line, and asyncio's of a background task it dropped
    logging.getLogger("mytools").warning("using token %s", os.environ["GITHUB_TOKEN"])
    # Python's own lines on stderr: a warning, a thread of the tool's that failed
    warnings.warn(f"token {os.environ['GITHUB_TOKEN']} expires soon")
    failing = threading.Thread(target=_refresh, name="refresher")
    failing.start()
    failing.join()
    dropped = asyncio.ensure_future(_notify())
    await asyncio.sleep(0.05)
    del dropped
    gc.collect()  # "Task exception was never retrieved", now
    auths = json.loads(os.environ["DOCKER_AUTH_CONFIG"])["auths"]
    registry = base64.b64decode(auths["registry.example.com"]["auth"]).decode()
    azure = json.loads(os.environ["AZURE_CREDENTIALS"])["clientSecret"]
    return (
        f"token={os.environ['GITHUB_TOKEN']} db={os.environ['DATABASE_URL']}"
        f" registry={registry} azure={azure} git={os.environ['GIT_CONFIG_PARAMETERS']}"
        f" dotenv={os.environ['DOTENV_API_TOKEN']}"
    )


@function_tool
def connect(name: str) -> str:
    '''Connect.

    Args:
        name: The database.
    '''
    raise RuntimeError(f"login refused for password {os.environ['DB_PASSWORD'].strip()}")


agent = Agentor(name="Env Agent", model="m", base_url=os.environ["MODEL_BASE_URL"],
                api_key="sk-not-this-one-0000", task_queue=os.environ["AGENT_TASK_QUEUE"],
                tools=[read_config, connect])
"""


async def test_credentials_in_the_processs_environment_never_show(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """The worker's environment holds credentials for its tools (GITHUB_TOKEN, DB_PASSWORD,
    AWS_SECRET_ACCESS_KEY, the password in DATABASE_URL, the fields of a JSON login such as
    DOCKER_AUTH_CONFIG's, one the agent's module sets as `load_dotenv()` does): a tool
    returning one, a tool's error quoting one, and a prompt pasting one show `***` in
    history, the model's requests and the command's output, where the log lines of any
    logger (the tool's own, asyncio's of a task it dropped) are masked too."""
    (tmp_path / "env_tools_agent.py").write_text(ENV_TOOLS_AGENT)
    script = [
        [CallTool("read_config", {"name": "gh"}), CallTool("connect", {"name": "db"})],
        Reply("done"),
    ]
    with ScriptedModelServer(script) as model:
        env = {**ENV_SECRETS, "MODEL_BASE_URL": model.base_url, "AGENT_TASK_QUEUE": task_queue}
        prompt = f"use {ENV_SECRETS['AWS_SECRET_ACCESS_KEY']} for s3"
        out = await asyncio.to_thread(
            _cli, tmp_path, temporal_address, "run", "--json", prompt,
            "--agent", "env_tools_agent:agent", **env,
        )  # fmt: skip
        requests = model.requests
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "completed", result
    assert "WARNING mytools: using token ***" in out.stderr, out.stderr
    assert "RuntimeError('webhook refused token ***')" in out.stderr, out.stderr
    assert "UserWarning: token *** expires soon" in out.stderr, out.stderr
    assert "Exception in thread refresher:" in out.stderr, out.stderr
    assert "RuntimeError: refresh refused token ***" in out.stderr, out.stderr
    answers = {e["call_id"]: e for e in result["events"] if e["type"] == "tool_result"}
    assert sorted(e.get("error") or e["result"] for e in answers.values()) == [
        "RuntimeError: login refused for password ***",
        "token=*** db=postgresql://app:***@db:5432/prod registry=*** azure=***"
        " git=credential.helper=manager-core dotenv=***",
    ]
    where = {
        "history": await _history_json(client, result["run_id"]),
        "output": out.stdout + out.stderr,
        "model requests": repr(requests),
    }
    secrets = [*ENV_SECRETS.values(), "leak-DbUrl-Pass-5150", "leak-Dotenv-Token-0071"]
    secrets += ["leak-db-Password-77"]
    secrets += JSON_SECRETS
    assert not _found(where, [s for s in secrets if s != ENV_SECRETS["GIT_CONFIG_PARAMETERS"]])


async def test_content_recorded_unmasked_is_masked_of_known_keys_on_the_way_out(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """A key recorded in a run's content by a process that did not know it (an older
    version, a worker without the key): the tool's arguments and result, the model's
    answer, the messages. A reader that knows the key (its OPENAI_API_KEY) shows `***`:
    `show`, `show --jsonl`, `export`, `list --json`, `show --store`, and in a process that
    knows it the RunResult of `resume`, `stream` and GET /runs/{id}."""
    import httpx

    from agentor_temporal.activities._redact import remember
    from agentor_temporal.serve import create_app

    key = f"sk-recorded-{uuid.uuid4().hex}"  # known to no process until the readers below
    store = tmp_path / "runs"
    script = [CallTool("get_weather", {"city": key}), Reply(f"the key is {key}")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(store),
            api_key="sk-test-another-key-0123456789",
        )
        result = await agent.arun("What is the weather?")
        assert result.status == "completed", result.error
        assert key in result.final_output  # recorded as it was: no process knew the key
        agent.embedded_worker = False
        env = {"OPENAI_API_KEY": key}  # the readers' processes know it
        run = ["show", result.run_id]
        outs = await asyncio.gather(
            *(
                asyncio.to_thread(_cli, tmp_path, address, *args, **env)
                for address, args in [
                    (temporal_address, run),
                    (temporal_address, [*run, "--jsonl"]),
                    (temporal_address, ["export", result.run_id]),
                    (temporal_address, ["list", "--json", "--limit", "50"]),
                    (None, ["show", "--store", str(store), result.run_id]),
                    (None, ["show", "--store", str(store), result.run_id, "--jsonl"]),
                ]
            )
        )
        remember(key)  # and now this one
        again = await agent.aresume(result.run_id)
        streamed = [event async for event in agent.stream(result.run_id)]
        transport = httpx.ASGITransport(app=create_app([agent]))
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as http:
            answer = await http.get(f"/runs/{result.run_id}")
    texts = {}
    for number, out in enumerate(outs):
        assert out.returncode == 0, (number, out.stderr)
        texts[f"command {number}: {out.args[3:]}"] = out.stdout + out.stderr
    assert "The weather in *** is sunny" in texts[next(iter(texts))]
    assert again.final_output == "the key is ***"
    texts["resume"] = json.dumps(again.to_dict(), default=str)
    texts["stream"] = repr(streamed)
    texts["GET /runs"] = answer.text
    assert not _found(texts, [key]), texts


async def test_a_known_key_in_a_model_setting_of_any_name_is_never_recorded(
    client: Client, task_queue: str, tmp_path: Path, warnings_log: pytest.LogCaptureFixture
) -> None:
    """The agent's key in model settings whose names do not say credential (`user=`,
    `metadata={"note": ...}`) is sent to the model from the worker, as `extra_body`, and
    the openai client's `default_query` (an Azure Functions `code`) as the query, not
    recorded in the run's spec and model requests (history, the UI, the JSONL); the key in
    the instructions, which the model needs as written, is warned of when the agent is
    built."""
    key = f"sk-setting-{uuid.uuid4().hex}"
    code = f"fn{uuid.uuid4().hex}"  # an Azure Functions key, in the openai client's option
    with ScriptedModelServer() as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            store=FileStore(tmp_path),
            api_key=key,
            user=key,
            metadata={"note": key, "team": "weather"},
            default_query={"code": code},
            temperature=0.2,
        )
        result = await agent.arun(PROMPT)
        requests, query = model.requests, model.last_query
    assert result.status == "completed", result.error
    assert [(r["user"], r["metadata"], r["temperature"]) for r in requests] == [
        (key, {"note": key, "team": "weather"}, 0.2)
    ] * 2
    assert query == f"code={code}" and "default_query" not in requests[0]
    where = {
        "history": await _history_json(client, result.run_id),
        "store": _store_text(tmp_path),
        "result": repr(result),
    }
    assert not _found(where, [key, code])
    assert "Weather Agent" not in _log_text(warnings_log)
    _agent(api_key=key, instructions=f"Sign each answer with {key}.")
    warned = _log_text(warnings_log)
    assert "Agent 'Weather Agent': its instructions hold a key this process knows" in warned
    assert key not in warned


async def test_a_waiting_calls_arguments_recorded_unmasked_are_masked_in_pending(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`pending` (table and --json) masks the keys its process knows in the arguments of a
    call waiting for approval, recorded as they were by a worker that did not know the
    key, as `show` does."""
    key = f"sk-waiting-{uuid.uuid4().hex}"
    script = [CallTool("transfer", {"amount": 5000, "to": key}, id="call_pay"), Reply("ok")]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            api_key="sk-test-another-key-0123456789",
            tools=[transfer_tool()],
        )
        paused = await agent.arun("Pay.")
    try:
        assert paused.status == "awaiting_approval", paused.error
        assert paused.pending_approvals[0].args == {"amount": 5000, "to": key}
        env = {"OPENAI_API_KEY": key}
        table, as_json = await asyncio.gather(
            asyncio.to_thread(_cli, tmp_path, temporal_address, "pending", **env),
            asyncio.to_thread(_cli, tmp_path, temporal_address, "pending", "--json", **env),
        )
    finally:
        await client.get_workflow_handle(paused.run_id).terminate(reason="test over")
    assert table.returncode == 0 and as_json.returncode == 0, (table.stderr, as_json.stderr)
    rows = [r for r in json.loads(as_json.stdout) if r["run_id"] == paused.run_id]
    assert [r["args"] for r in rows] == [{"amount": 5000, "to": "***"}]
    assert paused.run_id in table.stdout
    assert not _found({"pending": table.stdout, "pending --json": as_json.stdout}, [key])


async def test_the_clis_progress_masks_keys_its_process_knows(
    client: Client, temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    """`run --no-worker` narrates a run a fleet's worker records: a key the command's process
    knows (its OPENAI_API_KEY) and that worker did not, in a tool's arguments, its result
    and the model's answer, is masked in the progress lines and the answer."""
    from agentor_temporal.worker import build_worker

    key = f"sk-narrated-{uuid.uuid4().hex}"
    script = [CallTool("get_weather", {"city": key}), Reply(f"the key is {key}")]
    with ScriptedModelServer(script) as model:
        fleet = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            api_key="sk-test-another-key-0123456789",
        )
        env = {"MODEL_BASE_URL": model.base_url, "AGENT_TASK_QUEUE": task_queue}
        async with build_worker(client, [fleet], task_queue=task_queue):  # type: ignore[list-item]
            out = await asyncio.to_thread(
                _cli, tmp_path, temporal_address, "run", "--no-worker", PROMPT,
                "--agent", "procs.cli_agents:agent", OPENAI_API_KEY=key, **env,
            )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "  turn 1: calling get_weather(city='***')" in out.stderr.splitlines(), out.stderr
    assert out.stdout.splitlines()[-1] == "the key is ***"
    assert not _found({"output": out.stdout + out.stderr}, [key])


async def test_the_timeline_masks_keys_its_process_knows(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`show --timeline` labels a run a worker recorded without knowing a key: a tool call's
    arguments and a retried model request's failure are masked, not cut mid-key."""
    from agentor_temporal._timeline import read_timeline
    from agentor_temporal.activities._redact import remember

    key = f"tl-{uuid.uuid4().hex}"  # no shape a key is known by: recorded as it was
    script = [
        Fail(500, f"upstream refused {key}", retry_after=0),
        CallTool("get_weather", {"city": key}),
        Reply("done"),
    ]
    with ScriptedModelServer(script) as model:
        agent = _agent(
            base_url=model.base_url,
            task_queue=task_queue,
            temporal=client,
            api_key="sk-test-another-key-0123456789",
        )
        result = await agent.arun(PROMPT)
    assert result.status == "completed", result.error
    remember(key)  # the reader knows it
    timeline = await read_timeline(client, result.run_id)
    assert timeline is not None
    labels = [bar.label for bar in timeline.bars]
    assert "get_weather(city='***')" in labels, labels
    retried = [bar.label for bar in timeline.bars if bar.kind == "retry"]
    assert retried and all("upstream refused ***" in label for label in retried), retried
    assert not any(key[:8] in label for label in labels), labels
