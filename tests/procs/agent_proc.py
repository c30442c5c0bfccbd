"""A process the crash tests run and kill: `agent_proc.py run|resume|fork|worker`.

Configured through the environment: TEMPORAL_ADDRESS, AGENT_TASK_QUEUE,
MODEL_BASE_URL, AGENT_STORE (a directory), AGENT_LEDGER, BLOCK_AFTER and
BLOCK_MARKER (freeze after that event type is mirrored), TOOL_DELAY (and
TOOL_DELAY_CITY: only for that city), TOOL_EXITS=1 (the tool kills its own
process), APPROVAL=1 (a transfer tool that needs approval; its predicate
creates the file PREDICATE_ASKING, then answers once the file
PREDICATE_ANSWER_AFTER exists), AGENT_INSTRUCTIONS, PARENT_SPAN (run inside a
span of that name), LOCAL_MODEL_CALLS=1 (`local_model_calls=True`).
Prints the RunResult as one JSON line.
`--go-file` makes it print "waiting", then start only once that file exists,
so a test can release several processes at the same moment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from helpers import INSTRUCTIONS, PROMPT, BlockingStore, transfer_tool, weather_agent, weather_tool


def build() -> object:
    store_dir = os.environ.get("AGENT_STORE")
    store = (
        BlockingStore(store_dir, os.environ.get("BLOCK_AFTER"), os.environ.get("BLOCK_MARKER"))
        if store_dir
        else None
    )
    return weather_agent(
        base_url=os.environ["MODEL_BASE_URL"],
        task_queue=os.environ["AGENT_TASK_QUEUE"],
        temporal=os.environ["TEMPORAL_ADDRESS"],
        store=store,
        tools=[
            weather_tool(
                os.environ.get("AGENT_LEDGER"),
                delay=float(os.environ.get("TOOL_DELAY", "0")),
                delay_city=os.environ.get("TOOL_DELAY_CITY"),
                exit_process=os.environ.get("TOOL_EXITS") == "1",
                blocking_loop=os.environ.get("TOOL_BLOCKS_LOOP") == "1",
            ),
            *(
                [
                    transfer_tool(
                        os.environ.get("AGENT_LEDGER"),
                        asking=os.environ.get("PREDICATE_ASKING"),
                        answer_after=os.environ.get("PREDICATE_ANSWER_AFTER"),
                    )
                ]
                if os.environ.get("APPROVAL")
                else []
            ),
        ],
        embedded_worker=os.environ.get("EMBEDDED_WORKER", "1") == "1",
        instructions=os.environ.get("AGENT_INSTRUCTIONS", INSTRUCTIONS),
        local_model_calls=os.environ.get("LOCAL_MODEL_CALLS") == "1",
    )


async def serve_worker(agent: object) -> None:
    from agentor_temporal import connect
    from agentor_temporal.worker import build_worker

    client = await connect(os.environ["TEMPORAL_ADDRESS"])
    options = {}
    if os.environ.get("MAX_CACHED_WORKFLOWS"):
        options["max_cached_workflows"] = int(os.environ["MAX_CACHED_WORKFLOWS"])
    if os.environ.get("NO_REMOTE_ACTIVITIES") == "1":
        options["no_remote_activities"] = True  # workflow tasks (and their local steps) only
    worker = build_worker(client, [agent], task_queue=os.environ["AGENT_TASK_QUEUE"], **options)
    async with worker:
        print("worker ready", flush=True)
        await asyncio.Event().wait()


async def print_stream(agent: object, run_id: str | None, prompt: str) -> None:
    """Print each streamed event as one JSON line, as it arrives."""
    async for event in agent.stream_chat(prompt, run_id=run_id, stream_text=True):  # type: ignore[attr-defined]
        print(json.dumps(event.to_dict()), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run", "resume", "worker", "stream", "approve", "fork"])
    parser.add_argument("--call-id")
    parser.add_argument("--by")
    parser.add_argument("--run-id")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--go-file")
    parser.add_argument("--fork-input", help="fork: the message to continue with")
    args = parser.parse_args()
    agent = build()
    if args.go_file:
        print("waiting", flush=True)
        while not Path(args.go_file).exists():
            time.sleep(0.005)
    if args.command == "worker":
        asyncio.run(serve_worker(agent))
        return 0
    if args.command == "stream":
        asyncio.run(print_stream(agent, args.run_id, args.prompt))
        return 0
    if args.command == "approve":
        agent.approve(args.run_id, args.call_id, by=args.by)  # type: ignore[attr-defined]
        result = agent.resume(args.run_id)  # type: ignore[attr-defined]
        print(json.dumps(result.to_dict()), flush=True)
        return 0
    if args.command == "fork":
        result = agent.fork(args.run_id, args.fork_input)  # type: ignore[attr-defined]
        print(json.dumps(result.to_dict()), flush=True)
        return 0
    if args.command == "run" and os.environ.get("PARENT_SPAN"):
        # a traced caller (a request handler, say): the run is its span's child
        from opentelemetry import trace

        from agentor_temporal.telemetry import enable_tracing

        enable_tracing()
        with trace.get_tracer("test").start_as_current_span(os.environ["PARENT_SPAN"]):
            result = agent.run(args.prompt, run_id=args.run_id)  # type: ignore[attr-defined]
    elif args.command == "run":
        result = agent.run(args.prompt, run_id=args.run_id)  # type: ignore[attr-defined]
    else:
        result = agent.resume(args.run_id)  # type: ignore[attr-defined]
    print(json.dumps(result.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Stop the embedded worker while everything is alive, then leave without
    # interpreter finalization: temporalio's Rust threads can race it and abort
    # a process whose work is done (temporalio/sdk-python#300, seen here about
    # once in 50 exits of two concurrent processes). The tests judge the run,
    # not that SDK bug.
    from agentor_temporal._runtime import Runtime

    if Runtime._instance is not None:
        Runtime._instance.close()
    from agentor_temporal import telemetry

    telemetry.flush()  # spans still buffered, when the OTEL_* environment traces
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
