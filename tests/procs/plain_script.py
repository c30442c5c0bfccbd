"""A user's plain script, ending as scripts end: `plain_script.py run|approve|deny|...`.

Unlike `agent_proc.py`, it does nothing special at exit (no `os._exit`, no
explicit shutdown): the interpreter tears down with the embedded worker as it
stands, which is the case the exit tests are about. Configured through the
environment like `agent_proc.py` (TEMPORAL_ADDRESS, AGENT_TASK_QUEUE,
MODEL_BASE_URL, AGENT_STORE, AGENT_LEDGER). Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import multiprocessing
import os
import signal
import sys
import threading
import time

from agentor_temporal import function_tool

from helpers import ledger_lines, ledger_write, plain_agent, transfer_tool, weather_tool

agent = plain_agent()
#: a file whose coming ends the slow tools' wait early (tests/helpers.py weather_tool)
GATE = os.environ.get("AGENT_TOOL_GATE")
command, run_id = sys.argv[1], sys.argv[2]
WEATHER = "What is the weather in Paris?"


def child_run(child_id: str) -> None:
    """A forked child's own run (multiprocessing with the fork start method); exit status 3
    if the library refused it as forked after the parent started Temporal's core."""
    try:
        status = agent.run(WEATHER, run_id=child_id).status
    except RuntimeError as e:
        sys.exit(3 if "not fork-safe" in str(e) else 2)
    sys.exit(0 if status == "completed" else 1)


def fork(child_id: str) -> multiprocessing.process.BaseProcess:
    """Fork a child running `child_run`."""
    child = multiprocessing.get_context("fork").Process(target=child_run, args=(child_id,))
    child.start()
    return child


def ended(child: multiprocessing.process.BaseProcess) -> tuple[int | None, bool]:
    """The child's exit code once it ends, and whether it was stuck (killed after 20 s)."""
    child.join(20)
    stuck = child.is_alive()
    if stuck:
        child.kill()
        child.join()
    return child.exitcode, stuck


if command == "run":
    prompt = sys.argv[3] if len(sys.argv) > 3 else "Send 5 to bob"
    result = agent.run(prompt, run_id=run_id)
    print(
        json.dumps(
            {"status": result.status, "pending": [p.call_id for p in result.pending_approvals]}
        )
    )
elif command in ("approve", "deny"):
    decided = getattr(agent, command)(run_id, sys.argv[3], by="script")
    print(json.dumps({"decided": decided["call_id"]}))
elif command == "approve_then_work":
    # approve, then the script goes on with work of its own (not an agent call) while
    # its embedded worker, still up, runs the approved call
    decided = agent.approve(run_id, sys.argv[3], by="script")
    print(json.dumps({"decided": decided["call_id"]}), flush=True)
    time.sleep(60)
elif command == "resume":
    print(json.dumps({"status": agent.resume(run_id).status}))
elif command == "arun":
    # async code on asyncio.run's loop, whose own Ctrl+C handler cancels the main task

    async def answer() -> str:
        return (await agent.arun(WEATHER, run_id=run_id)).status

    print(json.dumps({"status": asyncio.run(answer())}))
elif command == "run_in_loop":
    # the sync call inside async code (a notebook cell, a coroutine calling run()): the
    # main thread blocks in it, so asyncio's own Ctrl+C handler cannot cancel anything

    async def blocked() -> str:
        return agent.run(WEATHER, run_id=run_id).status

    print(json.dumps({"status": asyncio.run(blocked())}))
elif command in ("arun_timeout", "arun_raises"):
    # the script's own timeout around arun (asyncio.wait_for), or an exception of its own
    # while arun runs on another task (asyncio.run then cancels that task), mid-tool
    ledger = os.environ["AGENT_LEDGER"]

    async def stop_waiting() -> str:
        running = asyncio.ensure_future(agent.arun(WEATHER, run_id=run_id))
        while not ledger_lines(ledger):  # the tool started
            await asyncio.sleep(0.01)
        if command == "arun_raises":
            raise RuntimeError("the script's own bug")
        try:
            await asyncio.wait_for(running, 0.5)  # cancels it as it runs out
        except asyncio.TimeoutError:
            return "timed out"
        return "answered"

    print(json.dumps({"status": asyncio.run(stop_waiting())}))
elif command == "stream":

    async def follow() -> list[str]:
        return [
            e.type async for e in agent.stream_chat("What is the weather in Paris?", run_id=run_id)
        ]

    print(json.dumps({"events": asyncio.run(follow())}))
elif command == "run_os_exit":
    # the run's result, then the process ends at once (no exit hook, no worker drain)
    status = agent.run(sys.argv[3] if len(sys.argv) > 3 else WEATHER, run_id=run_id).status
    print(json.dumps({"status": status}), flush=True)
    os._exit(0)
elif command == "stream_break":
    # a consumer that stops following at the run's first tool call, then returns
    # while the tool runs: nobody waits on the rest of the run
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "1"))
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=delay, gate=GATE)])

    async def leave() -> list[str]:
        seen = []
        async for event in slow.stream_chat(WEATHER, run_id=run_id):
            seen.append(event.type)
            if event.type == "tool_call":
                break
        return seen

    print(json.dumps({"events": asyncio.run(leave())}))
elif command == "thread":
    # a web framework's worker thread (not a daemon) runs the agent; the main
    # thread returns while the thread's tool call is in flight
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "1"))
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=delay, gate=GATE)])

    def work() -> None:
        print(json.dumps({"status": slow.run(WEATHER, run_id=run_id).status}), flush=True)

    threading.Thread(target=work).start()
    deadline = time.monotonic() + 30
    while not ledger_lines(ledger) and time.monotonic() < deadline:
        time.sleep(0.01)
elif command == "stream_thread":
    # a thread (not a daemon) follows a run's stream on its own loop; the main thread
    # returns while the run's tool call is in flight
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "1"))
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=delay, gate=GATE)])

    def follow_in_thread() -> None:
        async def follow() -> list[str]:
            return [e.type async for e in slow.stream_chat(WEATHER, run_id=run_id)]

        print(json.dumps({"events": asyncio.run(follow())}), flush=True)

    threading.Thread(target=follow_in_thread).start()
    deadline = time.monotonic() + 30
    while not ledger_lines(ledger) and time.monotonic() < deadline:
        time.sleep(0.01)
elif command == "pool":
    # a thread pool, never shut down, runs the agent; the main thread returns
    # while the pool thread's tool call is in flight
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "1"))
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=delay, gate=GATE)])

    def pooled() -> None:
        print(json.dumps({"status": slow.run(WEATHER, run_id=run_id).status}), flush=True)

    # kept, as an application keeps its pool (one collected ends its threads)
    pool = concurrent.futures.ThreadPoolExecutor(2)
    pool.submit(pooled)
    deadline = time.monotonic() + 30
    while not ledger_lines(ledger) and time.monotonic() < deadline:
        time.sleep(0.01)
elif command == "atexit":
    # a cleanup handler that makes one more call as the script ends

    def last_call() -> None:
        try:
            agent.run(WEATHER, run_id=run_id)
        except RuntimeError as exc:
            print(json.dumps({"refused": str(exc)}), flush=True)

    atexit.register(last_call)
elif command == "daemon":
    # a daemon thread runs the agent; the main thread returns while the thread's
    # tool call is in flight, and the thread is cut off at exit
    ledger = os.environ["AGENT_LEDGER"]
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=2)])

    def cut_off() -> None:
        slow.run(WEATHER, run_id=run_id)

    threading.Thread(target=cut_off, daemon=True).start()
    deadline = time.monotonic() + 30
    while not ledger_lines(ledger) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({"started": bool(ledger_lines(ledger))}))
elif command == "own_handler_daemon":
    # the script's own SIGTERM handler (sys.exit, a common way to stop in a container); a
    # daemon thread runs the agent and the main thread returns while its tool call is in
    # flight, so the exit hook drains the worker when the SIGTERM comes
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "3"))
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=delay, gate=GATE)])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=lambda: slow.run(WEATHER, run_id=run_id), daemon=True).start()
    deadline = time.monotonic() + 90
    while not ledger_lines(ledger) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({"started": bool(ledger_lines(ledger))}), flush=True)
elif command in ("own_handler_full_stderr", "full_stderr"):
    # as `own_handler_daemon` (`full_stderr`: with Python's default SIGTERM), but nobody reads
    # stderr for now (a pipe to a stalled logger): the exit hook's line naming the open run
    # blocks, outside its waits, as the SIGTERM comes
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "3"))
    slow = plain_agent(tools=[transfer_tool(ledger), weather_tool(ledger, delay=delay, gate=GATE)])
    if command == "own_handler_full_stderr":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=lambda: slow.run(WEATHER, run_id=run_id), daemon=True).start()
    deadline = time.monotonic() + 90
    while not ledger_lines(ledger) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({"started": bool(ledger_lines(ledger))}), flush=True)
    sys.stderr.flush()
    os.set_blocking(2, False)
    try:
        while True:
            os.write(2, b"." * 4096)
    except BlockingIOError:
        pass  # the pipe is full
    os.set_blocking(2, True)
elif command == "fork":
    # a child forked before the parent's first call runs its own run; one forked
    # once the parent's runtime and embedded worker are up is refused
    early, early_stuck = ended(fork(f"{run_id}-e"))
    first = agent.run(WEATHER, run_id=run_id).status
    late, late_stuck = ended(fork(f"{run_id}-c"))
    after = agent.run(WEATHER, run_id=f"{run_id}-p").status
    outcome = {"parent": [first, after], "children": [early, late]}
    print(json.dumps({**outcome, "stuck": early_stuck or late_stuck}))
elif command == "nested":
    # an agent used as a tool: the outer agent's get_weather asks an inner agent (on its own
    # task queue, or on the same one with INNER_QUEUE=same), whose get_weather takes
    # AGENT_TOOL_SECONDS; argv[3] says whether to run the outer run or resume it
    ledger = os.environ["AGENT_LEDGER"]
    delay = float(os.environ.get("AGENT_TOOL_SECONDS", "2"))
    queue = os.environ["AGENT_TASK_QUEUE"]
    inner = plain_agent(
        name="Inner Agent",
        tools=[weather_tool(ledger, delay=delay)],
        task_queue=queue if os.environ.get("INNER_QUEUE") == "same" else f"{queue}-inner",
    )

    @function_tool(name="get_weather")
    def ask_inner(city: str) -> str:
        """Get the current weather for a city, from the inner agent.

        Args:
            city: The city to look up.
        """
        ledger_write(ledger, "outer", city)
        answer = inner.run(f"What is the weather in {city}?", run_id=f"{run_id}-inner")
        return answer.final_output or answer.status

    @function_tool(name="transfer", requires_approval=True)
    def approved_ask(amount: float, to: str) -> str:
        """Send money, once the inner agent had its say.

        Args:
            amount: How much.
            to: To whom.
        """
        return ask_inner.fn(to)

    outer = plain_agent(tools=[approved_ask, ask_inner])
    if sys.argv[3] == "resume":
        print(json.dumps({"status": outer.resume(run_id).status}))
    elif sys.argv[3] == "ask":  # a transfer, which waits for approval
        print(
            json.dumps(
                {
                    "pending": [
                        p.call_id for p in outer.run("Send 5", run_id=run_id).pending_approvals
                    ]
                }
            )
        )
    elif sys.argv[3] == "approve":  # then the script ends while the transfer runs
        print(json.dumps({"decided": outer.approve(run_id, sys.argv[4])["call_id"]}))
    else:
        print(json.dumps({"status": outer.run(WEATHER, run_id=run_id).status}))
elif command == "producer":
    # a background thread (not a daemon) makes calls with pauses longer than the exit
    # hook's IDLE_WAIT, after the main thread returned without joining it
    first = threading.Event()

    def producer() -> None:
        for i in range(2):
            status = agent.run(WEATHER, run_id=f"{run_id}-{i}").status
            print(json.dumps({"call": i, "status": status}), flush=True)
            first.set()
            time.sleep(3.0)
        print(json.dumps({"status": "completed"}), flush=True)

    threading.Thread(target=producer).start()
    first.wait(60)
elif command == "forgot_await":
    # an async tool returning its lookup's coroutine, the `await` forgotten

    async def lookup(city: str) -> str:
        await asyncio.sleep(0)
        return f"Sunny in {city}"

    @function_tool(name="get_weather")
    async def forgetful_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to look up.
        """
        return lookup(city)  # type: ignore[return-value]

    forgetful = plain_agent(tools=[forgetful_weather])
    result = forgetful.run(WEATHER, run_id=run_id)
    answers = [e.result for e in result.events if e.type == "tool_result"]
    print(json.dumps({"status": result.status, "answers": answers}))
elif command == "start":
    # started, then the script returns: nobody waits on the run
    print(json.dumps({"started": asyncio.run(agent.astart(WEATHER, run_id=run_id))}))
else:
    raise SystemExit(f"unknown command {command!r}")
sys.stdout.flush()
