"""The cost of durability, measured against two floors in one run.

    python bench/run.py            # full sizes, ~6-9 minutes on 2 cores
    python bench/run.py --smoke    # tiny sizes (the test suite runs this)

Writes bench/results/bench.json, docs/benchmarks.md (tables) and
docs/benchmarks.png (latency and throughput against concurrency). All
comparisons are ratios measured in this one run on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from agentor_temporal.connection import temporal_binary  # noqa: E402
from agentor_temporal.testing import ScriptedModelServer  # noqa: E402

from _common import machine, save, spawn_worker, summary, wait_ready  # noqa: E402
from scenarios import FloorA, FloorB, Ours, Scenario  # noqa: E402

TARGETS = {
    "latency_0ms_vs_floor_a": 1.3,
    "throughput_200_vs_floor_a": 0.8,
    "latency_200ms_vs_floor_b": 1.15,
}


def log(text: str) -> None:
    print(text, flush=True)


async def latency(scenario: Scenario, runs: int, warmup: int = 2) -> dict[str, float]:
    for i in range(warmup):
        await scenario.one(i)
    times = []
    for i in range(runs):
        start = time.perf_counter()
        await scenario.one(i)
        times.append((time.perf_counter() - start) * 1000)
    return summary(times)


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


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def in_flight(address: str, client: Any, runs: int, latency_s: float) -> dict[str, Any]:
    """`runs` runs at once on one worker process, model latency `latency_s`: RSS and outcome."""
    from weather_agent import weather

    queue = f"bench-1k-{uuid.uuid4().hex[:6]}"
    with ScriptedModelServer(latency=latency_s) as model:
        worker = spawn_worker(address, queue, model.base_url)
        try:
            wait_ready(worker)
            idle = rss_kb(worker.pid)
            weather.temporal = client
            weather.task_queue = queue
            peak = idle
            start = time.perf_counter()
            tasks = [
                asyncio.ensure_future(weather.arun(f"Weather in City{i}?")) for i in range(runs)
            ]
            while not all(t.done() for t in tasks):
                peak = max(peak, rss_kb(worker.pid))
                await asyncio.sleep(0.25)
            results = [t.result() for t in tasks]
            elapsed = time.perf_counter() - start
        finally:
            worker.terminate()
            worker.wait(60)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return {
        "runs": runs,
        "model_latency_s": latency_s,
        "statuses": statuses,
        "elapsed_s": elapsed,
        "worker_rss_idle_mb": idle / 1024,
        "worker_rss_peak_mb": peak / 1024,
        "model_requests": model.request_count,
    }


async def main(smoke: bool) -> dict[str, Any]:
    sizes = {
        "latency_runs": 3 if smoke else 30,
        "concurrency": [1, 3] if smoke else [1, 10, 50, 200, 500],
        "in_flight": 10 if smoke else 1000,
        "turns": [1, 2] if smoke else [1, 10, 50],
    }
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        ui=False,
        dev_server_extra_args=["--log-level", "error"],
    )
    client = env.client
    address = client.service_client.config.target_host
    out: dict[str, Any] = {
        "machine": machine(),
        "sizes": sizes,
        "command": "python bench/run.py" + (" --smoke" if smoke else ""),
    }
    try:
        for model_latency in (0.0, 0.2):
            log(f"== single-run latency, model latency {model_latency * 1000:.0f} ms")
            with ScriptedModelServer(latency=model_latency) as model:
                scenarios: list[Scenario] = [
                    FloorA(client),
                    FloorB(model.base_url),
                    Ours(client, model.base_url, mirror=False),
                    Ours(client, model.base_url, mirror=True),
                ]
                for scenario in scenarios:
                    async with scenario:
                        stats = await latency(scenario, sizes["latency_runs"])
                    out.setdefault("latency", {}).setdefault(f"{model_latency * 1000:.0f}ms", {})[
                        scenario.name
                    ] = stats
                    log(
                        f"  {scenario.name:32s} median {stats['median']:7.1f} ms  "
                        f"p95 {stats['p95']:7.1f} ms"
                    )
                    if isinstance(scenario, Ours) and scenario.mirror:
                        out["jsonl_bytes_per_run"] = scenario.jsonl_bytes()

        log("== throughput (runs/s) by concurrency, model latency 0 ms, one worker")
        with ScriptedModelServer() as model:
            scenarios = [
                FloorA(client),
                FloorB(model.base_url),
                Ours(client, model.base_url, mirror=False),
                Ours(client, model.base_url, mirror=True),
            ]
            for scenario in scenarios:
                async with scenario:
                    await throughput(scenario, 3, 6)  # warm up
                    for level in sizes["concurrency"]:
                        total = max(level, 6 if smoke else 60)
                        rate = await throughput(scenario, level, total)
                        out.setdefault("throughput", {}).setdefault(scenario.name, {})[
                            str(level)
                        ] = rate
                        log(f"  {scenario.name:32s} {level:4d} in flight: {rate:7.1f} runs/s")

        log(f"== {sizes['in_flight']} runs in flight on one worker process")
        out["in_flight"] = await in_flight(
            address, client, sizes["in_flight"], 0.5 if smoke else 2.0
        )
        log(f"  {out['in_flight']}")

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
    lat0 = out["latency"]["0ms"]
    lat200 = out["latency"]["200ms"]
    a, b = "floor A (bare engine)", "floor B (no durability)"
    result: dict[str, Any] = {}
    for mirror in ("off", "on"):
        ours = f"ours, FileStore mirror {mirror}"
        result[f"latency_0ms_vs_floor_a ({mirror})"] = lat0[ours]["median"] / lat0[a]["median"]
        result[f"latency_200ms_vs_floor_b ({mirror})"] = (
            lat200[ours]["median"] / lat200[b]["median"]
        )
        tp = out["throughput"]
        level = "200" if "200" in tp[a] else max(tp[a], key=int)
        result[f"throughput_{level}_vs_floor_a ({mirror})"] = tp[ours][level] / tp[a][level]
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
        log(f"  {name}: {value:.2f}")
