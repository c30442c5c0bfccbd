"""The HTTP app: Agentor's routes, durable run routes, A2A, the page, and access control.

Routes are thin: each validates its request (pydantic models, run ids),
calls the facade (`astart`, `aresume`, `stream`, `aapprove` / `adeny`,
`arun`, `stream_chat`) or reads history, and maps the facade's outcomes to
status codes: a bad request 400, an unknown run 404, a run not in a state
to do it 409, Temporal unreachable 503; every error is `{"error": message}`,
never a stack trace. With a token (`AGENTOR_SERVE_TOKEN`), every route but
`/health` and the agent card needs `Authorization: Bearer <token>` or the
cookie the page sets once it was opened as `/?token=<token>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from temporalio.service import RPCError

from agentor_temporal._decided import EXECUTION_RUN_ID_PATTERN
from agentor_temporal._fork import ForkIdInUse, start_fork_run
from agentor_temporal._outage import throttled
from agentor_temporal._outage import unreachable as server_unreachable
from agentor_temporal._resume import resume_run
from agentor_temporal._runs import run_events, undelivered
from agentor_temporal._runtime import Runtime
from agentor_temporal.activities import _redact
from agentor_temporal.agent import Agentor
from agentor_temporal.connection import ConnectionFailed
from agentor_temporal.serve import a2a, page
from agentor_temporal.serve._bodies import BodyGuard
from agentor_temporal.serve._compat import agent_output, chat_chunks
from agentor_temporal.serve._decisions import decided_before, decision_id, refused_kept
from agentor_temporal.serve._events import KEEPALIVE_INTERVAL, frame, keepalive, run_frames
from agentor_temporal.serve._state import (
    UNREACHABLE_RETRY_AFTER,
    Agents,
    ApiError,
    asked_by,
    check_run_id,
    result_response,
    snapshot,
)
from agentor_temporal.serve._stopping import stopping_note, until_stopping
from agentor_temporal.store import PendingApproval, new_run_id
from agentor_temporal.workflows.policies import MAX_DECISION_TEXT

logger = logging.getLogger("agentor_temporal.serve")

#: The cookie the page authenticates with once opened as `/?token=...`.
COOKIE = "agentor_serve_token"
#: The response header that names the durable run behind a `/chat` answer.
RUN_HEADER = "X-Agentor-Run-Id"
#: Seconds a decision waits for a worker to take it before the route gives up (504).
DECISION_TIMEOUT = 30.0
#: The request header that makes a start happen once: a retry of `POST /chat`
#: or `POST /runs` with the same key (and agent) attaches to the run the first
#: request started instead of starting another, whose tools would run again;
#: of `POST /runs/{id}/fork`, to the fork; of `POST /runs/{id}/resume`, to the
#: segment the first request started (its outcome, not another segment).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: names the run an idempotency key starts (`keyed_run_id`)
_KEYED_RUNS = uuid.UUID("8f3c2a71-5d4e-4b6a-9e0f-1c2d3e4f5a6b")
#: the longest idempotency key taken (the IETF draft's keys are short strings)
MAX_IDEMPOTENCY_KEY = 255

Input = str | list[dict[str, Any]]
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class StartRun(BaseModel):
    """`POST /runs`."""

    model_config = ConfigDict(extra="forbid")
    input: Input
    run_id: str | None = None
    agent: str | None = None
    max_turns: int | None = Field(default=None, ge=1)
    #: publish text deltas, for `GET /runs/{run_id}/events?text=1`
    stream_text: bool = False


class ChatRequest(BaseModel):
    """`POST /chat`, Agentor 0.1.1's `APIInputRequest` (plus an optional agent name)."""

    input: Input
    stream: bool = False
    agent: str | None = None


class ResumeRequest(BaseModel):
    """`POST /runs/{run_id}/resume` (the body is optional)."""

    model_config = ConfigDict(extra="forbid")
    max_turns: int | None = Field(default=None, ge=1)


class ForkRequest(BaseModel):
    """`POST /runs/{run_id}/fork` (the body is optional): `Agentor.fork`'s arguments."""

    model_config = ConfigDict(extra="forbid")
    input: Input | None = None
    fork_id: str | None = None
    max_turns: int | None = Field(default=None, ge=1)
    at: int | None = None


class DecisionRequest(BaseModel):
    """`POST /runs/{run_id}/approvals/{call_id}`."""

    model_config = ConfigDict(extra="forbid")
    approve: bool
    reason: str | None = Field(default=None, max_length=MAX_DECISION_TEXT)
    by: str | None = Field(default=None, max_length=MAX_DECISION_TEXT)
    #: the turn of the call decided, as the run's pending approvals show it: a
    #: decision is refused (409) when the call waiting with this id is another
    #: turn's; None: the turn of the call waiting when the request is read
    turn: int | None = Field(default=None, ge=1)
    #: the run's execution that asked, as its pending approvals show it: refused
    #: (409) once that execution has ended (the run was cancelled and resumed,
    #: and its turns count from 1 again); None: the execution waiting now
    execution_run_id: str | None = Field(default=None, pattern=EXECUTION_RUN_ID_PATTERN)
    #: the position of the call's `approval_request` event in the run (its `id:`
    #: in the event stream): the decision decides that call only, in the turn
    #: and execution that asked (what the page sends)
    asked_at: int | None = Field(default=None, ge=1)


def _token_matches(supplied: str | None, token: str) -> bool:
    return supplied is not None and hmac.compare_digest(supplied.encode(), token.encode())


def _authorized(request: HTTPConnection, token: str | None) -> bool:
    if token is None:
        return True
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    bearer = value.strip() if scheme.lower() == "bearer" else None
    return _token_matches(bearer, token) or _token_matches(request.cookies.get(COOKIE), token)


#: a route's answer to a request without the token
_NO_TOKEN = (
    401,
    "this server needs a token: send 'Authorization: Bearer <token>' "
    "(the value of AGENTOR_SERVE_TOKEN it was started with)",
    {"WWW-Authenticate": "Bearer"},
)


def _guard(token: str | None) -> Callable[[Request], Awaitable[None]]:
    async def check(request: Request) -> None:
        if not _authorized(request, token):
            raise ApiError(*_NO_TOKEN)

    return check


def _invalid(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(x) for x in error.get("loc", ()) if x != "body")
        parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
    return "invalid request: " + "; ".join(parts)


def idempotency_key(request: Request) -> str | None:
    """The request's `Idempotency-Key`, or None.

    Raises:
        ApiError: 400 for a key that is empty, too long, or not printable ASCII.
    """
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None and (
        not 0 < len(key) <= MAX_IDEMPOTENCY_KEY or not all(" " <= c <= "~" for c in key)
    ):
        raise ApiError(
            400,
            f"{IDEMPOTENCY_HEADER} must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters",
        )
    return key


def keyed_run_id(agent: Agentor, request: Request, *, fork_of: str | None = None) -> str | None:
    """The run id a request's `Idempotency-Key` names (one per agent and key), or None.

    `fork_of`: the request forks that run; the key names one fork of it.

    Raises:
        ApiError: 400 for a key that is empty, too long, or not printable ASCII.
    """
    key = idempotency_key(request)
    if key is None:
        return None
    name = f"{agent.name}\n{key}" if fork_of is None else f"{agent.name}\nfork {fork_of}\n{key}"
    return uuid.uuid5(_KEYED_RUNS, name).hex


def _check_input(input: Input) -> None:
    if (isinstance(input, str) and not input.strip()) or not input:
        raise ApiError(400, "input is empty: send a prompt or a list of chat messages")


def _resume_point(last_event_id: str | None, after: int | None) -> int:
    raw: Any = last_event_id if last_event_id is not None else after
    if raw is None:
        return 0
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise ApiError(
            400, f"Last-Event-ID / after must be an event position (0 or more), got {raw!r}"
        )
    return value


def _lifespan(served: Agents) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Connect before taking requests; keep embedded workers for the server's life."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = await served.client()
        async with contextlib.AsyncExitStack() as stack:
            for agent in served.all:
                if agent.embedded_worker:
                    serving = Runtime.get().worker_for(client, agent.task_queue, agent.definition)
                    await stack.enter_async_context(serving)
            yield

    return lifespan


def create_app(agents: Sequence[Agentor], *, token: str | None = None) -> FastAPI:
    """The app serving `agents` (the first answers `/chat`, A2A and runs naming no agent).

    Args:
        agents: the agents; they must share one Temporal.
        token: a bearer token every route but `/health` and the agent card
            requires (None: no check).

    Raises:
        ValueError: for no agents, duplicate names, or different Temporal servers.
    """
    served = Agents(agents)
    token = token or None
    # a secret of this process, as the agents' keys are: masked in every log line
    # (the access log's path, whatever query name it came under) and error
    _redact.remember(token)
    app = FastAPI(
        title="agentor-temporal",
        lifespan=_lifespan(served),
        # with a token only /health and the card are open: the API docs too are not
        docs_url=None if token else "/docs",
        redoc_url=None,
        openapi_url=None if token else "/openapi.json",
    )
    _errors(app)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200, content="OK")

    @app.api_route("/.well-known/agent-card.json", methods=["GET", "HEAD", "OPTIONS"])
    async def agent_card(request: Request) -> JSONResponse:
        url = str(request.base_url).rstrip("/")
        return JSONResponse(a2a.agent_card(served.default, url, token is not None).model_dump())

    @app.get("/", response_class=HTMLResponse)
    async def index(request: Request) -> Response:
        supplied = request.query_params.get("token")
        if token is not None and supplied is not None:
            if not _token_matches(supplied, token):
                return HTMLResponse(page.UNAUTHORIZED, status_code=401)
            # the token leaves the address bar (and history) for a cookie
            response = RedirectResponse("/", status_code=303)
            # Secure over https, the proxy's too: uvicorn takes the scheme from a trusted
            # proxy's X-Forwarded-Proto (127.0.0.1, or FORWARDED_ALLOW_IPS), so the token
            # never goes back over plain http; on plain http a Secure cookie is never sent
            response.set_cookie(
                COOKIE,
                supplied,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response
        if not _authorized(request, token):
            return HTMLResponse(page.UNAUTHORIZED, status_code=401)
        return HTMLResponse(page.render([a.name for a in served.all]))

    app.include_router(_routes(served), dependencies=[Depends(_guard(token))])
    # FastAPI reads a body before the token's check: a body is read only with the token
    app.add_middleware(
        BodyGuard, authorized=lambda conn: _authorized(conn, token), refusal=_NO_TOKEN
    )
    return app


#: A 503 for an unreachable Temporal says when to ask again (a server restart takes seconds).
_AGAIN_LATER = {"Retry-After": str(UNREACHABLE_RETRY_AFTER)}


def _errors(app: FastAPI) -> None:
    # every answer's message is redacted (URL credentials, known secrets): it may
    # quote what a route met, such as a store's error naming its URL, or the key

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            {"error": _redact.clean(exc.message)}, status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _redact.clean(_invalid(exc))}, status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": _redact.clean(str(exc.detail))}, status_code=exc.status_code)

    @app.exception_handler(ConnectionFailed)
    async def unreachable(request: Request, exc: ConnectionFailed) -> JSONResponse:
        return JSONResponse(
            {"error": _redact.clean(f"Temporal is unavailable: {exc}")},
            status_code=503,
            headers=_AGAIN_LATER,
        )

    @app.exception_handler(RPCError)
    async def rpc_error(request: Request, exc: RPCError) -> JSONResponse:
        logger.warning("Temporal failed a request: %s", exc)
        if server_unreachable(exc):
            # also a server holding the connection without answering ("Timeout
            # expired"): it did not refuse anything, and may well come back
            return JSONResponse(
                {"error": _redact.clean(f"Temporal is unreachable: {exc.message}")},
                status_code=503,
                headers=_AGAIN_LATER,
            )
        if throttled(exc):
            # a rate limit or an overloaded server: the request may go through later
            return JSONResponse(
                {"error": _redact.clean(f"Temporal is throttling requests: {exc.message}")},
                status_code=503,
                headers=_AGAIN_LATER,
            )
        return JSONResponse(
            {"error": _redact.clean(f"Temporal refused the request: {exc.message}")}, 502
        )

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("error serving %s %s", request.method, request.url.path)
        return JSONResponse(
            {"error": f"internal error ({type(exc).__name__}); the server's log has the details"},
            status_code=500,
        )


def _routes(served: Agents) -> APIRouter:
    router = APIRouter()

    @router.post("/")
    async def jsonrpc(request: Request) -> Response:
        return await a2a.handle(served, request)

    @router.post("/chat")
    async def chat(body: ChatRequest, request: Request) -> Response:
        agent = served.get(body.agent)
        _check_input(body.input)
        run_id = keyed_run_id(agent, request) or new_run_id()
        headers = {RUN_HEADER: run_id}
        if body.stream:
            chunks = until_stopping(
                chat_chunks(agent, body.input, run_id),
                lambda: json.dumps(agent_output(stopping_note(run_id)), indent=2) + "\n",
            )
            return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
        try:
            result = await agent.arun(body.input, run_id=run_id)
        except (ValueError, TypeError) as exc:
            raise ApiError(400, str(exc)) from None
        return JSONResponse(result.final_output, headers=headers)

    @router.post("/runs", status_code=202)
    async def start(body: StartRun, request: Request) -> JSONResponse:
        agent = served.get(body.agent)
        keyed = keyed_run_id(agent, request)
        if keyed is not None and body.run_id is not None:
            raise ApiError(
                400, f"give run_id or an {IDEMPOTENCY_HEADER} header, not both: each names the run"
            )
        try:
            run_id = await agent.astart(
                body.input,
                body.run_id or keyed,
                max_turns=body.max_turns,
                stream_text=body.stream_text,
            )
        except (ValueError, TypeError) as exc:
            raise ApiError(400, str(exc)) from None
        return JSONResponse(
            {"run_id": run_id}, status_code=202, headers={"Location": f"/runs/{run_id}"}
        )

    @router.get("/runs/{run_id}")
    async def get_run(run_id: str) -> Response:
        agent, segments = await served.find(run_id)
        return result_response((await snapshot(agent, run_id, segments)).result, agent)

    @router.post("/runs/{run_id}/resume")
    async def resume(run_id: str, request: Request, body: ResumeRequest | None = None) -> Response:
        agent, _ = await served.find(run_id, mirrored=True)
        # a retried resume (its answer lost after its segment ended) must not
        # start, and pay for, another segment
        key = idempotency_key(request)
        try:
            result = await Runtime.get().run_async(
                resume_run(agent, run_id, body.max_turns if body else None, key=key)
            )
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0]) if exc.args else str(exc)) from None
        except ValueError as exc:
            raise ApiError(409, str(exc)) from None
        return result_response(result, agent)

    @router.post("/runs/{run_id}/fork", status_code=202)
    async def fork(run_id: str, request: Request, body: ForkRequest | None = None) -> JSONResponse:
        agent, _ = await served.find(run_id)
        body = body or ForkRequest()
        # a retried fork (its answer lost) must not make, and pay for, a second one
        keyed = keyed_run_id(agent, request, fork_of=run_id)
        if keyed is not None and body.fork_id is not None:
            raise ApiError(
                400,
                f"give fork_id or an {IDEMPOTENCY_HEADER} header, not both: each names the fork",
            )
        try:
            fork_id = await Runtime.get().run_async(
                start_fork_run(
                    agent,
                    run_id,
                    body.input,
                    body.fork_id or keyed,
                    body.max_turns,
                    body.at,
                    attach=keyed is not None,
                )
            )
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0]) if exc.args else str(exc)) from None
        except ForkIdInUse as exc:
            raise ApiError(409, str(exc)) from None
        except (ValueError, TypeError) as exc:
            raise ApiError(400, str(exc)) from None
        return JSONResponse(
            {"run_id": fork_id, "forked_from": run_id},
            status_code=202,
            headers={"Location": f"/runs/{fork_id}"},
        )

    @router.get("/runs/{run_id}/events")
    async def events(
        run_id: str, request: Request, after: int | None = None, text: bool = False
    ) -> Response:
        start = _resume_point(request.headers.get("last-event-id"), after)
        agent, segments = await served.find(run_id)
        if segments[-1].status != "running":
            client = await served.client()
            recorded, _ = await served.read(
                lambda: run_events(run_id, segments, agent.store, client=client), run_id
            )
            if start >= len(recorded):
                # nothing more will come: 204 tells an EventSource to stop reconnecting
                return Response(status_code=204)
        body = until_stopping(
            keepalive(run_frames(agent, run_id, start, text), KEEPALIVE_INTERVAL),
            # unnumbered: a reconnect (Last-Event-ID) goes on after the last event sent
            lambda: frame({"message": stopping_note(run_id)}, event="server_stopping"),
        )
        return StreamingResponse(body, media_type="text/event-stream", headers=_SSE_HEADERS)

    # a model's call id may hold a '/': the rest of the path is the id
    @router.post("/runs/{run_id}/approvals/{call_id:path}")
    async def decide(
        run_id: str, call_id: str, body: DecisionRequest, request: Request
    ) -> dict[str, Any]:
        check_run_id(run_id)
        key = idempotency_key(request)
        agent, segments = await served.find(run_id)
        client = await served.client()
        # a retry with the same key is answered with what the first came to (200, or
        # 409 as it was refused): the call waiting now may be a later turn's, same id
        request_id = None if key is None else decision_id(run_id, f"http\n{call_id}\n{key}")
        if request_id is not None:
            try:
                taken = await decided_before(client, run_id, request_id)
            except ValueError as exc:
                raise ApiError(409, str(exc)) from None
            if taken is not None:
                return {"run_id": run_id, **taken}

        async def deciding() -> dict[str, Any]:
            recorded, _ = await served.read(
                lambda: run_events(run_id, segments, agent.store, client=client), run_id
            )
            if not any(e.type == "approval_request" and e.call_id == call_id for e in recorded):
                raise ApiError(
                    404, f"run {run_id!r} never asked for approval of a call {call_id!r}"
                )
            call: str | PendingApproval = call_id
            if body.asked_at is not None:
                call = asked_by(recorded, segments, body.asked_at, call_id)
                for name, given, asked in [
                    ("turn", body.turn, call.turn),
                    ("execution_run_id", body.execution_run_id, call.execution_run_id),
                ]:
                    if given is not None and given != asked:
                        raise ApiError(
                            409,
                            f"event {body.asked_at} asked in {name} {asked!r}, not {given!r}; "
                            "nothing changed",
                        )
            elif body.execution_run_id is not None:
                call = PendingApproval(call_id, "", None, body.turn, body.execution_run_id)
            try:
                # without a turn: the facade sends the turn of the call waiting now; the
                # bound starts when the decision is sent (not its reads of history, nor an outage)
                decided = await agent._decide_within(
                    DECISION_TIMEOUT,
                    run_id,
                    call,
                    body.approve,
                    body.reason,
                    body.by,
                    body.turn,
                    request_id=request_id,
                )
            except KeyError as exc:
                raise ApiError(404, str(exc.args[0]) if exc.args else str(exc)) from None
            except ValueError as exc:
                raise ApiError(409, str(exc)) from None
            except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11
                raise ApiError(
                    504,
                    f"{undelivered(run_id, call_id, DECISION_TIMEOUT)} (agent {agent.name!r}, "
                    f"task queue {agent.task_queue!r})",
                ) from None
            return decided

        # refused, the same key sent again is refused again (a 409): not taken for a
        # later turn's call with this id
        decided = await refused_kept(client, run_id, request_id, deciding, _refusal)
        return {"run_id": run_id, **decided}

    return router


def _refusal(exc: Exception) -> str | None:
    """What a decision's refusal said (a 404 or 409), or None."""
    if isinstance(exc, ApiError) and exc.status in (404, 409):
        return exc.message
    return None
