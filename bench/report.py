"""Render benchmark results: docs/benchmarks.md tables and the PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT

#: model requests one run needs (the seed's run: 2 generations)
REQUESTS = 2

A, B = "floor A (bare engine)", "floor B (no durability)"
PEER = "Temporal OpenAI Agents integration"
PEER_LOCAL = "Temporal OpenAI Agents integration, local model activities"
OFF, ON = "ours, FileStore mirror off", "ours, FileStore mirror on"
LOCAL = "ours, FileStore mirror off, local model calls"
ORDER = [A, B, PEER, PEER_LOCAL, OFF, ON, LOCAL]
#: how the targets name each of our set-ups (the ratios' keys)
SETUPS = {"off": "ours (mirror off)", "on": "ours (mirror on)", "local": "ours (local model calls)"}
SHORT = {
    A: "floor A",
    B: "floor B",
    PEER: "OpenAI Agents\n(Temporal)",
    PEER_LOCAL: "OpenAI Agents\n(local model\nactivities)",
    OFF: "ours\n(no mirror)",
    ON: "ours\n(FileStore)",
    LOCAL: "ours\n(local model\ncalls)",
}

INTRO = """# Benchmarks: the cost of durability

Every figure below comes from one run of `{command}` on one machine, so the
comparisons are ratios within that run (these machines are shared and noisy;
absolute times are reported but should not be compared across runs).

Each scenario runs the same agent: the seed's weather agent, 2 generations and
1 tool call per run, against the project's scripted OpenAI-compatible server
(TCP_NODELAY), with the client and one worker in the benchmark process:

- **Floor A, the bare engine**: a workflow of 3 empty activities on the same
  Temporal server (what any Temporal app pays for 3 steps).
- **Floor B, no durability**: the same agent loop (the same model request and
  tool code) run in-process, with no Temporal and no store.
- **Temporal's OpenAI Agents integration** (`temporalio[openai-agents]`:
  temporalio-openai-agents with openai-agents), set up as its quickstart
  does: plugin on the client, worker in the same process with the SDK's
  default options, chat-completions model, tracing off, the tool an
  activity (`activity_as_tool`); `bench/peer.py`.
- **Ours**: `Agentor.arun` running the `AgentRun` workflow, with the
  FileStore mirror off and on, on a worker sized by `AgentorPlugin`; and
  with `local_model_calls=True` (mirror off), which asks the model in local
  activities inside the run's workflow tasks (README, "Local model calls").

Latency and throughput are measured in two passes, the systems in the order
above and then in reverse (latency: half the runs in each pass; throughput:
the mean of the two passes' rates): the dev server slows as finished runs
pile up in its database, so in one fixed order whichever system ran later
would be measured on a slower server.

The server is an in-memory `temporal server start-dev` with the search
attributes and dynamic config our embedded launcher sets (`dev_server_args()`
in `agentor_temporal/_dev_server.py`); one table repeats single-run latency on
the dev server as shipped, which is what the integration's quickstart runs.

Machine: {cpus} CPUs, Python {python}, {platform}; load average at start
{load}{loads}. Took {elapsed:.0f} s.
"""


def fmt(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}"


def _check(label: str, value: float, bound: float, how: str) -> str:
    ok = value <= bound if how == "le" else value >= bound
    return f"| {label} | {value:.2f} x | {'yes' if ok else '**no**'} |"


def present(results: dict[str, Any]) -> list[str]:
    """The systems this run measured, in report order (a smoke run skips one peer set-up)."""
    return [name for name in ORDER if name in results["throughput"]]


def render(results: dict[str, Any], *, smoke: bool = False) -> Path:
    """Write the markdown report (and plot) and return the markdown path."""
    docs = RESULTS if smoke else ROOT / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    m = results["machine"]
    loads = results.get("load", {})
    lines = [
        INTRO.format(
            command=results["command"],
            cpus=m["cpus"],
            python=m["python"],
            platform=m["platform"],
            load=", ".join(f"{x:.2f}" for x in m["loadavg_at_start"]),
            loads=(
                "; 1-minute load when each part began: "
                + ", ".join(f"{k} {v:.1f}" for k, v in loads.items())
                if loads
                else ""
            ),
            elapsed=results.get("elapsed_s", 0),
        )
    ]
    r = results["ratios"]
    level = r["throughput_level"]
    lines.append("## Targets\n")
    lines.append("| target | measured | met |")
    lines.append("| --- | --- | --- |")
    for row in results["in_flight"]:
        done = row["statuses"].get("completed", 0)
        extra = row["repeated_model_requests"]
        ok = done == row["runs"] and extra == 0
        mode = ", local model calls" if row.get("local_model_calls") else ""
        lines.append(
            f"| {row['runs']} runs in flight on one worker{mode}: all complete, no model call "
            f"asked twice | {done}/{row['runs']} completed, {row['model_requests']} model "
            f"requests for {REQUESTS * row['runs']} generations | {'yes' if ok else '**no**'} |"
        )
    per_run = results.get("requests_per_run", {})
    for name in (ON, OFF, LOCAL):
        if level in per_run.get(name, {}):
            value = per_run[name][level]
            lines.append(
                f"| {name}: model requests per run at {level} in flight = {REQUESTS} | "
                f"{value:.2f} | {'yes' if abs(value - REQUESTS) < 1e-9 else '**no**'} |"
            )
    for mirror in SETUPS:
        lines.append(
            _check(
                f"throughput at {level} in flight, {SETUPS[mirror]} >= 1.2 x the integration",
                r[f"throughput vs peer ({mirror})"],
                1.2,
                "ge",
            )
        )
    for mirror in SETUPS:
        lines.append(
            _check(
                f"latency at model 0 ms, {SETUPS[mirror]} <= 0.6 x the integration, same server",
                r[f"latency 0ms vs peer ({mirror})"],
                0.6,
                "le",
            )
        )
        lines.append(
            _check(
                f"latency at model 0 ms, {SETUPS[mirror]} <= 0.6 x the integration on "
                "the stock dev server (what each quickstart runs)",
                r[f"latency 0ms vs stock peer ({mirror})"],
                0.6,
                "le",
            )
        )
    for mirror in SETUPS:
        lines.append(
            _check(
                f"latency at model 200 ms, {SETUPS[mirror]} <= 1.15 x floor B",
                r[f"latency 200ms vs floor B ({mirror})"],
                1.15,
                "le",
            )
        )
    like = "peer, local model activities (local)"
    if f"throughput vs {like}" in r:
        lines.append(
            "| like for like, not a target: ours (local model calls) against the integration "
            "with its own local model activities (`use_local_activity=True`): throughput at "
            f"{level} in flight, latency at model 0 ms and at 200 ms | "
            f"{r[f'throughput vs {like}']:.2f}x, {r[f'latency 0ms vs {like}']:.2f}x, "
            f"{r[f'latency 200ms vs {like}']:.2f}x | reported |"
        )
    lines.append("")

    lines.append(
        f"## Single-run latency on the stock dev server, model latency 0 ms "
        f"({results['sizes']['latency_runs']} runs)\n"
    )
    lines.append("| scenario | median ms | p95 ms | mean ms |")
    lines.append("| --- | --- | --- | --- |")
    for name in present(results):
        s = results.get("latency_stock", {}).get(name)
        if s:
            lines.append(f"| {name} | {fmt(s['median'])} | {fmt(s['p95'])} | {fmt(s['mean'])} |")
    lines.append("")
    for key, title in (("0ms", "model latency 0 ms"), ("200ms", "model latency 200 ms")):
        lines.append(f"## Single-run latency, {title} ({results['sizes']['latency_runs']} runs)\n")
        lines.append("| scenario | median ms | p95 ms | mean ms |")
        lines.append("| --- | --- | --- | --- |")
        for name in present(results):
            s = results["latency"][key][name]
            lines.append(f"| {name} | {fmt(s['median'])} | {fmt(s['p95'])} | {fmt(s['mean'])} |")
        lines.append("")

    levels = results["sizes"]["concurrency"]
    lines.append("## Throughput (runs per second, model latency 0 ms, one worker)\n")
    lines.append("| scenario | " + " | ".join(f"{n} in flight" for n in levels) + " |")
    lines.append("| --- |" + " --- |" * len(levels))
    for name in present(results):
        row = results["throughput"][name]
        lines.append(f"| {name} | " + " | ".join(fmt(row[str(n)]) for n in levels) + " |")
    lines.append("")
    lines.append("Model requests per run at each level (a run needs 2):\n")
    lines.append("| scenario | " + " | ".join(f"{n} in flight" for n in levels) + " |")
    lines.append("| --- |" + " --- |" * len(levels))
    for name in present(results):
        row = per_run.get(name)
        if row:
            lines.append(f"| {name} | " + " | ".join(fmt(row[str(n)], 2) for n in levels) + " |")
    lines.append("")

    latency_s = results["in_flight"][0]["model_latency_s"]
    lines.append(f"## Runs in flight on one worker process (model latency {latency_s:g} s)\n")
    lines.append(
        "| runs | model calls | completed | elapsed | model requests | worker RSS idle | peak | "
        "per run in flight | after the runs end |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in results["in_flight"]:
        per = (row["worker_rss_peak_mb"] - row["worker_rss_idle_mb"]) / row["runs"] * 1024
        how = "local" if row.get("local_model_calls") else "activities"
        lines.append(
            f"| {row['runs']} | {how} | {row['statuses'].get('completed', 0)} | "
            f"{row['elapsed_s']:.1f} s | "
            f"{row['model_requests']} | {row['worker_rss_idle_mb']:.0f} MB | "
            f"{row['worker_rss_peak_mb']:.0f} MB | {per:.0f} KB | "
            f"{row['worker_rss_after_mb']:.0f} MB |"
        )
    lines.append("")

    lines.append("## History and log size per run as turns grow (10 KB tool results)\n")
    lines.append("| turns | history events | history bytes | JSONL bytes |")
    lines.append("| --- | --- | --- | --- |")
    for row in results["history"]:
        lines.append(
            f"| {row['turns']} | {row['history_events']} | {row['history_bytes']:,} | "
            f"{row['jsonl_bytes']:,} |"
        )
    jsonl = results.get("jsonl_bytes_per_run")
    if jsonl:
        lines.append(f"\nThe seed's 2-generation run writes {jsonl:,.0f} bytes of JSONL.")
    lines.append("")
    long_runs = ROOT / "docs" / "benchmarks-long-runs.md"  # bench/long_runs.py writes it
    if long_runs.exists() and not smoke:
        lines.append(long_runs.read_text())
    notes = ROOT / "docs" / "benchmarks-notes.md"
    if notes.exists():
        lines.append(notes.read_text())
    lines.append("![latency and throughput against concurrency](benchmarks.png)\n")
    md = docs / ("bench-smoke.md" if smoke else "benchmarks.md")
    md.write_text("\n".join(lines))
    plot(results, docs / ("bench-smoke.png" if smoke else "benchmarks.png"))
    return md


def plot(results: dict[str, Any], path: Path) -> None:
    """Latency per scenario and throughput against concurrency, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    levels = results["sizes"]["concurrency"]
    for name in present(results):
        row = results["throughput"][name]
        right.plot(levels, [row[str(n)] for n in levels], marker="o", label=name)
    right.set_xscale("log")
    right.set_yscale("log")  # floor B is ~10x the rest
    right.set_xlabel("runs in flight (one worker)")
    right.set_ylabel("runs per second")
    right.set_title("Throughput, model latency 0 ms")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    width = 0.38
    xs = range(len(present(results)))
    for offset, key in ((-width / 2, "0ms"), (width / 2, "200ms")):
        medians = [results["latency"][key][n]["median"] for n in present(results)]
        p95 = [results["latency"][key][n]["p95"] for n in present(results)]
        bars = left.bar([x + offset for x in xs], medians, width, label=f"model {key} (median)")
        left.errorbar(
            [x + offset for x in xs],
            medians,
            yerr=[[0] * len(p95), [p - m for p, m in zip(p95, medians, strict=True)]],
            fmt="none",
            ecolor="black",
            capsize=3,
            linewidth=0.8,
        )
        del bars
    left.set_xticks(list(xs))
    left.set_xticklabels([SHORT[n] for n in present(results)], fontsize=8)
    left.set_ylabel("ms per run (median, whisker = p95)")
    left.set_title("Single-run latency")
    left.grid(axis="y", alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
