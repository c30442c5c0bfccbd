"""A2A on durable runs: an A2A task is a run, and its id is the run id.

JSON-RPC on `POST /` (where Agentor 0.1.1 takes it), protocol 0.3 with the
`a2a-sdk` package's types: `message/send`, `message/stream`, `tasks/get`,
`tasks/cancel` and `tasks/resubscribe`. Because the task is the run, any
server process answers for any task, `tasks/get` reads history (no worker
needed), and a stream that dropped is picked up by `tasks/resubscribe`, the
A2A counterpart of `Last-Event-ID`: every frame that comes from a recorded
event carries `id:` = its position, and `metadata: {"after": N}` (or the
`Last-Event-ID` header) resumes exactly after it; without either, the
resubscriber gets the task as it stands, then what happens next. A run
waiting for approval is `input-required`; a message to that task with a
DataPart `{"call_id": ..., "approve": true|false, "reason": ...}` (or the
text "approve" / "deny <reason>" when one call waits) decides it. Streams
stay open through `input-required` and end at the run's end.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    DataPart,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    Message,
    MessageSendParams,
    MethodNotFoundError,
    Part,
    PushNotificationNotSupportedError,
    Role,
    SecurityScheme,
    SendMessageRequest,
    SendStreamingMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskResubscriptionRequest,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    TextPart,
    UnsupportedOperationError,
)
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from agentor_temporal.agent import Agentor
from agentor_temporal.serve._events import KEEPALIVE_INTERVAL, keepalive, positioned
from agentor_temporal.serve._state import Agents, ApiError, RunView, snapshot
from agentor_temporal.store import Event
from agentor_temporal.streaming import RunFailedError
from agentor_temporal.workflows.formatting import call_summary

#: Agentor's card description for an agent without instructions.
DEFAULT_DESCRIPTION = "Agentor is a framework for building, prototyping and deploying AI Agents."
#: The artifact that carries the run's answer.
RESPONSE = "response"
#: How long `tasks/cancel` waits for the run to close before answering.
CANCEL_WAIT = 10.0

_METHODS: dict[str, type[BaseModel]] = {
    "message/send": SendMessageRequest,
    "message/stream": SendStreamingMessageRequest,
    "tasks/get": GetTaskRequest,
    "tasks/cancel": CancelTaskRequest,
    "tasks/resubscribe": TaskResubscriptionRequest,
}
_APPROVE = {"approve", "approved", "yes", "y"}
_DENY = {"deny", "denied", "no", "n"}


class RpcError(Exception):
    """A JSON-RPC error to answer with."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.message)
        self.error = error


def agent_card(agent: Agentor, url: str, secured: bool) -> AgentCard:
    """The agent's card, field for field as Agentor 0.1.1 builds it (plus bearer auth)."""
    skills = [
        AgentSkill(
            id=f"tool_{tool.name.lower().replace(' ', '_')}",
            name=tool.name,
            description=tool.description,
            tags=[],
        )
        for tool in agent.tools
    ]
    schemes = (
        {"bearer": SecurityScheme(root=HTTPAuthSecurityScheme(scheme="bearer"))} if secured else {}
    )
    return AgentCard(
        name=agent.name,
        description=agent.instructions or DEFAULT_DESCRIPTION,
        url=url,
        version="0.0.1",
        skills=skills,
        capabilities=AgentCapabilities(streaming=True),
        additional_interfaces=[],
        security_schemes=schemes,
        security=[{"bearer": []}] if secured else [],
        default_input_modes=["application/json"],
        default_output_modes=[],
        supports_authenticated_extended_card=False,
        signatures=[],
    )


# -- JSON-RPC ------------------------------------------------------------------------


def _error(rpc_id: Any, error: Any) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": rpc_id, "error": error.model_dump(exclude_none=True)}
    return JSONResponse(body)


def _result(rpc_id: Any, result: BaseModel) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "result": result.model_dump(mode="json", exclude_none=True),
    }


async def handle(served: Agents, request: Request) -> Response:
    """Answer one JSON-RPC request (a JSON answer, or SSE for the streaming methods)."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _error(None, JSONParseError())
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or "method" not in body:
        rpc_id = body.get("id") if isinstance(body, dict) else None
        return _error(rpc_id, InvalidRequestError())
    rpc_id, method = body.get("id"), body["method"]
    model = _METHODS.get(method) if isinstance(method, str) else None
    if model is None:
        if isinstance(method, str) and method.startswith("tasks/pushNotificationConfig/"):
            return _error(rpc_id, PushNotificationNotSupportedError())
        if method == "agent/getAuthenticatedExtendedCard":
            return _error(rpc_id, UnsupportedOperationError())
        return _error(rpc_id, MethodNotFoundError(message=f"Method not found: {method}"))
    try:
        req: Any = model.model_validate(body)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return _error(rpc_id, InvalidParamsError(message=f"Invalid parameters: {details}"))
    try:
        if method == "message/send":
            return JSONResponse(_result(rpc_id, await send(served, req.params)))
        if method == "tasks/get":
            view = await _view(served, req.params.id)
            return JSONResponse(_result(rpc_id, task_of(view, req.params.history_length)))
        if method == "tasks/cancel":
            return JSONResponse(_result(rpc_id, await cancel(served, req.params.id)))
        if method == "message/stream":
            _, run_id, start = await _begin(served, req.params, stream=True)
            frames = stream(served, run_id, rpc_id, start)
        else:
            after = _after(request, req.params.metadata)
            await served.find(_task_id(req.params.id))
            frames = stream(served, req.params.id, rpc_id, after)
        return StreamingResponse(
            keepalive(frames, KEEPALIVE_INTERVAL),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    except RpcError as exc:
        return _error(rpc_id, exc.error)
    except ApiError as exc:
        if exc.status == 404:
            return _error(rpc_id, TaskNotFoundError(message=exc.message))
        return _error(rpc_id, InvalidParamsError(message=exc.message))


def _task_id(task_id: str) -> str:
    if not task_id:
        raise RpcError(InvalidParamsError(message="the task id is empty"))
    return task_id


def _after(request: Request, metadata: dict[str, Any] | None) -> int | None:
    """Where a resubscriber resumes: `metadata.after`, else `Last-Event-ID`, else now."""
    raw = (metadata or {}).get("after", request.headers.get("last-event-id"))
    if raw is None:
        return None
    try:
        after = int(raw)
    except (TypeError, ValueError):
        after = -1
    if after < 0:
        raise RpcError(InvalidParamsError(message=f"after must be an event position, got {raw!r}"))
    return after


async def _view(served: Agents, task_id: str) -> RunView:
    agent, segments = await served.find(_task_id(task_id))
    return await snapshot(agent, task_id, segments)


# -- methods ---------------------------------------------------------------------------


async def send(served: Agents, params: MessageSendParams) -> Task:
    """`message/send`: start a task (or decide a waiting one) and return it."""
    agent, run_id, start = await _begin(served, params, stream=False)
    configuration = params.configuration
    if configuration is None or configuration.blocking is not False:
        await _settle(agent, run_id, start)
    view = await _view(served, run_id)
    history = configuration.history_length if configuration is not None else None
    return task_of(view, history)


async def _begin(
    served: Agents, params: MessageSendParams, stream: bool
) -> tuple[Agentor, str, int]:
    """Start the run a message asks for, or deliver its decision to the task it names.

    Returns the agent, the run id, and the position after which the run's
    events answer this message (0 for a new run).
    """
    message = params.message
    if message.task_id:
        view = await _view(served, message.task_id)
        await _decide(view, message)
        return view.agent, message.task_id, len(view.result.events)
    text = "\n".join(p.root.text for p in message.parts if isinstance(p.root, TextPart)).strip()
    if not text:
        raise RpcError(InvalidParamsError(message="the message has no text to start a task with"))
    meta = {**(params.metadata or {}), **(message.metadata or {})}
    agent = served.get(meta.get("agent"))
    return agent, await agent.astart(text, stream_text=stream), 0


async def _decide(view: RunView, message: Message) -> None:
    """Deliver the approval decision a message to an input-required task carries."""
    run_id = str(view.result.run_id)
    pending = [p.call_id for p in view.result.pending_approvals]
    if not pending:
        state = _state(view)[0].value
        raise RpcError(
            InvalidParamsError(message=f"task {run_id} is {state}, not waiting for input")
        )
    for part in message.parts:
        root = part.root
        if isinstance(root, DataPart) and isinstance(root.data.get("approve"), bool):
            call_id, approve = root.data.get("call_id"), bool(root.data["approve"])
            reason = root.data.get("reason")
        elif isinstance(root, TextPart) and root.text.split()[:1]:
            word, _, rest = root.text.strip().partition(" ")
            if word.lower() not in _APPROVE | _DENY:
                continue
            call_id, approve, reason = None, word.lower() in _APPROVE, rest.strip() or None
        else:
            continue
        if call_id is None and len(pending) == 1:
            call_id = pending[0]
        if call_id not in pending:
            raise RpcError(
                InvalidParamsError(
                    message=f"say which call to decide: task {run_id} waits for "
                    f"{', '.join(pending)} (DataPart {{'call_id': ..., 'approve': bool}})"
                )
            )
        decide = view.agent.aapprove if approve else view.agent.adeny
        try:
            await asyncio.wait_for(decide(run_id, str(call_id), reason, by="a2a"), 30)
        except (KeyError, ValueError) as exc:
            raise RpcError(InvalidParamsError(message=str(exc))) from None
        except asyncio.TimeoutError:
            raise RpcError(
                UnsupportedOperationError(message="no worker took the decision within 30 s")
            ) from None
        return
    raise RpcError(
        InvalidParamsError(
            message=f"task {run_id} waits for approval of {', '.join(pending)}: reply with a "
            "DataPart {'call_id': ..., 'approve': true|false, 'reason': ...}"
        )
    )


async def _settle(agent: Agentor, run_id: str, after: int) -> None:
    """Wait until the run ends or asks for approval (what a blocking send waits for)."""
    try:
        async for _, event in positioned(agent, run_id, after, False):
            if event.type in ("run_end", "approval_request"):
                return
    except RunFailedError:
        return


async def cancel(served: Agents, task_id: str) -> Task:
    """`tasks/cancel`: ask the run's workflow to cancel; wait (briefly) for it to close."""
    view = await _view(served, task_id)
    if view.execution != "running":
        raise RpcError(TaskNotCancelableError(message=f"task {task_id} is {_state(view)[0].value}"))
    client = await served.client()
    await client.get_workflow_handle(task_id).cancel()
    deadline = asyncio.get_running_loop().time() + CANCEL_WAIT
    while view.execution == "running" and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        view = await _view(served, task_id)
    return task_of(view)


# -- tasks and their updates -----------------------------------------------------------


def _text_message(text: str, task_id: str) -> Message:
    return Message(
        role=Role.agent,
        parts=[Part(root=TextPart(text=text))],
        message_id=uuid.uuid4().hex,
        task_id=task_id,
        context_id=task_id,
    )


def _state(view: RunView) -> tuple[TaskState, str | None]:
    """The task state of a run, and what its status message says."""
    result = view.result
    if view.execution == "running":
        if result.pending_approvals:
            waits = "; ".join(
                f"{call_summary(p.tool, p.args)} (call_id {p.call_id})"
                for p in result.pending_approvals
            )
            return TaskState.input_required, f"Waiting for approval: {waits}"
        return TaskState.working, None
    if view.execution == "canceled":
        return TaskState.canceled, result.error
    if result.status == "completed":
        return TaskState.completed, None
    if result.status == "max_turns":
        return TaskState.failed, result.error or "the run stopped at max_turns without an answer"
    return TaskState.failed, result.error


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _answer(run_id: str, text: str, *, append: bool, last: bool) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=run_id,
        context_id=run_id,
        artifact=Artifact(
            artifact_id=RESPONSE, name=RESPONSE, parts=[Part(root=TextPart(text=text))]
        ),
        append=append,
        last_chunk=last,
    )


def _status(run_id: str, state: TaskState, text: str | None, final: bool) -> TaskStatusUpdateEvent:
    message = _text_message(text, run_id) if text else None
    return TaskStatusUpdateEvent(
        task_id=run_id,
        context_id=run_id,
        status=TaskStatus(state=state, message=message, timestamp=_now()),
        final=final,
    )


def task_of(view: RunView, history_length: int | None = None) -> Task:
    """The A2A task of a run as it stands."""
    result = view.result
    run_id = str(result.run_id)
    state, text = _state(view)
    history = [
        Message(
            role=Role.user if m["role"] == "user" else Role.agent,
            parts=[Part(root=TextPart(text=m["content"]))],
            message_id=f"{run_id}-{i}",
            task_id=run_id,
            context_id=run_id,
        )
        for i, m in enumerate(result.messages)
        if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
    ]
    if history_length is not None:
        history = history[-history_length:] if history_length > 0 else []
    output = result.final_output
    return Task(
        id=run_id,
        context_id=run_id,
        status=TaskStatus(
            state=state, message=_text_message(text, run_id) if text else None, timestamp=_now()
        ),
        artifacts=[
            Artifact(artifact_id=RESPONSE, name=RESPONSE, parts=[Part(root=TextPart(text=output))])
        ]
        if output
        else None,
        history=history,
        metadata={
            "run_id": run_id,
            "agent": view.agent.name,
            "status": result.status,
            "events": len(result.events),
            "usage": result.to_dict()["usage"],
            "pending_approvals": result.to_dict()["pending_approvals"],
        },
    )


def _update(event: Event, run_id: str) -> TaskStatusUpdateEvent | None:
    """The status update a recorded event makes (None: it makes none)."""
    if event.type == "tool_call":
        text = f"Calling {call_summary(event.name or '?', event.args)}"
    elif event.type == "tool_result":
        text = f"{event.name} answered" if event.error is None else f"{event.name} failed"
    elif event.type == "approval_request":
        summary = call_summary(event.name or "?", event.args)
        update = _status(
            run_id,
            TaskState.input_required,
            f"Waiting for approval: {summary} (call_id {event.call_id})",
            False,
        )
        update.metadata = {"call_id": event.call_id, "tool": event.name, "args": event.args}
        return update
    elif event.type == "approval_decision":
        text = f"{event.name} {event.status} ({event.call_id})"
    else:
        return None
    return _status(run_id, TaskState.working, text, False)


async def stream(
    served: Agents, run_id: str, rpc_id: Any, after: int | None
) -> AsyncIterator[bytes]:
    """SSE frames of a task: the task as it stands, then its updates to the run's end."""
    view = await _view(served, run_id)
    agent = view.agent
    start = len(view.result.events) if after is None else after
    yield _frame(_result(rpc_id, task_of(view)))
    streaming = False  # whether the response artifact has text of this turn
    try:
        async for position, event in positioned(agent, run_id, start, True):
            update: BaseModel | None
            if event.type == "text_delta":
                update = _answer(run_id, event.text or "", append=streaming, last=False)
                streaming = True
            elif event.type in ("error", "generation"):
                streaming, update = False, None  # the next turn's text replaces this one's
            elif event.type == "message":
                update = _answer(run_id, event.text or "", append=False, last=True)
            elif event.type == "run_end":
                done = event.status == "completed"
                text = None if done else event.error or f"the run ended {event.status}"
                state = TaskState.completed if done else TaskState.failed
                yield _frame(_result(rpc_id, _status(run_id, state, text, True)), position)
                return
            else:
                update = _update(event, run_id)
            if update is not None:
                yield _frame(_result(rpc_id, update), position)
    except RunFailedError:
        pass
    # the workflow closed without a run_end (cancelled, terminated), or had closed already
    state, text = _state(await _view(served, run_id))
    yield _frame(_result(rpc_id, _status(run_id, state, text, True)))


def _frame(body: dict[str, Any], id: int | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()
