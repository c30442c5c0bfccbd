"""The cost of durability, measured against three floors in one run.

    python bench/run.py            # full sizes, ~12 minutes on quiet 2 cores
    python bench/run.py --smoke    # tiny sizes (the test suite runs this)

Floors: the bare engine (floor A), the same agent loop with no durability
(floor B), and Temporal's own OpenAI Agents integration (the peer), each on
the same dev server, model and worker count. Writes bench/results/bench.json,
docs/benchmarks.md (tables) and docs/benchmarks.png. All comparisons are
ratios measured in this one run on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentor_temporal.testing import ScriptedModelServer  # noqa: E402

from _common import dev_server, machine, rss_mb, save, spawn_worker, summary, wait_ready  # noqa: E402
from peer import Peer  # noqa: E402
from scenarios import FloorA, FloorB, Ours, Scenario  # noqa: E402

A, B, PEER = "floor A (bare engine)", "floor B (no durability)", Peer.name
PEER_LOCAL = "Temporal OpenAI Agents integration, local model activities"
OFF, ON = "ours, FileStore mirror off", "ours, FileStore mirror on"
LOCAL = "ours, FileStore mirror off, local model calls"
#: model requests one run needs (the seed's run: 2 generations)
REQUESTS_PER_RUN = 2

T = TypeVar("T")


def log(text: str) -> None:
    print(text, flush=True)


def scenarios(address: str, client: Any, model_url: str, smoke: bool = False) -> list[Scenario]:
    return [
        FloorA(client),
        FloorB(model_url),
        Peer(address, model_url),
        # the smoke test runs the harness, not the numbers: one peer set-up is enough
        *([] if smoke else [Peer(address, model_url, local=True)]),
        Ours(client, model_url, mirror=False),
        Ours(client, model_url, mirror=True),
        Ours(client, model_url, mirror=False, local=True),
    ]


async def latency_times(scenario: Scenario, runs: int, warmup: int = 2) -> list[float]:
    """Milliseconds of `runs` sequential runs, after `warmup` unmeasured ones."""
    for i in range(warmup):
        await scenario.one(i)
    times = []
    for i in range(runs):
        start = time.perf_counter()
        await scenario.one(i)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def latency(scenario: Scenario, runs: int, warmup: int = 2) -> dict[str, float]:
    return summary(await latency_times(scenario, runs, warmup))


async def interleaved(
    systems: list[Scenario], measure: Callable[[Scenario], Awaitable[T]]
) -> dict[str, list[T]]:
    """Measure every system twice: in the order given, then in reverse.

    The dev server slows as finished runs pile up in its database (measured:
    the same system's throughput at 100 in flight fell from 18.2 to 15.2
    runs/s over six rounds of 320 runs, server CPU per run 45 -> 61 ms), so
    in a fixed order whichever system comes later is measured on a slower
    server. Forward then reverse gives every system the same mean position.
    """
    out: dict[str, list[T]] = {}
    for order in (systems, systems[::-1]):
        for system in order:
            async with system:
                out.setdefault(system.name, []).append(await measure(system))
    return out


async def throughput(scenario: Scenario, concurrency: int, total: int) -> float:
    """Runs per second with `concurrency` runs in flight until `total` are done."""
    queue = list(range(total))
    start = time.perf_counter()

    async def lane() -> None:
        while queue:
            i = queue.pop()
            await scenario.one(i)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return total / (time.perf_counter() - start)


async def rate_and_requests(
    model: ScriptedModelServer, level: int, total: int, system: Scenario, warmup: int = 6
) -> tuple[float, float]:
    """Runs per second at `level` in flight, and model requests per run."""
    if warmup:
        await throughput(system, 3, warmup)
    before = model.request_count
    rate = await throughput(system, level, total)
    return rate, (model.request_count - before) / total


async def history_growth(
    client: Any, model_url_factory: Any, turns_list: list[int], result_kb: int
) -> list[dict[str, Any]]:
    """History events/bytes and JSONL bytes of one run as its turns grow."""
    import tempfile

    from agentor_temporal import Agentor, FileStore
    from agentor_temporal.activities.tooldef import function_tool
    from agentor_temporal.testing import CallTool, Reply
    from agentor_temporal.worker import build_worker

    payload = "x" * (result_kb * 1024)

    @function_tool
    def fetch(page: int) -> str:
        """Returns a big page."""
        return payload

    rows = []
    for turns in turns_list:
        script = [CallTool("fetch", {"page": t}) for t in range(turns - 1)] + [Reply("done")]
        with ScriptedModelServer(script) as model:
            store_dir = tempfile.mkdtemp()
            queue = f"bench-hist-{uuid.uuid4().hex[:6]}"
            agent = Agentor(
                name="Reader",
                model="m",
                tools=[fetch],
                base_url=model.base_url,
                api_key="bench",
                temporal=client,
                task_queue=queue,
                embedded_worker=False,
                max_turns=turns + 1,
                store=FileStore(store_dir),
            )
            async with build_worker(client, [agent], task_queue=queue):
                result = await agent.arun("read everything")
            history = await client.get_workflow_handle(result.run_id).fetch_history()
            jsonl = Path(store_dir, f"{result.run_id}.jsonl").stat().st_size
            rows.append(
                {
                    "turns": turns,
                    "status": result.status,
                    "history_events": len(history.events),
                    "history_bytes": sum(e.ByteSize() for e in history.events),
                    "jsonl_bytes": jsonl,
                }
            )
            log(
                f"  {turns:3d} turns: {rows[-1]['history_events']} history events, "
                f"{rows[-1]['history_bytes'] / 1e6:.2f} MB history, {jsonl / 1e6:.2f} MB JSONL"
            )
    return rows


async def in_flight(
    address: str,
    client: Any,
    runs: int,
    latency_s: float,
    local: bool = False,
    settle_s: float = 3.0,
) -> dict[str, Any]:
    """`runs` runs at once on one worker process, model latency `latency_s`.

    Reports the outcome, the model requests made (a run needs 2; more means
    live calls were timed out and asked again), and the worker's RSS idle, at
    its peak and once the runs have ended.
    """
    from weather_agent import weather

    queue = f"bench-flight-{uuid.uuid4().hex[:6]}"
    with ScriptedModelServer(latency=latency_s) as model:
        worker = spawn_worker(
            address, queue, model.base_url, BENCH_LOCAL_MODEL_CALLS="1" if local else "0"
        )
        try:
            wait_ready(worker)
            idle = rss_mb(worker.pid)
            weather.temporal = client
            weather.task_queue = queue
            peak = idle
            start = time.perf_counter()
            tasks = [
                asyncio.ensure_future(weather.arun(f"Weather in City{i}?")) for i in range(runs)
            ]
            while not all(t.done() for t in tasks):
                peak = max(peak, rss_mb(worker.pid))
                await asyncio.sleep(0.25)
            results = [t.result() for t in tasks]
            elapsed = time.perf_counter() - start
            # what the worker keeps once its runs are over (cache, buffers)
            await asyncio.sleep(settle_s)
            after = rss_mb(worker.pid)
        finally:
            worker.terminate()
            worker.wait(60)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return {
        "runs": runs,
        "local_model_calls": local,
        "model_latency_s": latency_s,
        "statuses": statuses,
        "elapsed_s": elapsed,
        "worker_rss_idle_mb": idle,
        "worker_rss_peak_mb": peak,
        "worker_rss_after_mb": after,
        "model_requests": model.request_count,
        "repeated_model_requests": model.request_count - REQUESTS_PER_RUN * runs,
    }


async def main(smoke: bool) -> dict[str, Any]:
    sizes = {
        "latency_runs": 3 if smoke else 30,
        # the smoke test runs the harness, not the numbers: one level is enough
        "concurrency": [3] if smoke else [1, 10, 100, 250],
        "in_flight": [10] if smoke else [100, 500, 1000],
        "turns": [1, 2] if smoke else [1, 10, 50],
        # the smoke test checks the harness, not the numbers: no unmeasured
        # warm-up runs, and a short settle before the in-flight RSS "after"
        "warmup": 0 if smoke else 2,
        "settle_s": 0.5 if smoke else 3.0,
    }
    out: dict[str, Any] = {
        "machine": machine(),
        "sizes": sizes,
        "command": "python bench/run.py" + (" --smoke" if smoke else ""),
        "load": {},
    }
    # the server as Temporal ships it, as other quickstarts run it
    log("== single-run latency on a stock dev server, model latency 0 ms")
    env = await dev_server(stock=True)
    try:
        address = env.client.service_client.config.target_host
        with ScriptedModelServer() as model:
            systems = [
                s for s in scenarios(address, env.client, model.base_url, smoke) if s.name != B
            ]
            halves = await interleaved(
                systems, lambda s: latency_times(s, sizes["latency_runs"] // 2, sizes["warmup"])
            )
            for name, (first, second) in halves.items():
                stats = summary(first + second)
                out.setdefault("latency_stock", {})[name] = stats
                log(f"  {name:36s} median {stats['median']:7.1f} ms")
    finally:
        await env.shutdown()

    env = await dev_server()
    client = env.client
    address = client.service_client.config.target_host
    try:
        for model_latency in (0.0, 0.2):
            key = f"{model_latency * 1000:.0f}ms"
            out["load"][f"latency {key}"] = os.getloadavg()[0]
            log(f"== single-run latency, model latency {key} (load {os.getloadavg()[0]:.2f})")
            with ScriptedModelServer(latency=model_latency) as model:
                systems = scenarios(address, client, model.base_url, smoke)
                halves = await interleaved(
                    systems, lambda s: latency_times(s, sizes["latency_runs"] // 2, sizes["warmup"])
                )
                for name, (first, second) in halves.items():
                    stats = summary(first + second)
                    out.setdefault("latency", {}).setdefault(key, {})[name] = stats
                    log(
                        f"  {name:36s} median {stats['median']:7.1f} ms  p95 {stats['p95']:7.1f} ms"
                    )
                for scenario in systems:
                    if isinstance(scenario, Ours) and scenario.mirror:
                        out["jsonl_bytes_per_run"] = scenario.jsonl_bytes()

        out["load"]["throughput"] = os.getloadavg()[0]
        log(
            f"== throughput (runs/s), model latency 0 ms, one worker "
            f"(load {os.getloadavg()[0]:.2f})"
        )
        with ScriptedModelServer() as model:
            systems = scenarios(address, client, model.base_url, smoke)
            for level in sizes["concurrency"]:
                total = max(2 * level, 6 if smoke else 60)
                passes = await interleaved(
                    systems,
                    functools.partial(
                        rate_and_requests, model, level, total, warmup=3 * sizes["warmup"]
                    ),
                )
                for name, measured in passes.items():
                    rate = sum(r for r, _ in measured) / len(measured)
                    per_run = sum(n for _, n in measured) / len(measured)
                    out.setdefault("throughput", {}).setdefault(name, {})[str(level)] = rate
                    if name != A:
                        out.setdefault("requests_per_run", {}).setdefault(name, {})[str(level)] = (
                            per_run
                        )
                    log(
                        f"  {name:36s} {level:4d} in flight: {rate:7.1f} runs/s "
                        f"({' and '.join(f'{r:.1f}' for r, _ in measured)}), "
                        f"{per_run:.2f} model requests per run"
                    )

        for runs in sizes["in_flight"]:
            out["load"][f"in flight {runs}"] = os.getloadavg()[0]
            log(f"== {runs} runs in flight on one worker process (load {os.getloadavg()[0]:.2f})")
            for local in (False, True):
                row = await in_flight(
                    address, client, runs, 0.5 if smoke else 2.0, local, sizes["settle_s"]
                )
                out.setdefault("in_flight", []).append(row)
                log(f"  {row}")

        log("== history growth with 10 KB tool results")
        out["history"] = await history_growth(client, None, sizes["turns"], 10)
    finally:
        from agentor_temporal._runtime import Runtime

        if Runtime._instance is not None:
            await asyncio.to_thread(Runtime._instance.stop_workers)
        await env.shutdown()
    out["ratios"] = ratios(out)
    return out


def ratios(out: dict[str, Any]) -> dict[str, Any]:
    """Every ratio the report judges, from this run's numbers."""
    lat0, lat200 = out["latency"]["0ms"], out["latency"]["200ms"]
    tp = out["throughput"]
    level = "100" if "100" in tp[A] else max(tp[A], key=int)
    result: dict[str, Any] = {"throughput_level": level}
    for mirror, ours in (("off", OFF), ("on", ON), ("local", LOCAL)):
        result[f"throughput vs peer ({mirror})"] = tp[ours][level] / tp[PEER][level]
        result[f"latency 0ms vs peer ({mirror})"] = lat0[ours]["median"] / lat0[PEER]["median"]
        result[f"latency 0ms vs stock peer ({mirror})"] = (
            lat0[ours]["median"] / out["latency_stock"][PEER]["median"]
        )
        result[f"latency 200ms vs floor B ({mirror})"] = (
            lat200[ours]["median"] / lat200[B]["median"]
        )
        result[f"latency 0ms vs floor A ({mirror})"] = lat0[ours]["median"] / lat0[A]["median"]
    if PEER_LOCAL in tp:  # the like-for-like pair: model calls as local activities on both sides
        result["throughput vs peer, local model activities (local)"] = (
            tp[LOCAL][level] / tp[PEER_LOCAL][level]
        )
        result["latency 0ms vs peer, local model activities (local)"] = (
            lat0[LOCAL]["median"] / lat0[PEER_LOCAL]["median"]
        )
        result["latency 200ms vs peer, local model activities (local)"] = (
            lat200[LOCAL]["median"] / lat200[PEER_LOCAL]["median"]
        )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="agentor-temporal benchmarks")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    args = parser.parse_args()
    started = time.perf_counter()
    results = asyncio.run(main(args.smoke))
    results["elapsed_s"] = time.perf_counter() - started
    path = save("bench-smoke" if args.smoke else "bench", results)
    log(f"saved {path}")
    from report import render

    render(results, smoke=args.smoke)
    log(f"total {results['elapsed_s']:.0f} s")
    for name, value in results["ratios"].items():
        log(f"  {name}: {value:.2f}" if isinstance(value, float) else f"  {name}: {value}")
