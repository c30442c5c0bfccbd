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
text "approve" / "deny <reason>" when one call waits) decides it; sent again
under its messageId, it decides nothing more (`_decisions`). Streams
stay open through `input-required` and end at the run's end.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from a2a.types import (
    CancelTaskRequest,
    DataPart,
    GetTaskRequest,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    Message,
    MessageSendParams,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    SendMessageRequest,
    SendStreamingMessageRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskResubscriptionRequest,
    TaskState,
    TextPart,
    UnsupportedOperationError,
)
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from agentor_temporal.activities import _redact
from agentor_temporal.agent import Agentor
from agentor_temporal.serve._decisions import decided_before, decision_id, refused_kept
from agentor_temporal.serve._events import KEEPALIVE_INTERVAL, frame, keepalive, positioned
from agentor_temporal.serve._state import Agents, ApiError, RunView, snapshot
from agentor_temporal.serve._stopping import stopping_note, until_stopping
from agentor_temporal.serve._tasks import (
    agent_card,
    answer_update,
    event_update,
    state_of,
    status_update,
    task_of,
)
from agentor_temporal.streaming import RunFailedError

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
#: names the run a message starts (`message_run_id`)
_MESSAGE_RUNS = uuid.UUID("5b0d4c61-8a3e-4d2f-9c1e-6a7b8c9d0e1f")
_DENY = {"deny", "denied", "no", "n"}


class RpcError(Exception):
    """A JSON-RPC error to answer with."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.message)
        self.error = error


# -- JSON-RPC ------------------------------------------------------------------------


def _error(rpc_id: Any, error: Any) -> JSONResponse:
    shown = error.model_dump(exclude_none=True)
    if isinstance(shown.get("message"), str):  # it may quote what the request met
        shown["message"] = _redact.clean(shown["message"])
    body = {"jsonrpc": "2.0", "id": rpc_id, "error": shown}
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
            _, task_id, start = await _begin(served, req.params, stream=True)
            frames = stream(served, task_id, rpc_id, start)
        else:
            after = _after(request, req.params.metadata)
            await served.find(_task_id(req.params.id))
            task_id = req.params.id
            frames = stream(served, task_id, rpc_id, after)

        def stopping_frame() -> bytes:
            # not final: the task goes on; tasks/resubscribe follows it on a server up
            note = stopping_note(task_id)
            update = status_update(task_id, TaskState.working, note, False)
            return frame(_result(rpc_id, update))

        return StreamingResponse(
            until_stopping(keepalive(frames, KEEPALIVE_INTERVAL), stopping_frame),
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
        before = await _decide(view, message)
        return view.agent, message.task_id, len(view.result.events) if before is None else before
    text = "\n".join(p.root.text for p in message.parts if isinstance(p.root, TextPart)).strip()
    if not text:
        raise RpcError(InvalidParamsError(message="the message has no text to start a task with"))
    meta = {**(params.metadata or {}), **(message.metadata or {})}
    agent = served.get(meta.get("agent"))
    # a client sending the message again (same messageId: its send timed out)
    # attaches to the run the first one started, which never runs twice
    return agent, await agent.astart(text, message_run_id(agent, message), stream_text=stream), 0


def message_run_id(agent: Agentor, message: Message) -> str:
    """The id of the run a message starts: one per agent and messageId."""
    return uuid.uuid5(_MESSAGE_RUNS, f"{agent.name}\n{message.message_id}").hex


async def _decide(view: RunView, message: Message) -> int | None:
    """Deliver the approval decision a message to an input-required task carries.

    A message sent again (its `messageId` the same: the client's send timed out)
    decides nothing more: it is answered as the first was (`_decisions`), from the
    position returned (after the decision it took); None for a decision taken now.
    """
    run_id = str(view.result.run_id)
    request_id = decision_id(run_id, message.message_id)
    client = await view.agent._client()
    try:
        taken = await decided_before(client, run_id, request_id)
    except ValueError as exc:
        raise RpcError(InvalidParamsError(message=str(exc))) from None
    if taken is not None:
        return _after_decision(view, taken)
    # refused, the message sent again is refused again: the call waiting then may be
    # a later turn's with the same id
    return await refused_kept(
        client,
        run_id,
        request_id,
        lambda: _decide_now(view, message, request_id),
        _refusal,
    )


def _refusal(exc: Exception) -> str | None:
    """What a decision's refusal said (an invalid-params error), or None."""
    if isinstance(exc, RpcError) and isinstance(exc.error, InvalidParamsError):
        return str(exc.error.message)
    return None


async def _decide_now(view: RunView, message: Message, request_id: str) -> None:
    """`_decide` for a message the run took no decision under yet."""
    run_id = str(view.result.run_id)
    pending = [p.call_id for p in view.result.pending_approvals]
    if not pending:
        state = state_of(view)[0].value
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
        # the call the task showed (its turn, the execution that asked): one
        # the run moves on to before a worker takes the decision is not decided
        shown = next(p for p in view.result.pending_approvals if p.call_id == call_id)
        turn = root.data.get("turn") if isinstance(root, DataPart) else None
        if not isinstance(turn, int) or isinstance(turn, bool):
            turn = None
        try:
            # 30 s for a worker from the decision's sending (not the reads before it)
            await view.agent._decide_within(
                30, run_id, shown, approve, reason, "a2a", turn, request_id=request_id
            )
        except (KeyError, ValueError) as exc:
            raise RpcError(InvalidParamsError(message=str(exc))) from None
        except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11
            raise RpcError(
                UnsupportedOperationError(message="no worker took the decision within 30 s")
            ) from None
        return None
    raise RpcError(
        InvalidParamsError(
            message=f"task {run_id} waits for approval of {', '.join(pending)}: reply with a "
            "DataPart {'call_id': ..., 'approve': true|false, 'reason': ...}"
        )
    )


def _after_decision(view: RunView, taken: dict[str, Any]) -> int:
    """The position after the decision `taken` (an update's outcome) in the task's events:
    what follows it answers a message sent again, as it answered the first sending."""
    for position in range(len(view.result.events), 0, -1):
        event = view.result.events[position - 1]
        if (
            event.type == "approval_decision"
            and event.call_id == taken.get("call_id")
            and event.turn == taken.get("turn")
        ):
            return position
    return len(view.result.events)


async def _settle(agent: Agentor, run_id: str, after: int) -> None:
    """Wait until the run ends or asks for approval (what a blocking send waits for)."""
    try:
        async for _, event in positioned(agent, run_id, after, False):
            if event.type in ("run_end", "approval_request"):
                return
    except RunFailedError:
        return


async def cancel(served: Agents, task_id: str) -> Task:
    """`tasks/cancel`: ask the run's workflow to cancel; wait (briefly) for it to close.

    A run whose sync tool is working closes once that call has ended (a
    thread cannot be stopped; the run keeps its result): until then, and
    past `CANCEL_WAIT`, the task is still `working`.
    """
    view = await _view(served, task_id)
    if view.execution != "running":
        raise RpcError(
            TaskNotCancelableError(message=f"task {task_id} is {state_of(view)[0].value}")
        )
    client = await served.client()
    await client.get_workflow_handle(task_id).cancel()
    deadline = asyncio.get_running_loop().time() + CANCEL_WAIT
    while view.execution == "running" and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        view = await _view(served, task_id)
    return task_of(view)


async def stream(
    served: Agents, run_id: str, rpc_id: Any, after: int | None
) -> AsyncIterator[bytes]:
    """SSE frames of a task: the task as it stands, then its updates to the run's end."""
    view = await _view(served, run_id)
    agent = view.agent
    start = len(view.result.events) if after is None else after
    yield frame(_result(rpc_id, task_of(view)))
    streaming = False  # whether the response artifact has text of this turn
    try:
        async for position, event in positioned(agent, run_id, start, True):
            update: BaseModel | None
            if event.type == "text_delta":
                update = answer_update(run_id, event.text or "", append=streaming, last=False)
                streaming = True
            elif event.type in ("error", "generation"):
                streaming, update = False, None  # the next turn's text replaces this one's
            elif event.type == "message":
                update = answer_update(run_id, event.text or "", append=False, last=True)
            elif event.type == "run_end":
                done = event.status == "completed"
                text = None if done else event.error or f"the run ended {event.status}"
                state = TaskState.completed if done else TaskState.failed
                yield frame(_result(rpc_id, status_update(run_id, state, text, True)), id=position)
                return
            else:
                update = event_update(event, run_id)
            if update is not None:
                yield frame(_result(rpc_id, update), id=position)
    except RunFailedError:
        pass
    # the workflow closed without a run_end (cancelled, terminated), or had closed already
    state, text = state_of(await _view(served, run_id))
    yield frame(_result(rpc_id, status_update(run_id, state, text, True)))


__all__ = ["agent_card", "cancel", "handle", "send", "stream", "task_of"]
