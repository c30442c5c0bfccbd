"""`agentor-temporal fork`: copy a run to a new id and continue it there.

The command is `Agentor.fork` with the CLI's manners: the fork's id first
(so it is known even if the command is interrupted), progress on stderr while
the fork works, its answer last, and the exit status contract (0 completed,
1 the fork failed or could not be made, 2 a usage error).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from agentor_temporal._cli_common import (
    EXIT_USAGE,
    CliError,
    configure,
    load_agent,
    run_id_arg,
    text_arg,
)
from agentor_temporal._progress import Progress, follow
from agentor_temporal._runtime import Runtime
from agentor_temporal.store import RunResult, new_run_id


def cmd_fork(
    args: argparse.Namespace, report: Callable[[RunResult, argparse.Namespace], int]
) -> int:
    """Fork a run, narrate the fork's work, print its answer (through `report`, as `run`)."""
    parent = run_id_arg(args.run_id)
    fork_id = run_id_arg(args.fork_id) if args.fork_id else new_run_id()
    message = None if args.input is None else text_arg(args.input)
    if message is not None and not message.strip():
        raise CliError("the input is empty; leave --input out to fork without one", EXIT_USAGE)
    agent = load_agent(args.agent)
    configure(agent, args)
    out = sys.stderr if args.json else sys.stdout
    print(f"run_id: {fork_id}", file=out, flush=True)
    print(f"forked_from: {parent}", file=out, flush=True)

    async def go() -> RunResult:
        client = await Runtime.get().client(agent.temporal)
        work = agent.afork(parent, message, fork_id=fork_id, max_turns=args.max_turns, at=args.at)
        return await follow(client, fork_id, work, Progress(sys.stderr))

    try:
        result = Runtime.get().run_sync(go())
    except KeyError as exc:
        raise CliError(str(exc.args[0]) if exc.args else f"unknown run {parent!r}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(
            f"interrupted: fork {fork_id} stays in Temporal; "
            f"`agentor-temporal resume {fork_id} --agent {args.agent}` returns it",
            130,
        ) from None
    if result.status == "completed" and result.final_output is None:
        print("(the fork holds no answer yet)", file=sys.stderr)
    return report(result, args)
