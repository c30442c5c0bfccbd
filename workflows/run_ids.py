"""The run-id check at the start of every run, for ids no facade vetted.

Any Temporal client can start `AgentRun` with any workflow id, and the id is
a file name in every store and what `resume()` takes: a run with an id the
facade refuses could never be mirrored or resumed, so it fails at its start.
The rules grew stricter over time (encoded length, Unicode control and format
characters); each step is behind its own patch, so a run started under an
older rule replays exactly as it ran.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agentor_temporal.store.base import validate_run_id
from agentor_temporal.workflows import policies

#: The first rule's limit, in characters (now: MAX_RUN_ID_BYTES of UTF-8).
_FIRST_RULE_MAX_CHARS = 200


def _first_rule_accepts(run_id: str) -> bool:
    """Whether the rule of PATCH_REFUSE_INVALID_RUN_ID accepted `run_id`."""
    return (
        bool(run_id)
        and not run_id.startswith(".")
        and not any(c in "/\\:'\"" or ord(c) < 32 or ord(c) == 127 for c in run_id)
        and len(run_id) <= _FIRST_RULE_MAX_CHARS
    )


def refuse_invalid_run_id(run_id: str) -> None:
    """Fail the run (not its task) when its id breaks the rules in force.

    Raises:
        ApplicationError: non-retryable `InvalidRunId`, naming the rule broken.
    """
    try:
        validate_run_id(run_id)
    except ValueError as exc:
        if _first_rule_accepts(run_id):
            # refused only by the stricter rules: runs started before them ran
            if not workflow.patched(policies.PATCH_STRICT_RUN_ID):
                return
        elif not workflow.patched(policies.PATCH_REFUSE_INVALID_RUN_ID):
            return
        raise ApplicationError(str(exc), type="InvalidRunId", non_retryable=True) from None


def reset_execution() -> bool:
    """Whether this execution began with a reset (`temporal workflow reset`).

    A reset execution's history begins with a copy of its base's started
    event, so its original execution run id names another execution; a first
    execution's, or one continued as new, names itself. An execution continued
    as new from a reset one (or from such a one) counts too (`Carry.reset`,
    set on the workflow as `reset_line`): the executions its base continued
    into had already done its work.
    """
    info = workflow.info()
    if info.original_execution_run_id != info.run_id:
        return True
    return getattr(workflow.instance(), "reset_line", False) is True
