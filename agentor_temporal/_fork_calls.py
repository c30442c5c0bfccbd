"""Refusing a fork whose build cannot take the calls it would ask a person about.

A fork of a run waiting for a person goes on from the parent's answer: the
calls that wait ask for a decision again, on the fork, under the forking
agent's build. A build whose tool changed its parameters (one renamed) no
longer takes those calls' arguments: the fork asked a person to approve a
call that could never run as approved, and only then told the model it was
invalid. Such a fork is refused before anything is made, naming the call,
what the tool now takes, and the fork that asks the model again instead.
"""

from __future__ import annotations

import json
from typing import Any

from agentor_temporal.activities import AgentDefinition
from agentor_temporal.store import Event


def check_waiting_calls(
    agent: AgentDefinition, parent: str, answer: dict[str, Any] | None, events: list[Event]
) -> None:
    """Refuse a fork that would ask a person about a call `agent`'s tool does not take.

    Args:
        agent: the forking agent's definition.
        parent: the run forked.
        answer: the answer the fork goes on from (`AgentRunInput.answer`), if any.
        events: the parent's events the fork copies.

    Raises:
        ValueError: naming the call, the tool's complaint, and the fork to make instead.
    """
    if not answer:
        return
    results = answer.get("results") or []
    for index, call in enumerate(answer.get("calls") or []):
        if index < len(results) and results[index] is not None:
            continue  # answered already (it ran, or a person said no)
        problem = _refusal(agent, call)
        if problem is None:
            continue
        generations = [i for i, e in enumerate(events) if e.type == "generation"]
        instead = (
            f"fork({parent!r}, at={generations[-1]}) (the CLI's --at {generations[-1]}) goes "
            "on from before that answer, asking the model again with this build's tools"
            if generations
            else "fork it with an input, asking the model again with this build's tools"
        )
        raise ValueError(
            f"Run {parent!r} waits for a person to approve call {call.get('id')!r}, and this "
            f"build of {agent.name!r} cannot run it as the model asked ({problem}): the fork "
            f"would ask a person to approve a call that cannot run. {instead}; or fork with "
            "the build the run was made with."
        )


def _refusal(agent: AgentDefinition, call: dict[str, Any]) -> str | None:
    """What the forking build's tool says of a call a person would be asked about, or None."""
    function = call.get("function")
    if not isinstance(function, dict):
        return None
    tool = agent.tool(str(function.get("name") or ""))
    # an unknown tool, or arguments that are no JSON object, are answered without a person;
    # a predicate the arguments do not fit asks a person (failing safe)
    if tool is None or not tool.requires_approval:
        return None
    try:
        args = json.loads(function.get("arguments") or "{}")
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(args, dict):
        return None
    try:
        tool.validate(args)
    except ValueError as exc:
        return str(exc)
    return None
