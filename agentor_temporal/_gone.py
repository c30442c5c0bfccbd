"""A run that was in Temporal and is not any more, told plainly to whoever waited on it.

A server that comes back from an outage *empty* (a dev server kept in
memory restarted, a database lost or reset) no longer knows the runs it had.
A caller waiting on one (`run()`, `resume()`, a stream) then met Temporal's
raw `workflow not found for ID`, a traceback from deep in the SDK, or, for
a stream, an end with no `run_end` and no error, as if the run were done.
`run_gone` says what happened and whether the run's JSONL mirror can bring
it back (`resume` continues a run only the store holds).
"""

from __future__ import annotations

import logging

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentor_temporal.activities import _redact
from agentor_temporal.store import Store
from agentor_temporal.store.base import in_thread, read_events
from agentor_temporal.workflows.redaction import redact_address

logger = logging.getLogger("agentor_temporal")


def not_found(exc: BaseException) -> bool:
    """Whether `exc` is Temporal saying it has no such run (or execution)."""
    return isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND


def shown_store(store: Store | None) -> str:
    """A store as messages name it: its `repr`, URL credentials and known secrets masked.

    A user's store may show its connection URL (`SQLStore('postgresql://u:pw@db/runs')`),
    and the messages naming it reach the caller, the CLI's error line and HTTP answers.
    """
    return _redact.clean(repr(store))


async def run_gone(client: Client, run_id: str, store: Store | None) -> KeyError:
    """The error for a run Temporal had and no longer has, saying whether its mirror has it.

    The `KeyError` the facade raises for a run Temporal does not know, with a
    message a person can act on: the run is not lost when `store` mirrors it.
    """
    # the address may carry credentials (`user:pw@host:7233`), the store's
    # repr and error its connection URL and the key it was given
    address = redact_address(client.service_client.config.target_host)
    said = (
        f"Run {run_id!r} is gone from Temporal at {address}: the server no longer has it "
        "(it came back from an outage without its database, or was reset, or the run "
        "was deleted). "
    )
    if store is None:
        return KeyError(
            said + "No store mirrors this agent's runs (`store=`), so it cannot be "
            "restored: start it again."
        )
    where = shown_store(store)
    try:
        events = await in_thread(read_events, store, run_id)
    except Exception as exc:  # an explanation only: the run is gone either way
        logger.warning("Could not read run %s from the store %r: %s", run_id, store, exc)
        return KeyError(
            said + f"Its mirror in {where} could not be read ({_redact.clean(str(exc))}); "
            f"once it can, `resume({run_id!r})` continues the run from it."
        )
    if not events:
        return KeyError(
            said + f"Its mirror in {where} has none of its events, so it cannot be "
            "restored: start it again."
        )
    return KeyError(
        said + f"Its mirror in {where} has its first {len(events)} events: "
        f"`resume({run_id!r})` (`agentor-temporal resume {run_id} --agent MODULE:ATTR` from a "
        "shell) continues "
        "the run from there (a call in flight when the server lost it may run again)."
    )


async def mirrored_only(client: Client, run_id: str, store: Store | None) -> KeyError | None:
    """`run_gone`'s error when Temporal lacks the run and `store` has it, else None.

    For a call that found no run (a decision): a run only the mirror holds was
    Temporal's once, and the mirror can bring it back.
    """
    if store is None:
        return None
    try:
        events = await in_thread(read_events, store, run_id)
    except Exception:  # noqa: BLE001 - the caller's own refusal stands
        return None
    return await run_gone(client, run_id, store) if events else None
