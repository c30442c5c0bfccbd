"""`agentor-temporal pending`, `approve` and `deny`: people deciding on tool calls."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from agentor_temporal._cli_common import (
    DECIDED,
    EXIT_OK,
    CliError,
    address,
    arun,
    connect_for_reading,
    load_agent,
    run_id_arg,
    shown_id,
    text_arg,
)
from agentor_temporal._runs import make_decision, send_decision, undelivered, waiting_calls
from agentor_temporal._runtime import Runtime
from agentor_temporal.codec import keys_from_file
from agentor_temporal.store import PendingApproval
from agentor_temporal.workflows import Decision
from agentor_temporal.workflows.formatting import call_summary

# -- approvals ---------------------------------------------------------------------------


def cmd_pending(args: argparse.Namespace) -> int:
    """List runs waiting for approval, and what they wait for."""

    async def read() -> list[dict[str, Any]]:
        client = await connect_for_reading(args)
        waiting = await waiting_calls(client, agent=args.agent, limit=args.limit)
        return [w.to_dict() for w in waiting]

    rows = arun(read)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no run is waiting for approval")
        return EXIT_OK
    table = [
        [
            # what a model chose (the call id) escaped: a newline in it wrote a row of its own
            shown_id(r["run_id"]),
            shown_id(r["call_id"]),
            "?" if r["turn"] is None else r["turn"],
            shown_id(call_summary(r["tool"] or "?", r["args"])),
            shown_id(r["agent"]),
            _since(r["waiting_since"]),
        ]
        for r in rows
    ]
    header = ["RUN ID", "CALL ID", "TURN", "WAITS FOR", "AGENT", "SINCE"]
    widths = [max(len(str(row[i])) for row in [header, *table]) for i in range(len(header))]
    for row in [header, *table]:
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return EXIT_OK


def _since(timestamp: float | None) -> str:
    if not timestamp:
        return "?"
    import datetime

    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _decider() -> str:
    """Who decides when `--by` is not given: the login name, else `uid N`.

    getpass.getuser() reads LOGNAME, USER, LNAME and USERNAME, then the password
    database: a container run under a uid its image has no user for (OpenShift's
    random uid, `docker run --user 12345`, a Kubernetes runAsUser) has neither,
    and it raised KeyError (OSError from Python 3.13), so `approve` and `deny`
    ended in that traceback and no decision could be made there without `--by`.
    The uid still says who, as the system knows them.
    """
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        getuid = getattr(os, "getuid", None)  # POSIX only; Windows names come from USERNAME
        return f"uid {getuid()}" if getuid is not None else "unknown user"


def _decide(args: argparse.Namespace, approved: bool) -> int:
    run_id = run_id_arg(args.run_id)
    by = args.by or _decider()
    reason = None if args.reason is None else text_arg(args.reason)
    decision = Decision(
        call_id=args.call_id, approved=approved, reason=reason, by=by, turn=args.turn
    )

    # a pending approval read with `pending --json` names the execution that asked
    call: str | PendingApproval = args.call_id
    if args.execution is not None:
        call = PendingApproval(args.call_id, "", None, args.turn, args.execution)

    async def go() -> dict[str, Any]:
        if args.agent:
            agent = load_agent(args.agent)
            if args.temporal:
                agent.temporal = args.temporal
            if args.encryption_keys_file:
                agent.encryption_keys = keys_from_file(args.encryption_keys_file)
            client = await agent._client()
            # --wait bounds the worker from when this process's own serves the run: its
            # start (imports, the sandbox check) took 20 s of the 30 on a loaded machine,
            # which then said no worker took the decision while its own was about to
            decided = await agent._decide(
                run_id,
                *make_decision(call, approved, decision.reason, by, args.turn),
                patience=args.wait,
            )
            return {**decided, "address": address(client)}
        client = await connect_for_reading(args)
        # --wait bounds the worker (from the decision's sending): a server outage is
        # ridden out apart
        decided = await send_decision(client, run_id, decision, args.execution, patience=args.wait)
        return {**decided, "address": address(client)}

    try:
        decided = Runtime.get().run_sync(go())
        DECIDED.set()  # an interrupt now waits for the call this worker may run
    except KeyError as exc:
        raise CliError(str(exc.args[0]) if exc.args else f"unknown run {run_id!r}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11
        raise CliError(
            f"{undelivered(run_id, decision.call_id, args.wait)}. {_serve_hint(args)}"
        ) from None
    except KeyboardInterrupt:
        # the decision may have reached Temporal already: it is then applied
        # when a worker takes the run, although this command never said so
        raise CliError(
            f"interrupted before run {run_id} confirmed the decision on "
            f"{shown_id(args.call_id)}: it may still be taken (Temporal holds a decision it "
            "received for the run, and a worker that picks the run up applies it); see "
            f"`agentor-temporal show {run_id}` "
            "before deciding again",
            130,
        ) from None
    verb = "approved" if approved else "denied"
    turn = f" (turn {decided['turn']})" if decided.get("turn") is not None else ""
    print(f"{verb} {shown_id(args.call_id)}{turn} of run {run_id} (by {shown_id(by)})")
    print(f"continue it with: agentor-temporal resume {run_id} --agent MODULE:ATTR")
    return EXIT_OK


def _serve_hint(args: argparse.Namespace) -> str:
    """What to try when no worker took a decision within --wait."""
    if not args.agent:
        return "Pass --agent MODULE:ATTR to serve the run's agent from here"
    # this process served one: it told the person to pass the --agent they had passed
    return (
        f"This command served {args.agent} from the time its worker started: is that the "
        "run's agent, on the run's task queue? On a loaded machine, allow a longer --wait"
    )


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve a waiting tool call."""
    return _decide(args, True)


def cmd_deny(args: argparse.Namespace) -> int:
    """Deny a waiting tool call."""
    return _decide(args, False)
