"""The chaos soak: many runs of mixed shape while workers and the server are killed.

    python bench/soak.py                       # 300 runs (10-20 minutes on 2 cores)
    python bench/soak.py --short               # 24 runs, under a minute
    python bench/soak.py --runs 100 --seed 7 --json

A dev server on a database file, three worker processes (`python worker.py`
serving `soak_agents:soak` with a JSONL store), one scripted model, and an
approver in a process of its own. Each run has 1 to 8 turns; each tool turn
asks for 1 to 4 `work` calls at once, each sleeping up to 3 s, and some runs
ask for a `transfer` that waits for the approver (approved or denied by the
call id). Some runs are followed live by streaming followers that disconnect
and reattach. Meanwhile a random worker is SIGKILLed every 5 to 15 s and
restarted, one worker is SIGTERMed (it drains) and replaced, and the server
is SIGKILLed and restarted once on the same database.

At the end it checks the promise: every run reached a final status; every
tool call that completed executed exactly once, except calls in flight on a
worker that was killed or stopped (or while the server was down), which ran
again with the same idempotency key (counted); no completed call is missing
from the ledger (lost: 0); every JSONL log equals `TemporalStore.load`; each
follower saw exactly the run's log; and every model request beyond one per
turn belongs to a run that was in flight during a kill. Exits 1 if any check
fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak_processes import ROOT, Server, Workers  # noqa: E402
from temporalio.client import Client  # noqa: E402

from agentor_temporal import FileStore  # noqa: E402
from agentor_temporal.streaming import follow  # noqa: E402
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer  # noqa: E402
from agentor_temporal.workflows import TemporalStore  # noqa: E402

AGENT = "Soak Agent"


def log(text: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", flush=True)


# -- the runs and the model ----------------------------------------------------------------


@dataclass
class Shape:
    """What one run does: `turns` generations, tool turns of `parallel` calls."""

    turns: int
    parallel: int
    sleep_ms: int
    approval: bool
    followed: bool

    def prompt(self, run_id: str) -> str:
        return (
            f"soak {run_id} turns={self.turns} parallel={self.parallel} "
            f"sleep={self.sleep_ms} approval={int(self.approval)}"
        )


def plan(runs: int, rng: random.Random) -> dict[str, Shape]:
    """Run ids and shapes, reproducible from the seed."""
    shapes = {}
    for i in range(runs):
        shapes[f"soak-{i:04d}-{rng.randrange(16**6):06x}"] = Shape(
            turns=rng.randint(1, 8),
            parallel=rng.randint(1, 4),
            sleep_ms=rng.choice([0, 50, 200, 800, 1500, 3000]),
            approval=rng.random() < 0.25,
            followed=rng.random() < 0.2,
        )
    return shapes


class Model:
    """The scripted model: plays each run's shape, counting requests per (run, turn)."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()

    def __call__(self, request: dict[str, Any]) -> Any:
        messages = request.get("messages") or []
        prompt = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        words = prompt.split()
        run_id = words[1]
        shape = dict(w.split("=") for w in words[2:])
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        self.requests[(run_id, turn)] += 1
        if turn >= int(shape["turns"]) - 1:
            return Reply(f"{run_id} finished after {turn} tool turns.")
        calls = [
            CallTool("work", {"step": turn * 10 + j, "sleep_ms": int(shape["sleep"])})
            for j in range(int(shape["parallel"]))
        ]
        if turn == 0 and shape["approval"] == "1":
            calls.append(CallTool("transfer", {"amount": 100 + len(run_id)}))
        return calls


# -- followers -------------------------------------------------------------------------------


async def follower(client: Client, run_id: str, rng: random.Random) -> tuple[list[Any], int]:
    """Follow a run, disconnecting after a few events and reattaching where it left off."""

    async def history(segments: list[Any]) -> list[Any]:
        return [e for s in segments for e in s.events]

    seen: list[Any] = []
    reattached = 0
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        budget = rng.randint(1, 4)
        try:
            async for event in follow(client, run_id, after=len(seen), history_events=history):
                seen.append(event)
                if event.type == "run_end":
                    return seen, reattached
                budget -= 1
                if budget == 0:
                    break  # disconnect; reattach below
        except KeyError:
            pass  # not started yet
        except Exception as exc:  # the server restarting
            log(f"follower of {run_id}: {type(exc).__name__}: {exc}")
        reattached += 1
        await asyncio.sleep(rng.uniform(0.1, 1.5))
    return seen, reattached


# -- the soak --------------------------------------------------------------------------------


@dataclass
class Chaos:
    """What was done to the processes, and when (monotonic seconds)."""

    kills: list[tuple[float, int]] = field(default_factory=list)
    stops: list[tuple[float, int]] = field(default_factory=list)
    server_down: list[tuple[float, float]] = field(default_factory=list)
    #: the same, in epoch seconds (the ledger's clock)
    server_down_wall: list[tuple[float, float]] = field(default_factory=list)

    def times(self) -> list[float]:
        return [t for t, _ in self.kills + self.stops] + [a for a, _ in self.server_down]


async def result_of(client: Client, run_id: str) -> dict[str, Any]:
    """The run's outcome, waiting through server restarts."""
    while True:
        try:
            result: dict[str, Any] = await client.get_workflow_handle(run_id).result()
            return result
        except Exception as exc:
            if "failed" in type(exc).__name__.lower() and "Workflow" in type(exc).__name__:
                return {"status": "workflow_failed", "error": str(exc)}
            await asyncio.sleep(1)


async def soak(
    runs: int = 300,
    *,
    seed: int = 1,
    concurrency: int = 30,
    kill_every: tuple[float, float] = (5.0, 15.0),
    directory: Path | None = None,
) -> dict[str, Any]:
    """Run the soak; return its figures and the checks that failed (`problems`)."""
    rng = random.Random(seed)
    shapes = plan(runs, rng)
    own_tmp = None
    if directory is None:
        own_tmp = tempfile.TemporaryDirectory(prefix="soak-")
        directory = Path(own_tmp.name)
    (directory / "runs").mkdir(parents=True, exist_ok=True)
    server = Server(directory)
    server.start()
    model_calls = Model()
    chaos = Chaos()
    started_at: dict[str, float] = {}
    ended_at: dict[str, float] = {}
    outcomes: dict[str, dict[str, Any]] = {}
    follows: dict[str, tuple[list[Any], int]] = {}
    approver: subprocess.Popen[bytes] | None = None
    began = time.monotonic()
    try:
        client = await server.ready()
        with ScriptedModelServer(model_calls, keep_requests=0) as model:
            queue = f"soak-{seed}-{rng.randrange(16**6):06x}"
            workers = Workers(directory, server.address, model.base_url, queue)
            workers.start()
            approver = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "bench" / "soak_approver.py"),
                    server.address,
                    str(directory / "decisions.txt"),
                ],
                stdout=workers.log,
                stderr=workers.log,
            )
            slots = asyncio.Semaphore(concurrency)
            follower_tasks: list[asyncio.Task[None]] = []

            async def one(run_id: str, shape: Shape) -> None:
                async with slots:
                    started_at[run_id] = time.monotonic()
                    while True:
                        try:
                            await client.start_workflow(
                                "AgentRun",
                                {"agent": AGENT, "input": shape.prompt(run_id), "max_turns": 10},
                                id=run_id,
                                task_queue=queue,
                            )
                            break
                        except Exception as exc:
                            if "already" in str(exc).lower():
                                break  # started before a restart hid the answer
                            await asyncio.sleep(1)
                    if shape.followed:

                        async def watch() -> None:
                            follows[run_id] = await follower(client, run_id, rng)

                        follower_tasks.append(asyncio.create_task(watch()))
                    outcomes[run_id] = await result_of(client, run_id)
                    ended_at[run_id] = time.monotonic()

            tasks = [asyncio.create_task(one(r, s)) for r, s in shapes.items()]
            next_kill = time.monotonic() + rng.uniform(*kill_every)
            restart_at = max(runs // 4, 1)
            stop_at = max(runs * 3 // 5, 1)
            restarted = stopped = False
            last_report = 0.0
            while not all(t.done() for t in tasks):
                await asyncio.sleep(0.5)
                now = time.monotonic()
                workers.replace_exited()
                done = len(outcomes)
                if now >= next_kill:
                    index = rng.randrange(len(workers.procs))
                    pid = workers.signal(index, signal.SIGKILL)
                    chaos.kills.append((now, pid))
                    log(f"SIGKILL worker {pid}")
                    next_kill = now + rng.uniform(*kill_every)
                if not stopped and done >= stop_at:
                    stopped = True
                    pid = workers.signal(rng.randrange(len(workers.procs)), signal.SIGTERM)
                    chaos.stops.append((now, pid))
                    log(f"SIGTERM worker {pid} (it drains, then a new one starts)")
                if not restarted and done >= restart_at:
                    restarted = True
                    log("SIGKILL the Temporal server")
                    wall = time.time()
                    server.kill()
                    await asyncio.sleep(rng.uniform(1, 3))
                    server.start()
                    await server.ready()
                    chaos.server_down.append((now, time.monotonic()))
                    chaos.server_down_wall.append((wall, time.time()))
                    log("Temporal server restarted on the same database")
                if now - last_report >= 10:
                    last_report = now
                    log(
                        f"{done}/{runs} runs finished, {len(started_at) - done} in flight, "
                        f"{len(chaos.kills)} kills, {now - began:.0f} s"
                    )
            await asyncio.gather(*follower_tasks)
            workers.stop_all()
            duration = time.monotonic() - began
            figures = await check(
                client,
                directory,
                shapes,
                outcomes,
                follows,
                model_calls,
                workers,
                chaos,
                started_at,
                ended_at,
            )
    finally:
        if approver is not None and approver.poll() is None:
            approver.kill()
            approver.wait()
        server.stop()
        if own_tmp is not None:
            own_tmp.cleanup()
    figures.update(
        runs=runs,
        seed=seed,
        concurrency=concurrency,
        duration_s=round(duration, 1),
        kills=len(chaos.kills),
        sigterms=len(chaos.stops),
        server_restarts=len(chaos.server_down),
    )
    return figures


async def check(
    client: Client,
    directory: Path,
    shapes: dict[str, Shape],
    outcomes: dict[str, dict[str, Any]],
    follows: dict[str, tuple[list[Any], int]],
    model_calls: Model,
    workers: Workers,
    chaos: Chaos,
    started_at: dict[str, float],
    ended_at: dict[str, float],
) -> dict[str, Any]:
    """The invariants; a list of problems (empty when the promise held) and the figures."""
    problems: list[str] = []
    statuses = Counter(str(o.get("status")) for o in outcomes.values())
    for run_id in shapes:
        status = outcomes.get(run_id, {}).get("status")
        if status not in ("completed", "failed", "max_turns"):
            problems.append(f"run {run_id} did not reach a final status: {outcomes.get(run_id)}")

    # the ledger: executions per call, and whose re-runs they were
    executions: dict[tuple[str, str], list[tuple[str, int, float]]] = defaultdict(list)
    ledger = directory / "ledger.txt"
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        run_id, call_id, key, pid, _attempt, _tool, at = line.split()
        executions[(run_id, call_id)].append((key, int(pid), float(at)))
    reruns = Counter[str]()
    duplicates = 0
    for (run_id, call_id), runs_of in executions.items():
        if len({key for key, _, _ in runs_of}) != 1:
            problems.append(f"call {call_id} of {run_id} ran with different idempotency keys")
        for _, pid, at in runs_of[:-1]:  # every execution but the last was cut short
            cause = workers.ended.get(pid)
            if cause in ("killed", "stopped"):
                reruns[f"worker {cause}"] += 1
            elif any(down - 5 <= at <= up + 30 for down, up in chaos.server_down_wall):
                # in flight while the server was down: its completion had nowhere to go
                reruns["server restart"] += 1
            else:
                duplicates += 1
                problems.append(f"call {call_id} of {run_id} ran twice in live worker {pid}")

    # the logs: the mirror equals the record; every completed call ran; followers saw it all
    store = FileStore(directory / "runs")
    temporal = TemporalStore(client)
    lost = 0
    decisions = directory / "decisions.txt"
    denied = {
        tuple(line.split()[:2])
        for line in (decisions.read_text().splitlines() if decisions.exists() else [])
        if line.endswith(" deny")
    }
    events_total = generations = 0
    for run_id in shapes:
        record = await temporal.aload(run_id)
        mirror = store.load(run_id)
        events_total += len(record)
        if [e.to_dict() for e in mirror] != [e.to_dict() for e in record]:
            problems.append(
                f"the JSONL log of {run_id} differs from TemporalStore.load "
                f"({len(mirror)} vs {len(record)} events)"
            )
        for event in record:
            if event.type == "generation":
                generations += 1
            if event.type != "tool_result" or event.error:
                continue
            if (run_id, str(event.call_id)) in denied:
                continue
            if not executions.get((run_id, str(event.call_id))):
                lost += 1
                problems.append(f"call {event.call_id} of {run_id} has a result but never ran")
        if run_id in follows:
            seen, _ = follows[run_id]
            if [e.to_dict() for e in seen] != [e.to_dict() for e in record]:
                problems.append(f"the follower of {run_id} saw {len(seen)} of {len(record)} events")

    # model requests beyond one per turn: only in runs that were in flight during chaos
    extra = 0
    chaos_times = chaos.times()
    for (run_id, _turn), count in model_calls.requests.items():
        if count <= 1:
            continue
        extra += count - 1
        start, end = started_at.get(run_id, 0.0), ended_at.get(run_id, float("inf"))
        if not any(start - 1 <= t <= end for t in chaos_times):
            problems.append(f"{run_id} asked the model {count} times for one turn, with no kill")
    return {
        "statuses": dict(statuses),
        "events": events_total,
        "generations": generations,
        "model_requests": sum(model_calls.requests.values()),
        "extra_model_requests": extra,
        "tool_executions": sum(len(v) for v in executions.values()),
        "tool_calls": len(executions),
        "reruns": sum(reruns.values()),
        "reruns_by_cause": dict(reruns),
        "duplicates": duplicates,
        "lost": lost,
        "approvals_denied": len(denied),
        "followers": len(follows),
        "follower_reattaches": sum(r for _, r in follows.values()),
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--short", action="store_true", help="24 runs, under a minute")
    parser.add_argument(
        "--duration",
        type=float,
        help="pick the number of runs for about this many seconds (overrides --runs)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=30, help="runs in flight at most")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    runs, concurrency = (24, 12) if args.short else (args.runs, args.concurrency)
    if args.duration:
        # measured here: about 0.6 runs a second finish at 12-30 in flight
        runs = max(int(args.duration * 0.6), 10)
    result = asyncio.run(soak(runs, seed=args.seed, concurrency=concurrency))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            if key != "problems":
                print(f"{key}: {value}")
        for problem in result["problems"]:
            print(f"PROBLEM: {problem}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
