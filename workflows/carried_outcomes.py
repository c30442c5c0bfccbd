"""What decisions came to, handed on to the run's next execution.

A decision is answered by the execution that took it: by a `decide` update,
whose outcome Temporal keeps with that execution, or by signal (`decide_signal`,
a run past Temporal's updates), whose outcome the execution keeps under the
sender's request id (`Approvals.signalled`) and Temporal not at all. serve asks
a decision sent again under its name (an Idempotency-Key, an A2A messageId) of
the run's latest executions (`RECENT_EXECUTIONS`): one taken by signal before the
run continued as new, or by update more executions ago than those, was not
found, went as a `decide` update to the new execution, and was taken for the
call waiting there, a later turn's call reusing the id (`call_0`), which nobody
had seen.

So from `policies.OUTCOMES_CARRIED` a continue-as-new carries the latest
`CARRIED_OUTCOMES` of those outcomes, and of the refusals serve had it keep
(`decision_refused`, `Approvals.refusals`), (`Carry.outcomes`), each whole when it is
small, else in brief, so a long run's input stays bounded; the next execution
answers a decision sent again under one of those ids with its outcome
(`Approvals.carried`), by update or by signal, never deciding anew.
"""

from __future__ import annotations

import json
from typing import Any

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.call_uses import count_key
from agentor_temporal.workflows.formatting import fit
from agentor_temporal.workflows.request_ids import request_id_problem


def carried_outcomes(*kept: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The outcomes to carry: the latest `CARRIED_OUTCOMES` of `kept`, oldest first.

    Args:
        kept: request id -> outcome maps, each older than the next (those the
            execution was carried, its outcomes kept in brief, its latest).
    """
    merged: dict[str, dict[str, Any]] = {}
    for outcomes in kept:
        for request_id, outcome in outcomes.items():
            merged.pop(request_id, None)
            merged[request_id] = outcome
    latest = list(merged.items())[-policies.CARRIED_OUTCOMES :]
    return {request_id: _small(outcome) for request_id, outcome in latest}


def _small(outcome: dict[str, Any]) -> dict[str, Any]:
    """`outcome` whole when its encoding fits CARRIED_OUTCOME_BYTES, else without what
    may be large (the call's args; a long id by its digest; texts cut)."""
    if len(json.dumps(outcome, ensure_ascii=False).encode()) <= policies.CARRIED_OUTCOME_BYTES:
        return outcome
    decided = outcome.get("decided")
    if isinstance(decided, dict):
        brief = {k: v for k, v in decided.items() if k != "args"}
        if isinstance(brief.get("call_id"), str):
            brief["call_id"] = count_key(brief["call_id"])
        if isinstance(brief.get("tool"), str):
            brief["tool"] = fit(brief["tool"], policies.CARRIED_NAME_BYTES)
        return {"decided": brief}
    return {
        "refused": fit(str(outcome.get("refused", "")), policies.CARRIED_REFUSAL_BYTES),
        "type": str(outcome.get("type") or ""),
    }


def outcomes_in(raw: Any) -> dict[str, dict[str, Any]]:
    """The outcomes carried in a decoded workflow input (never raises).

    Read in the workflow's `__init__`: the decision sent again may come with the
    execution's first workflow task, whose update validators run before `run`.
    What a plain client's input holds that is not an outcome is left out.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("carry"), dict):
        return {}
    carried = raw["carry"].get("outcomes")
    if not isinstance(carried, dict):
        return {}
    return {
        request_id: outcome
        for request_id, outcome in carried.items()
        if request_id_problem(request_id) is None
        and isinstance(outcome, dict)
        and (isinstance(outcome.get("decided"), dict) or "refused" in outcome)
    }


def handed_outcomes(raw: Any) -> dict[str, dict[str, Any]]:
    """The outcomes a decoded workflow input hands its execution (never raises): carried
    by continue-as-new (`carry.outcomes`) or by a resume (`outcomes`, read from the
    closed execution's history: `closed_outcomes`)."""
    handed = outcomes_in(raw)
    if isinstance(raw, dict) and isinstance(raw.get("outcomes"), dict):
        handed = {**outcomes_in({"carry": {"outcomes": raw["outcomes"]}}), **handed}
    return handed
