"""What a worker knows: agents by name, their tools, stores and model access.

A run names its agent; the worker that picks it up looks the name up here.
Secrets (API keys) stay in this process: they are read from the definition or
the worker's environment when a request is made and never enter workflow
input, activity input or history.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from agentor_temporal.activities import _redact, _tls
from agentor_temporal.activities._finished import FinishedCalls
from agentor_temporal.activities._threads import ToolThreads
from agentor_temporal.activities.tooldef import Tool
from agentor_temporal.store.base import Store
from agentor_temporal.workflows.formatting import quoted
from agentor_temporal.workflows.policies import (
    MODEL_CONNECT_LIMIT,
    MODEL_REPLY_LIMIT,
    SYNC_TOOL_THREADS,
)
from agentor_temporal.workflows.redaction import (
    CREDENTIAL_NAME,
    header_secrets,
    query_credential,
    url_secrets,
)
from agentor_temporal.workflows.types import AgentSpec

logger = logging.getLogger(__name__)

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
#: Locks guarding mirror writes into stores that cannot append by position.
_RUN_LOCK_STRIPES = 64
#: Seconds to wait for dead clients to close: it fails fast (their loop is
#: gone), and this holds up the request that found them.
_CLOSE_DEAD_WAIT = 5.0


#: `model_settings` that are options of the HTTP request, not of the model:
#: kept on the worker (`AgentDefinition.client_options`), out of history.
#: `default_headers` and `default_query` (options of the openai client, not of
#: a request) are sent as `extra_headers` and `extra_query`; `extra_body` may
#: carry a key as well; `timeout` may be an `openai.Timeout`, which history
#: could not hold.
CLIENT_OPTIONS = (
    "extra_headers",
    "extra_query",
    "extra_body",
    "default_headers",
    "default_query",
    "timeout",
)


def _client_secrets(options: dict[str, Any]) -> list[str]:
    """The credentials in client options: every header value that is not plainly
    descriptive (`header_secrets`), the query values a base_url's query would
    have taken for one (`query_credential`), and the body values whose names
    say credential (`api_key`, `sig`, ...)."""
    found = [
        secret
        for name, value in (options.get("extra_headers") or {}).items()
        for secret in header_secrets(str(name), value)
    ]
    # the query's values as a base_url's query would have them (`query_credential`:
    # by name, Azure Functions' `code` too, or shaped like a key)
    for name, value in (options.get("extra_query") or {}).items():
        values = value if isinstance(value, list | tuple) else [value]
        found += [
            str(item)
            for item in values
            if isinstance(item, str | int) and query_credential(str(name), str(item))
        ]
    # named as `_holds_credential` finds them: a list takes the name it is under
    pending: list[tuple[str, Any]] = [
        ("", options.get("extra_query")),
        ("", options.get("extra_body")),
    ]
    while pending:
        name, value = pending.pop()
        if isinstance(value, dict):
            pending += [(str(key), item) for key, item in value.items()]
        elif isinstance(value, list):
            pending += [(name, item) for item in value]
        elif isinstance(value, str) and CREDENTIAL_NAME.search(name):
            found.append(value)
    return found


def _holds_credential(name: str, value: Any) -> bool:
    """Whether a model setting is, or holds, a text whose name says credential
    (`metadata={"session_token": ...}`)."""
    if isinstance(value, str):
        return bool(CREDENTIAL_NAME.search(name))
    if isinstance(value, dict):
        return any(_holds_credential(str(k), v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_credential(name, item) for item in value)
    return False


def _warn_of_recorded_keys(agent: AgentDefinition) -> None:
    """Warn when the agent's instructions or a tool's description or schema hold a key
    this process knows: they are recorded as they are in every run (its spec, the system
    message of each model request, the JSONL), and the model needs them as written, so
    they cannot be masked there."""
    where = [
        what
        for what, text in [
            ("instructions", agent.instructions or ""),
            *(
                (f"tool {tool.name!r}", json.dumps(tool.spec().openai_schema()))
                for tool in agent.tools
            ),
        ]
        if text and _redact.mask_secrets(text) != text
    ]
    if where:
        logger.warning(
            "Agent %r: its %s hold a key this process knows (the model's key, a header's "
            "value, a credential variable): they are recorded as written in every run's "
            "history (the Temporal UI), the JSONL and each model request. Give the key to "
            "the code that needs it (a tool reading an environment variable) instead.",
            agent.name,
            " and ".join(where),
        )


class UnknownAgentError(LookupError):
    """A run names an agent this worker does not have."""


@dataclass
class AgentDefinition:
    """An agent as a worker runs it (the facade's `Agentor` builds one)."""

    name: str
    model: str
    instructions: str | None = None
    tools: list[Tool] = field(default_factory=list)
    model_settings: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 20
    max_tool_failures: int = 2
    #: may carry credentials (`http://user:pw@host/v1?key=...`): never shown
    base_url: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    store: Store | None = None
    #: `CLIENT_OPTIONS` taken out of `model_settings`: they may carry
    #: credentials, so they stay on the worker and never enter history
    client_options: dict[str, Any] = field(default_factory=dict, repr=False)
    #: ask the model in local activities (`AgentSpec.local_model_calls`)
    local_model_calls: bool = False

    def __post_init__(self) -> None:
        for option in CLIENT_OPTIONS:
            if option in self.model_settings:
                self.client_options[option] = self.model_settings.pop(option)
        for option in ("extra_headers", "extra_query", "extra_body"):
            given = self.client_options.get(option)
            if given is not None and not isinstance(given, dict):
                # the client merges it into each request: anything else failed every one
                raise ValueError(f"{option} must be a dict, got {type(given).__name__}")
        for default, extra_option, what in [
            ("default_headers", "extra_headers", "header names"),
            ("default_query", "extra_query", "query names"),
        ]:
            defaults = self.client_options.pop(default, None) or {}
            if not isinstance(defaults, dict):
                raise ValueError(
                    f"{default} must be a dict of {what} to values, got "
                    f"{type(defaults).__name__} ({extra_option}= sends them with each request "
                    "too)"
                )
            if defaults:
                extra = self.client_options.get(extra_option) or {}
                self.client_options[extra_option] = {**defaults, **extra}
        # error text and log lines of this process mask these from now on
        _redact.remember(self.api_key)
        for secret in [*url_secrets(self.base_url), *_client_secrets(self.client_options)]:
            _redact.remember(secret)
        # a setting holding a credential (by its name, or a key this process knows under
        # any name: `user=<the key>`) is sent in the body from the worker, as `extra_body`
        # is, instead of being recorded with each run (its spec, each model request)
        private = {
            k: v
            for k, v in self.model_settings.items()
            if _holds_credential(k, v) or _redact.mask_input(v) != v
        }
        body = self.client_options.get("extra_body")
        if private and (body is None or isinstance(body, dict)):
            for name in private:
                del self.model_settings[name]
            self.client_options["extra_body"] = {**private, **(body or {})}
            for secret in _client_secrets({"extra_body": private}):
                _redact.remember(secret)
        check_request_settings(self.api_key, self.model_settings, self.client_options)
        _warn_of_recorded_keys(self)

    def tool(self, name: str) -> Tool | None:
        """The tool called `name`, if any."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    def fingerprint(self) -> str:
        """A short hash of what must match for a run to be resumed by this agent."""
        shape = {
            "model": self.model,
            "instructions": self.instructions,
            "tools": sorted(
                json.dumps(t.spec().openai_schema(), sort_keys=True) for t in self.tools
            ),
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, recorded: dict[str, Any]) -> list[str]:
        """How a recorded spec (an `AgentSpec` as a dict) differs from this definition.

        Empty when the fingerprints match: what "built the same way" means.
        """
        if recorded.get("fingerprint") == self.fingerprint():
            return []
        found = []
        if recorded.get("model") != self.model:
            found.append(f"model {recorded.get('model')!r} vs {self.model!r}")
        if recorded.get("instructions") != self.instructions:
            found.append("instructions differ")
        theirs = {t["name"]: t for t in recorded.get("tools") or []}
        mine = {t.name: t.spec() for t in self.tools}
        missing = sorted(set(theirs) - set(mine))
        extra = sorted(set(mine) - set(theirs))
        changed = sorted(
            n
            for n in set(theirs) & set(mine)
            if theirs[n].get("parameters") != mine[n].parameters
            or theirs[n].get("description") != mine[n].description
        )
        if missing:
            found.append(f"tools missing here: {', '.join(missing)}")
        if extra:
            found.append(f"tools not in the run: {', '.join(extra)}")
        if changed:
            found.append(f"tools changed: {', '.join(changed)}")
        return found or ["definition differs"]

    def spec(
        self,
        *,
        mirror: bool = False,
        search_attributes: bool = False,
        status_attributes: bool = False,
        fork_attribute: bool = False,
    ) -> AgentSpec:
        """The spec a run records at the start of each segment."""
        return AgentSpec(
            name=self.name,
            model=self.model,
            instructions=self.instructions,
            tools=[t.spec() for t in self.tools],
            model_settings=dict(self.model_settings),
            max_turns=self.max_turns,
            max_tool_failures=self.max_tool_failures,
            mirror=mirror,
            search_attributes=search_attributes,
            status_attributes=status_attributes,
            fork_attribute=fork_attribute,
            fingerprint=self.fingerprint(),
            local_model_calls=self.local_model_calls,
        )


class AgentRegistry:
    """The agents one worker serves, by name."""

    def __init__(
        self,
        agents: list[AgentDefinition] | None = None,
        *,
        default_store: Store | None = None,
    ) -> None:
        self._agents: dict[str, AgentDefinition] = {}
        self.default_store = default_store
        #: set once the namespace is known to have AgentName/AgentModel
        self.search_attributes = False
        #: set once it is known to have AgentStatus/AgentTokens too
        self.status_attributes = False
        #: set once it is known to have ForkedFrom
        self.fork_attribute = False
        #: whether the three above are known (`ensure_search_attributes` asked the
        #: namespace): until then a spec read here may not be what runs record
        self.attributes_known = False
        #: openai clients per event loop (a client is bound to the loop it first
        #: ran on), then per endpoint and key; a closed loop's are dropped
        self._clients: dict[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = {}
        self._lock = threading.Lock()
        #: answers of tool calls this process finished (see FinishedCalls)
        self.finished_calls = FinishedCalls()
        # striped: bounded however many runs this worker serves
        self._run_locks = [threading.Lock() for _ in range(_RUN_LOCK_STRIPES)]
        self._tool_pool: ToolThreads | None = None
        for agent in agents or []:
            self.register(agent)

    def register(self, agent: AgentDefinition) -> None:
        """Add an agent, or replace the one with the same name."""
        with self._lock:
            self._agents[agent.name] = agent

    def names(self) -> list[str]:
        """Registered agent names, sorted."""
        with self._lock:
            return sorted(self._agents)

    def get(self, name: str) -> AgentDefinition:
        """The agent called `name`.

        Raises:
            UnknownAgentError: naming the agents this worker knows.
        """
        with self._lock:
            agent = self._agents.get(name)
        if agent is None:
            known = ", ".join(repr(n) for n in self.names()) or "none"
            raise UnknownAgentError(
                f"Unknown agent {quoted(name)}: this worker knows {known}. Register it with "
                "`python worker.py --agents module:attr` (or build the Agentor with that name)."
            )
        return agent

    def store_for(self, name: str) -> Store | None:
        """The store the agent's events are mirrored into, if any."""
        try:
            agent = self.get(name)
        except UnknownAgentError:
            return self.default_store
        return agent.store if agent.store is not None else self.default_store

    def run_lock(self, store: Store, run_id: str) -> threading.Lock:
        """The lock serialising mirror writes of one run into one store."""
        return self._run_locks[hash((id(store), run_id)) % _RUN_LOCK_STRIPES]

    def tool_pool(self) -> ToolThreads:
        """The threads sync tools run in (asyncio's default pool is only
        cpu+4 threads, which would serialise slow sync tools across runs)."""
        with self._lock:
            if self._tool_pool is None:
                self._tool_pool = ToolThreads(SYNC_TOOL_THREADS)
            return self._tool_pool

    def openai_client(
        self, agent: AgentDefinition, loop: asyncio.AbstractEventLoop | None = None
    ) -> Any:
        """An `AsyncOpenAI` client for the agent, with its own retries off.

        Temporal owns retries (with backoff and visibility in the UI); the
        client retrying underneath would multiply them. One client per
        endpoint and event loop (`loop`, by default the running one): clients
        are bound to the loop they were first used on.
        """
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient, Timeout

        # an empty OPENAI_BASE_URL (compose passes one through) means the default
        base_url = agent.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL
        api_key = agent.api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise ValueError(
                "No API key for the model: set OPENAI_API_KEY in the worker's environment "
                "or pass api_key= to Agentor."
            )
        _redact.remember(api_key)
        for secret in url_secrets(base_url):
            _redact.remember(secret)
        loop = loop or asyncio.get_running_loop()
        dead: list[Any] = []
        with self._lock:
            for stale in [other for other in self._clients if other.is_closed()]:
                # bound to a loop that is gone: unusable, and holding its pool
                dead += self._clients.pop(stale).values()
            clients = self._clients.setdefault(loop, {})
            client = clients.get((base_url, api_key))
            if client is None:
                # each read within the reply's bound, the connect within its own
                timeout = Timeout(
                    MODEL_REPLY_LIMIT.total_seconds(),
                    connect=MODEL_CONNECT_LIMIT.total_seconds(),
                )
                # one trust store for all of them (each client loading its own: 45-60 ms)
                context = _tls.shared_context(DefaultAsyncHttpxClient)
                tls: dict[str, Any] = {} if context is None else {"verify": context}
                client = AsyncOpenAI(
                    base_url=base_url,
                    api_key=api_key,
                    max_retries=0,
                    timeout=timeout,
                    # openai's own pool (its defaults, no finaliser): dropped open,
                    # openai's schedules its close on whichever loop collects it,
                    # which inside a workflow activation is refused and printed
                    http_client=DefaultAsyncHttpxClient(timeout=timeout, **tls),
                )
                clients[(base_url, api_key)] = client
        if dead:
            _close_dead(dead)
        return client

    def open_clients(self, loop: asyncio.AbstractEventLoop | None = None) -> int:
        """Make, for `loop` (by default the running one), the openai clients this worker's
        agents will use.

        Done at start so the worker's idle footprint includes them (the
        first loads the process's TLS trust store, 50-150 ms: a caller on
        `loop` may make them in a thread); agents without an API key are left to fail their
        first request clearly. Returns how many clients exist.
        """
        loop = loop or asyncio.get_running_loop()
        with self._lock:
            agents = list(self._agents.values())
        for agent in agents:
            try:
                client = self.openai_client(agent, loop)
            except ValueError:
                continue
            client.chat.completions  # noqa: B018 - the resource the requests go through
        with self._lock:
            return len(self._clients.get(loop, {}))

    async def close_clients(self) -> None:
        """Close the openai clients made on the running loop (a stopping worker's)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = list(self._clients.pop(loop, {}).values())
        for client in clients:
            try:
                await client.close()
            except Exception:  # closing is best effort: the process is stopping
                pass


def _close_dead(clients: list[Any]) -> None:
    """Close openai clients whose event loop is closed, on a loop of their own.

    Dropped open, each one's finaliser would schedule its `aclose()` on
    whichever loop collects it, a coroutine never awaited once that loop
    ends (a `RuntimeWarning`). The connections they hold belonged to the
    dead loop and cannot be shut down gracefully; closing marks each client
    closed, and its sockets go with it. In a thread: this one runs a loop.
    """

    async def close_all() -> None:
        for client in clients:
            with contextlib.suppress(Exception):  # "Event loop is closed": expected
                await client.close()

    thread = threading.Thread(
        target=asyncio.run, args=(close_all(),), name="agentor-close-clients", daemon=True
    )
    thread.start()
    thread.join(_CLOSE_DEAD_WAIT)


def check_request_settings(
    api_key: str | None, model_settings: dict[str, Any], client_options: dict[str, Any]
) -> None:
    """Refuse an API key, header value or timeout the HTTP client could never send.

    Each would fail every request before it left this process, and look like
    an endpoint that is down (a key read from a file keeps its newline). The
    message names the setting, never its value: either may be a credential.

    Raises:
        ValueError: saying which setting to fix.
    """
    if isinstance(api_key, str) and not re.fullmatch(r"[!-~]*", api_key):
        raise ValueError(
            "The API key (api_key, or OPENAI_API_KEY) begins or ends with whitespace (a key "
            "read from a file keeps its line break: strip it)"
            if api_key != api_key.strip()
            else "The API key (api_key, or OPENAI_API_KEY) holds a space, a control or a "
            "non-ASCII character, which an HTTP header cannot carry"
        )
    headers = client_options.get("extra_headers") or model_settings.get("extra_headers")
    if isinstance(headers, dict) and headers:
        # imported only here: importing openai takes most of a second, which a process
        # building an agent only to approve, deny or list never needs
        from openai import NotGiven, Omit  # what the client takes to leave a header out
    for name, value in headers.items() if isinstance(headers, dict) else ():
        if not isinstance(name, str):
            raise ValueError(
                f"extra_headers has a {type(name).__name__} key; header names are text"
            )
        if not isinstance(value, (str, bytes, Omit, NotGiven)):
            raise ValueError(
                f"extra_headers[{quoted(name)}] is of type {type(value).__name__}; "
                "an HTTP header's value is text"
            )
        if isinstance(value, str) and not re.fullmatch(r"([!-~]([ \t!-~]*[!-~])?)?", value):
            raise ValueError(
                f"extra_headers[{quoted(str(name))}] holds a line break, a control or non-ASCII "
                "character, or whitespace at its ends; an HTTP header cannot carry it"
            )
    timeout = client_options.get("timeout", model_settings.get("timeout"))
    if timeout is None:
        return
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        if timeout > 0:  # NaN is not
            return
    else:
        from openai import Timeout  # httpx's, which the client takes as it is

        if isinstance(timeout, Timeout):
            return
    raise ValueError(
        f"timeout must be a positive number of seconds (or an openai.Timeout), got {timeout!r}"
    )
