"""`refusal`: a refused decision kept under its sender's name, so it is refused again.

A client names its decision (A2A's `messageId`, the decision route's
`Idempotency-Key`) so that, sent again, it is answered with what the first
sending came to (`serve._decisions`). Temporal keeps an update's outcome only
when the run accepted the update: a decision the server or the run's validator
refused outright left nothing, and the same message sent again was checked
anew; once the run waited for a later turn's call with the same id (models
reuse `call_0`), it decided that call, which nobody had seen. So the server
sends the refusal itself under the decision's id, as the `decision_refused`
update, whose handler fails with it: Temporal keeps that outcome under the
id, and the message sent again is answered with it.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.formatting import fit
from agentor_temporal.workflows.versions import level

#: the most of a refusal's text kept (bytes as Temporal encodes it): refusals are a
#: sentence, and each one kept is history a waiting run carries
REFUSAL_BYTES = 2_000


def refusal(raw: RawValue | None) -> str:
    """The refusal a `decision_refused` update carries (its validator and its handler).

    Raises:
        ApplicationError: `BadRefusal`, when it carries no text, or one too long to keep.
    """
    text = None
    if raw is not None:
        try:
            text = workflow.payload_converter().from_payload(raw.payload)
        except Exception:
            text = None
    if not isinstance(text, str) or not text or fit(text, REFUSAL_BYTES) != text:
        raise ApplicationError(
            f"a refusal to keep is a text of at most {REFUSAL_BYTES} bytes", type="BadRefusal"
        )
    return text


def counted(uncounted: int, decided: int) -> bool:
    """Whether a refusal kept now counts against `policies.PAUSED_WAIT_TASKS`.

    `uncounted` is how many refusals the execution kept uncounted so far, and
    `decided` how many decisions it took. A refusal serve keeps is mostly a
    second reviewer's late decision of a call someone decided first: one such
    refusal per decision taken is part of deciding a turn, not a flood, and is
    not counted (from `policies.REFUSALS_UNCOUNTED`); past that, each counts as
    any update does, and past `policies.MAX_CALLS_PER_REPLY` (a turn's most
    decisions) in the execution too: a wait takes at most that many tasks
    uncounted, however many decisions earlier turns of the execution took.
    """
    if level() < policies.REFUSALS_UNCOUNTED:
        return True
    return uncounted >= min(decided, policies.MAX_CALLS_PER_REPLY)
