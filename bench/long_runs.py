"""Long runs on default Temporal limits: hundreds of turns, bounded history.

    python bench/long_runs.py                      # 1000 x 1 KB, 300 x 10 KB, 30 x 100 KB
    python bench/long_runs.py --runs 300x10000     # one size: turns x tool-result bytes
    python bench/long_runs.py --smoke              # 40 x 2 KB with a 64 KB history budget
    python bench/long_runs.py --runs 300x10000 --store   # with a FileStore mirror
    python bench/long_runs.py --record-golden F    # with code that cannot continue-as-new:
                                                   # keep the history the 50 MB limit cut

Each run is one agent run on a fresh dev server with default limits: the
scripted model asks for `read_chunk` every turn (the tool answers with the
chosen number of bytes) until the turn budget is spent, then answers. The
worker is its own process, so its memory is measured alone. Reported per run:
status, executions (continue-as-new), history bytes and events per execution,
total history bytes, the wall time of a turn along the run (from one
generation's start to the next's), the worker's peak RSS, and the ledger
check (every tool call executed exactly once). Writes
bench/results/long_runs.json; `--markdown` prints the table for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client, WorkflowFailureError  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from agentor_temporal.connection import temporal_binary  # noqa: E402
from agentor_temporal.testing import CallTool, Reply, ScriptedModelServer  # noqa: E402
from agentor_temporal.workflows import TemporalStore  # noqa: E402

from _common import ROOT, drain, machine, save  # noqa: E402

PROMPT = "Work through the repository chunk by chunk."
DEFAULT_RUNS = ("1000x1000", "300x10000", "30x100000")


def log(text: str) -> None:
    print(text, flush=True)


def scripted(turns: int) -> Any:
    """The model: call `read_chunk` until `turns` results are in, then answer."""

    def respond(request: dict[str, Any]) -> Any:
        done = sum(1 for m in request.get("messages") or [] if m.get("role") == "tool")
        if done < turns:
            return CallTool("read_chunk", {"n": done + 1})
        return Reply(f"Read {done} chunks.")

    return respond


class Worker:
    """The worker process for the long agent, with its peak RSS sampled."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        model_url: str,
        env: dict[str, str],
        store: str | None = None,
    ):
        full = {**os.environ, **env}
        full.update(
            TEMPORAL_ADDRESS=address,
            OPENAI_BASE_URL=model_url,
            OPENAI_API_KEY="bench",
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "worker.py"),
                "--agents",
                "long_agents:coder",
                "--task-queue",
                task_queue,
                "--log-level",
                "WARNING",
                *(["--store", store] if store else []),
            ],
            env=full,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.peak_rss = 0
        self._stop = False

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if "worker ready" in line:
                drain(self.proc)
                return
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}")
        raise TimeoutError("worker did not become ready")

    def rss(self) -> int:
        """The worker's peak resident memory so far, in bytes (VmHWM)."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return self.peak_rss
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                self.peak_rss = max(self.peak_rss, int(line.split()[1]) * 1024)
        return self.peak_rss

    def stop(self) -> None:
        self.rss()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def executions(client: Client, run_id: str) -> list[dict[str, Any]]:
    """History bytes and events of each execution of the run, oldest first."""
    rows = []
    for segment in await TemporalStore(client).segments(run_id):
        handle = client.get_workflow_handle(run_id, run_id=segment.execution_run_id)
        info = (await handle.describe()).raw_description.workflow_execution_info
        rows.append(
            {
                "execution": segment.execution_run_id,
                "status": segment.status,
                "history_bytes": int(info.history_size_bytes),
                "history_events": int(info.history_length),
                "events": len(segment.events),
            }
        )
    return rows


def turn_times(events: list[Any]) -> list[float]:
    """Seconds from each generation's start to the next's (one per completed turn)."""
    starts = [e.started_at for e in events if e.type == "generation" and e.started_at]
    return [b - a for a, b in zip(starts, starts[1:], strict=False)]


def model_times(events: list[Any]) -> list[float]:
    """Seconds each generation took inside the `generate` activity (the model call)."""
    return [
        e.ended_at - e.started_at
        for e in events
        if e.type == "generation" and e.started_at and e.ended_at
    ]


def around(times: list[float], turn: int, width: int = 9) -> float:
    """Median turn time over `width` turns ending at `turn` (1-based): one turn is noisy."""
    window = times[max(turn - width, 0) : turn]
    return statistics.median(window) if window else float("nan")


async def one_run(
    turns: int,
    size: int,
    *,
    env: dict[str, str],
    golden: Path | None = None,
    store: bool = False,
) -> dict[str, Any]:
    """One long run on a fresh dev server; returns its measurements."""
    server = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=["--log-level", "error"],
        ui=False,
    )
    client = server.client
    address = client.service_client.config.target_host
    task_queue = f"long-{uuid.uuid4().hex[:8]}"
    run_id = f"long-{turns}x{size}-{uuid.uuid4().hex[:8]}"
    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedModelServer(scripted(turns), keep_requests=2) as model,
    ):
        ledger = Path(tmp) / "ledger.txt"
        worker = Worker(
            address,
            task_queue,
            model.base_url,
            {**env, "LONG_RUN_RESULT_BYTES": str(size), "LONG_RUN_LEDGER": str(ledger)},
            store=str(Path(tmp) / "runs") if store else None,
        )
        try:
            worker.wait_ready()
            started = time.perf_counter()
            handle = await client.start_workflow(
                "AgentRun",
                {"agent": "Long Coder", "input": PROMPT, "max_turns": turns + 1},
                id=run_id,
                task_queue=task_queue,
            )
            sampler = asyncio.create_task(_sample(worker))
            outcome: dict[str, Any] = {}
            try:
                outcome = await handle.result()
            except WorkflowFailureError as exc:
                outcome = {"status": "failed", "error": str(exc.cause or exc)}
            finally:
                sampler.cancel()
            wall = time.perf_counter() - started
            rss = worker.rss()
        finally:
            worker.stop()
        rows = await executions(client, run_id)
        events = await TemporalStore(client).aload(run_id)
        calls = Counter(ledger.read_text().split("\n")[:-1]) if ledger.exists() else Counter()
        jsonl = Path(tmp) / "runs" / f"{run_id}.jsonl"
        jsonl_bytes = jsonl.stat().st_size if jsonl.exists() else None
        if golden is not None:
            history = await client.get_workflow_handle(run_id).fetch_history()
            golden.write_bytes(gzip.compress(history.to_json().encode(), 9))
            log(f"golden history written to {golden} ({golden.stat().st_size:,} bytes)")
    await server.shutdown()
    times = turn_times(events)
    model_s = model_times(events)
    tool_results = [e for e in events if e.type == "tool_result"]
    marks = (10, 25, 50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 800, 900)
    curve_at = sorted({t for t in marks if t < len(times)})
    curve = {str(t): round(around(times, t) * 1000, 1) for t in curve_at}
    if times:
        curve[str(len(times))] = round(around(times, len(times)) * 1000, 1)
    return {
        "turns": turns,
        "result_bytes": size,
        "status": outcome.get("status"),
        "error": outcome.get("error"),
        "wall_s": round(wall, 1),
        "executions": rows,
        "max_history_bytes": max((r["history_bytes"] for r in rows), default=0),
        "total_history_bytes": sum(r["history_bytes"] for r in rows),
        "events": len(events),
        "tool_results": len(tool_results),
        "ledger_calls": sum(calls.values()),
        "ledger_twice": sorted(k for k, v in calls.items() if v > 1),
        "turn_ms": curve,
        "model_ms": {t: round(around(model_s, int(t)) * 1000, 1) for t in curve},
        "turn10_ms": curve.get("10"),
        "last_turn_ms": curve.get(str(len(times))) if times else None,
        "worker_peak_rss_mb": round(rss / 2**20, 1),
        "jsonl_bytes": jsonl_bytes,
    }


async def _sample(worker: Worker) -> None:
    while True:
        worker.rss()
        await asyncio.sleep(0.5)


def markdown(rows: list[dict[str, Any]], load: float | None = None) -> str:
    """The long-run section of docs/benchmarks.md."""
    lines = [
        "## Long runs on default Temporal limits\n",
        "`python bench/long_runs.py` (each run on its own dev server with default limits, "
        "the worker in its own process, one `read_chunk` call per turn, then an answer). "
        "History is per Temporal execution: a run continues as new between turns when the "
        "server suggests it (4 MB or 4,096 events) or past 8 MB. A turn's time runs from one "
        "generation's start to the next (median of the 9 turns ending there)"
        + (
            f"; measured with a load average of {load:.0f} on 2 cores (other work running), "
            "so single points are noisy.\n"
            if load is not None and load > 2
            else ".\n"
        ),
        "| turns x tool result | status | executions | history per execution (max) "
        "| total history | turn 10 | last turn | worker peak RSS | tools run once |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        once = r["ledger_calls"] == r["tool_results"] and not r["ledger_twice"]
        lines.append(
            f"| {r['turns']} x {r['result_bytes'] / 1000:g} KB | {r['status']} "
            f"| {len(r['executions'])} | {r['max_history_bytes'] / 1e6:.2f} MB "
            f"| {r['total_history_bytes'] / 1e6:.1f} MB | {r['turn10_ms']} ms "
            f"| {r['last_turn_ms']} ms | {r['worker_peak_rss_mb']:.0f} MB "
            f"| {'yes' if once else 'NO'} ({r['ledger_calls']} calls) |"
        )
    lines.append(
        "\nBefore continue-as-new and conversations by reference (the same script with "
        "`--record-golden`, which kept that history as a golden file): 300 x 10 KB was "
        "terminated by the 50 MB history limit at turn 98, at 52.7 MB in one execution, "
        "its turns slowing from 222 ms at turn 10 to 2,232 ms at turn 97."
    )
    for r in rows:
        lines.append(
            f"\nTurn time along the {r['turns']} x {r['result_bytes'] / 1000:g} KB run, in ms "
            "(`model`: the `generate` activity alone, which sends the whole conversation):\n"
        )
        marks = list(r["turn_ms"])
        lines.append("| turn | " + " | ".join(marks) + " |")
        lines.append("| --- |" + " --- |" * len(marks))
        lines.append("| ms | " + " | ".join(str(r["turn_ms"][m]) for m in marks) + " |")
        lines.append("| model | " + " | ".join(str(r["model_ms"][m]) for m in marks) + " |")
    return "\n".join(lines) + "\n"


def write_docs(section: str) -> Path:
    """Put the section in docs/benchmarks-long-runs.md and in docs/benchmarks.md."""
    docs = ROOT / "docs"
    (docs / "benchmarks-long-runs.md").write_text(section)
    page = docs / "benchmarks.md"
    text = page.read_text() if page.exists() else ""
    head = "## Long runs on default Temporal limits"
    if head in text:
        before, _, rest = text.partition(head)
        following = rest.find("\n## ")
        text = before + section + ("\n" + rest[following + 1 :] if following >= 0 else "")
    else:
        anchor = text.find("## What the numbers say")
        text = text[:anchor] + section + "\n" + text[anchor:] if anchor >= 0 else text + section
    page.write_text(text)
    return page


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="*", default=list(DEFAULT_RUNS), help="TURNSxBYTES")
    parser.add_argument("--smoke", action="store_true", help="one small run, small budget")
    parser.add_argument("--record-golden", type=Path, default=None)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--store", action="store_true", help="the worker mirrors into a FileStore")
    parser.add_argument(
        "--from-results", action="store_true", help="rewrite the docs from the last results"
    )
    args = parser.parse_args(argv)
    if args.from_results:
        data = json.loads((ROOT / "bench" / "results" / "long_runs.json").read_text())
        log(f"wrote {write_docs(markdown(data['runs'], data.get('load')))}")
        return
    env: dict[str, str] = {}
    runs = args.runs
    if args.smoke:
        runs = ["40x2000"]
        env["AGENTOR_HISTORY_BUDGET"] = "64000"
    if args.record_golden is not None:
        runs = runs if args.runs != list(DEFAULT_RUNS) else ["300x10000"]
    results = []
    load = os.getloadavg()[0]
    for spec in runs:
        turns, size = (int(x) for x in spec.lower().split("x"))
        log(f"run {turns} turns x {size:,} bytes ...")
        row = await one_run(turns, size, env=env, golden=args.record_golden, store=args.store)
        log(json.dumps({k: v for k, v in row.items() if k != "executions"}))
        results.append(row)
    if not args.smoke and args.record_golden is None:
        full = args.runs == list(DEFAULT_RUNS) and not args.store
        name = "long_runs" if full else "long_runs_extra"
        path = save(name, {"machine": machine(), "load": load, "runs": results})
        log(f"results: {path}")
        if full:
            log(f"wrote {write_docs(markdown(results, load))}")
    if args.markdown or not args.smoke:
        log(markdown(results, load))


if __name__ == "__main__":
    asyncio.run(main())
