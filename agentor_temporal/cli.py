"""`agentor-temporal` (also `python -m agentor_temporal`): operate runs from a terminal.

One subcommand per routine operation: a dev server, a worker, starting,
resuming and forking runs with live progress, and reading runs (`show`,
`list`, `export`) straight from Temporal history, which needs no worker. Plain argparse, so the
CLI adds no dependency. The exit status is the contract scripts rely on: 0
done, 1 the operation failed (unknown run, Temporal unreachable, the run
itself failed), 2 usage error (bad arguments, agent path, run id or age). A
user's mistake prints one `error:` line, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from temporalio.service import RPCError

from agentor_temporal import telemetry, worker
from agentor_temporal._cli_approvals import cmd_approve, cmd_deny, cmd_pending
from agentor_temporal._cli_codec import cmd_codec_server, cmd_keygen, dev_codec, report_codec
from agentor_temporal._cli_common import (
    DECIDED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    configure,
    load_agent,
    run_id_arg,
    shown_id,
    text_arg,
)
from agentor_temporal._cli_fork import cmd_fork
from agentor_temporal._cli_inspect import cmd_export, cmd_list, cmd_prune, cmd_show
from agentor_temporal._cli_parser import build_parser
from agentor_temporal._ending import say_line
from agentor_temporal._exit import calls_grace
from agentor_temporal._outage import outage_of
from agentor_temporal._progress import Progress, finished_execution, follow
from agentor_temporal._runtime import Runtime
from agentor_temporal._sigterm import NoteFirst
from agentor_temporal._terminal import escape_log_lines, terminal_text
from agentor_temporal.agent import Agentor
from agentor_temporal.codec import EncryptionConfigError, EncryptionKeyError
from agentor_temporal.codec_server import stop_codec_server
from agentor_temporal.connection import (
    ConnectionFailed,
    DevServer,
    dev_server_status,
    environment_configured,
    start_dev_server,
    stop_dev_server,
)
from agentor_temporal.serve._cli import cmd_serve
from agentor_temporal.store import RunResult, new_run_id
from agentor_temporal.workflows.formatting import call_summary
from agentor_temporal.workflows.history_reader import NotAnAgentRun

# -- dev ----------------------------------------------------------------------------


def _print_server(headline: str, server: DevServer) -> None:
    print(headline)
    print(f"  address  {server.address}")
    print(f"  ui       {server.ui_url}")
    print(f"  data     {server.data_dir}")


def cmd_dev(args: argparse.Namespace) -> int:
    """Start, report or stop the embedded dev server."""
    data = Path(args.data_dir)
    if args.action == "stop":
        if stop_codec_server(data):
            print(f"stopped the codec server started from {data.resolve()}")
        if stop_dev_server(data):
            print(f"stopped the Temporal dev server started from {data.resolve()}")
            return EXIT_OK
        running = dev_server_status(data, args.port, args.ui_port)
        if running is not None:
            raise CliError(
                f"a Temporal server answers on {running.address}, but it was not started "
                f"from {data.resolve()}; not stopping it"
            )
        print(f"no Temporal dev server started from {data.resolve()} is running")
        return EXIT_OK
    if args.action == "status":
        running = dev_server_status(data, args.port, args.ui_port)
        if running is None:
            raise CliError(f"no Temporal server answers on localhost:{args.port}")
        _print_server(_server_headline(running, data), running)
        report_codec(args, running)
        return EXIT_OK
    codec = dev_codec(args, data)
    server = start_dev_server(data, args.port, args.ui_port, codec_endpoint=codec)
    _print_server(_server_headline(server, data), server)
    report_codec(args, server)
    return EXIT_OK


def _server_headline(server: DevServer, data: Path) -> str:
    if server.started:
        return f"Temporal dev server started (pid {server.pid})"
    if server.pid is not None:
        return f"Temporal dev server already running (pid {server.pid})"
    return (
        f"A Temporal server already answers on {server.address}; it was not started "
        f"from {data.resolve()}, so `dev stop` leaves it alone"
    )


# -- worker ----------------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    """Run `worker.py`'s worker with the same options."""
    return worker.run(args)


# -- run / resume ------------------------------------------------------------------------


def _ui_hint(agent: Agentor, run_id: str) -> None:
    if agent.temporal is None and not environment_configured():
        print(f"  ui: {agent.ui_url(run_id)}", file=sys.stderr, flush=True)


def _interrupted(run_id: str, args: argparse.Namespace) -> str:
    where = "its workers" if args.no_worker else "a worker (this one stops)"
    return (
        f"interrupted: run {run_id} stays in Temporal and continues with {where}; "
        f"`agentor-temporal resume {run_id} --agent {args.agent}` returns it"
    )


def _report(result: RunResult, args: argparse.Namespace) -> int:
    if args.json:
        # a piece at a time: a long run's JSON is hundreds of megabytes
        sys.stdout.writelines(result.json_chunks())
    elif result.final_output is not None:
        # the model's: its lines kept, what would act on the terminal escaped
        print(terminal_text(result.final_output, lines=True))
    elif result.status == "awaiting_approval":
        print(f"awaiting approval ({len(result.pending_approvals)} call(s)):")
        for pending in result.pending_approvals:
            turn = f"turn {pending.turn}" if pending.turn is not None else "turn ?"
            summary = shown_id(call_summary(pending.tool, pending.args))
            print(f"  {shown_id(pending.call_id)}  {turn}  {summary}")
        print(
            f"decide with: agentor-temporal approve {result.run_id} CALL_ID --turn N "
            f"(or deny ... --reason WHY), then: agentor-temporal resume {result.run_id} "
            f"--agent {args.agent}"
        )
    if result.status in ("completed", "awaiting_approval"):
        return EXIT_OK
    print(
        f"error: run {result.run_id} ended {result.status}: "
        f"{terminal_text(result.error or 'no answer')}",
        file=sys.stderr,
    )
    return EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    """Start a run, narrate it, print its answer."""
    prompt = text_arg(args.prompt)
    if not prompt.strip():
        raise CliError("the prompt is empty", EXIT_USAGE)
    run_id = run_id_arg(args.run_id) if args.run_id else new_run_id()
    agent = load_agent(args.agent)
    configure(agent, args)
    print(f"run_id: {run_id}", file=sys.stderr if args.json else sys.stdout, flush=True)

    async def go() -> RunResult:
        client = await agent._client()
        _ui_hint(agent, run_id)
        work = agent.arun(prompt, run_id=run_id, max_turns=args.max_turns)
        return await follow(client, run_id, work, Progress(sys.stderr))

    try:
        result = Runtime.get().run_sync(go())
    except KeyError as exc:  # the run is gone from the server meanwhile (it came back empty)
        raise CliError(str(exc.args[0]) if exc.args else f"unknown run {run_id!r}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(_interrupted(run_id, args), 130) from None
    return _report(result, args)


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue or return a run, narrating any new work."""
    run_id = run_id_arg(args.run_id)
    agent = load_agent(args.agent)
    configure(agent, args)
    print(f"run_id: {run_id}", file=sys.stderr if args.json else sys.stdout, flush=True)

    async def go() -> tuple[RunResult, Progress]:
        client = await agent._client()
        progress = Progress(sys.stderr, await finished_execution(client, run_id))
        _ui_hint(agent, run_id)
        result = await follow(client, run_id, agent.aresume(run_id, args.max_turns), progress)
        return result, progress

    try:
        result, progress = Runtime.get().run_sync(go())
    except KeyError as exc:
        raise CliError(str(exc.args[0]) if exc.args else f"unknown run {run_id!r}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(_interrupted(run_id, args), 130) from None
    if progress.skip is not None and not progress.narrated:
        print(f"  {result.status}: already finished, nothing was run", file=sys.stderr)
    return _report(result, args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "pending": cmd_pending,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "dev": cmd_dev,
    "worker": cmd_worker,
    "run": cmd_run,
    "resume": cmd_resume,
    "fork": lambda args: cmd_fork(args, _report),
    "show": cmd_show,
    "list": cmd_list,
    "export": cmd_export,
    "prune": cmd_prune,
    "serve": cmd_serve,
    "codec-server": cmd_codec_server,
    "keygen": cmd_keygen,
}


# -- entry point ------------------------------------------------------------------------------


def execute(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (for embedding and tests)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS.get(args.command or "")
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # core log lines on stderr, never in the middle of what a command prints
    telemetry.route_core_logs()
    if args.command != "worker":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        # an embedded worker's SDK logs carry tracebacks of failures the
        # progress lines already tell; `worker` keeps them for operators
        logging.getLogger("temporalio").setLevel(logging.ERROR)
        escape_log_lines()  # a line quoting a provider's message as it came
    # every line printed masked, of any logger (a tool's own, asyncio's)
    from agentor_temporal.activities import _redact

    _redact.guard_handlers()
    try:
        return handler(args)
    except CliError as exc:
        print(f"error: {said(exc)}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): not an error, and no traceback
        # when the interpreter flushes stdout on exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        outage = outage_of(exc)
        if outage is not None:  # said as this command's user re-attaches
            print(f"error: {said(outage.told(_again(args, outage.run_id)))}", file=sys.stderr)
            return EXIT_FAILED
        code = _known_failure(exc)
        if code is None:
            raise
        print(f"error: {said(exc)}", file=sys.stderr)
        return code


def said(error: BaseException | str) -> str:
    """An error's text as the CLI prints it: URL credentials and known secrets masked, what
    would act on the terminal escaped (`terminal_text`; its lines kept).

    A command's error may quote anything it met: a store's own error quoting its
    connection URL, the key the loaded agent holds, a provider's message.
    """
    from agentor_temporal.activities import _redact

    return terminal_text(_redact.clean(str(error)), lines=True)


def _again(args: argparse.Namespace, run_id: str | None) -> str:
    """How a command's user picks up a run its wait gave up on (the CLI's words)."""
    if run_id is None:
        return "run the command again"
    agent = getattr(args, "agent", None)
    if agent:
        return f"`agentor-temporal resume {run_id} --agent {agent}` re-attaches to it"
    return (
        f"`agentor-temporal show {run_id}` shows it (`agentor-temporal resume {run_id} "
        "--agent MODULE:ATTR` re-attaches to it)"
    )


#: The signal that ended the command's wait (its KeyboardInterrupt), if one did.
_ENDED_BY: list[signal.Signals] = []


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    _ENDED_BY.append(signal.Signals(signum))
    raise KeyboardInterrupt


def _noted(signum: signal.Signals) -> None:
    again = "Ctrl+C again" if signum == signal.SIGINT else f"{signum.name} again"
    say_line(
        f"finishing the calls this command's worker runs (up to {calls_grace():g} s); "
        f"interrupt again to abandon them ({again}; another worker then runs them again)"
    )


#: Ctrl+C, SIGTERM, SIGHUP: end the command; once its outcome is decided, wait first. An
#: `approve` has printed its outcome when its worker runs the approved call; an interrupt then
#: cut the call off, and the next worker ran it again. So once `DECIDED` is set, the first
#: interrupt is noted and the calls finish; a second abandons them.
INTERRUPTS = NoteFirst(
    ("SIGINT", "SIGTERM", "SIGHUP"),
    _noted,
    # a signal the caller ignores (`nohup`) stays ignored
    over=lambda signum, current: current is not signal.SIG_IGN,
    obey=_raise_interrupt,
    when=DECIDED.is_set,
)


def _drain() -> None:
    """Stop the embedded worker, finishing its calls; a first interrupt meanwhile waits on.

    A command whose wait an interrupt ended (`run`, `resume`, `fork` mid-tool) has had its
    first: its worker's calls finish, said in a line, and the next interrupt abandons them.
    Before, that wait was silent, the next interrupt only got the line, and a third was
    needed to abandon the calls.
    """
    DECIDED.set()
    runtime = Runtime._instance
    if runtime is None:
        return
    if _ENDED_BY and runtime.serving():
        INTERRUPTS.count_noted(_ENDED_BY[0])
        _noted(_ENDED_BY[0])
    with contextlib.suppress(KeyboardInterrupt):  # abandoned, as asked twice
        runtime.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: run one command, then end the process with its status.

    The process ends through `os._exit` once output is flushed and embedded
    workers are stopped: the Temporal client's core threads can call into a
    finalizing interpreter and abort a short-lived process at exit
    ("Fatal Python error: PyGILState_Release", temporalio/sdk-python#300,
    seen here too), which would turn a finished command into exit status 134.
    """
    # SIGTERM (`kill`, a container stopping) and SIGHUP (the terminal closed)
    # end a command as Ctrl+C does: its embedded worker finishes the calls it
    # runs. Killed at once instead, an approved call cut off mid-work ran again
    # on the next worker. (`worker`, `serve` and `codec-server` set their own handlers.)
    INTERRUPTS.install()  # for the process's life: it ends by `os._exit`
    try:
        code = execute(argv)
    except Exception:
        # a bug: its traceback is for the report, masked as every line the CLI prints
        # (Python's own printed the message as it was: a driver's error quoting its
        # connection URL with the password, the key the loaded agent holds)
        print(said(traceback.format_exc()).rstrip(), file=sys.stderr)
        code = EXIT_FAILED
    _drain()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)


def _known_failure(exc: Exception) -> int | None:
    """The exit status of an expected failure, or None for a bug (traceback)."""
    if isinstance(exc, (worker.ConfigError, EncryptionConfigError)):
        return EXIT_USAGE
    if isinstance(exc, (ConnectionFailed, RPCError, OSError, EncryptionKeyError, NotAnAgentRun)):
        return EXIT_FAILED
    return None
