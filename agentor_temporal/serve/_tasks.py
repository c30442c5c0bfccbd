"""A2A tasks as runs: a run's state as a `Task`, its events as status and artifact updates.

Pure functions over a `RunView` and `Event`s, with the `a2a-sdk` package's
types, shared by every A2A method. The answer is one artifact ("response"):
text deltas append to it, each turn's first delta and the final `message`
replace it, so a client that applies the updates ends with the answer.
"""

from __future__ import annotations

import datetime
import uuid

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityScheme,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    TextPart,
)

from agentor_temporal.agent import Agentor
from agentor_temporal.serve._state import RunView
from agentor_temporal.store import Event
from agentor_temporal.workflows.formatting import call_summary

#: Agentor's card description for an agent without instructions.
DEFAULT_DESCRIPTION = "Agentor is a framework for building, prototyping and deploying AI Agents."
#: The artifact that carries the run's answer.
RESPONSE = "response"


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


def text_message(text: str, task_id: str) -> Message:
    """An agent's message in the task (a status's explanation)."""
    return Message(
        role=Role.agent,
        parts=[Part(root=TextPart(text=text))],
        message_id=uuid.uuid4().hex,
        task_id=task_id,
        context_id=task_id,
    )


def state_of(view: RunView) -> tuple[TaskState, str | None]:
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


def answer_update(run_id: str, text: str, *, append: bool, last: bool) -> TaskArtifactUpdateEvent:
    """Text for the answer artifact: appended to it, or replacing it."""
    return TaskArtifactUpdateEvent(
        task_id=run_id,
        context_id=run_id,
        artifact=Artifact(
            artifact_id=RESPONSE, name=RESPONSE, parts=[Part(root=TextPart(text=text))]
        ),
        append=append,
        last_chunk=last,
    )


def status_update(
    run_id: str, state: TaskState, text: str | None, final: bool
) -> TaskStatusUpdateEvent:
    """A change of the task's state, with what it says; `final` ends the stream."""
    message = text_message(text, run_id) if text else None
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
    state, text = state_of(view)
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
            state=state, message=text_message(text, run_id) if text else None, timestamp=_now()
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


def event_update(event: Event, run_id: str) -> TaskStatusUpdateEvent | None:
    """The status update a recorded event makes (None: it makes none)."""
    if event.type == "tool_call":
        text = f"Calling {call_summary(event.name or '?', event.args)}"
    elif event.type == "tool_result":
        text = f"{event.name} answered" if event.error is None else f"{event.name} failed"
    elif event.type == "approval_request":
        summary = call_summary(event.name or "?", event.args)
        update = status_update(
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
    return status_update(run_id, TaskState.working, text, False)
