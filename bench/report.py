"""Render benchmark results: docs/benchmarks.md tables and the PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT

A, B = "floor A (bare engine)", "floor B (no durability)"
OFF, ON = "ours, FileStore mirror off", "ours, FileStore mirror on"
ORDER = [A, B, OFF, ON]

INTRO = """# Benchmarks: the cost of durability

Every figure below comes from one run of `{command}` on one machine, so the
comparisons are ratios within that run (these machines are shared and noisy;
absolute times are reported but should not be compared across runs).

Each scenario runs the same agent: the seed's weather agent, 2 generations and
1 tool call per run, against the project's scripted OpenAI-compatible server,
with the client and one worker in the benchmark process:

- **Floor A, the bare engine**: a workflow of 3 empty activities on the same
  Temporal server (what any Temporal app pays for 3 steps).
- **Floor B, no durability**: the same agent loop (the same model request and
  tool code) run in-process, with no Temporal and no store.
- **Ours**: `Agentor.arun` running the `AgentRun` workflow, with the
  FileStore mirror off and on.

Machine: {cpus} CPUs, Python {python}, {platform}; load average at start
{load}. Took {elapsed:.0f} s.
"""


def fmt(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}"


def render(results: dict[str, Any], *, smoke: bool = False) -> Path:
    """Write the markdown report (and plot) and return the markdown path."""
    docs = RESULTS if smoke else ROOT / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    m = results["machine"]
    lines = [
        INTRO.format(
            command=results["command"],
            cpus=m["cpus"],
            python=m["python"],
            platform=m["platform"],
            load=", ".join(f"{x:.2f}" for x in m["loadavg_at_start"]),
            elapsed=results.get("elapsed_s", 0),
        )
    ]
    lines.append("## Targets\n")
    lines.append("| target | measured | met |")
    lines.append("| --- | --- | --- |")
    r = results["ratios"]
    checks = []
    for mirror in ("off", "on"):
        checks.append(
            (
                f"latency at model 0 ms, ours (mirror {mirror}) <= 1.3 x floor A",
                r[f"latency_0ms_vs_floor_a ({mirror})"],
                1.3,
                "le",
            )
        )
        level = next(k.split("_")[1] for k in r if k.startswith("throughput_"))
        checks.append(
            (
                f"throughput at {level} in flight, ours (mirror {mirror}) >= 0.8 x floor A",
                r[f"throughput_{level}_vs_floor_a ({mirror})"],
                0.8,
                "ge",
            )
        )
        checks.append(
            (
                f"latency at model 200 ms, ours (mirror {mirror}) <= 1.15 x floor B",
                r[f"latency_200ms_vs_floor_b ({mirror})"],
                1.15,
                "le",
            )
        )
    for label, value, bound, how in checks:
        ok = value <= bound if how == "le" else value >= bound
        lines.append(f"| {label} | {value:.2f} x | {'yes' if ok else '**no**'} |")
    flight = results["in_flight"]
    done = flight["statuses"].get("completed", 0)
    retried = max(0, flight["model_requests"] - 2 * flight["runs"])
    if done != flight["runs"]:
        met = "**no**"
    elif retried:
        met = f"**partly**: {retried} model calls were timed out while running and asked again"
    else:
        met = "yes"
    lines.append(
        f"| {flight['runs']} runs in flight on one worker complete, no timeouts | "
        f"{done}/{flight['runs']} completed | {met} |"
    )
    lines.append("")

    for key, title in (("0ms", "model latency 0 ms"), ("200ms", "model latency 200 ms")):
        lines.append(f"## Single-run latency, {title} ({results['sizes']['latency_runs']} runs)\n")
        lines.append("| scenario | median ms | p95 ms | mean ms |")
        lines.append("| --- | --- | --- | --- |")
        for name in ORDER:
            s = results["latency"][key][name]
            lines.append(f"| {name} | {fmt(s['median'])} | {fmt(s['p95'])} | {fmt(s['mean'])} |")
        lines.append("")

    levels = results["sizes"]["concurrency"]
    lines.append("## Throughput (runs per second, model latency 0 ms, one worker)\n")
    lines.append("| scenario | " + " | ".join(f"{n} in flight" for n in levels) + " |")
    lines.append("| --- |" + " --- |" * len(levels))
    for name in ORDER:
        row = results["throughput"][name]
        lines.append(f"| {name} | " + " | ".join(fmt(row[str(n)]) for n in levels) + " |")
    lines.append("")

    lines.append(f"## {flight['runs']} runs in flight on one worker process (model latency 2 s)\n")
    lines.append("| completed | elapsed | worker RSS idle | worker RSS peak | model requests |")
    lines.append("| --- | --- | --- | --- | --- |")
    lines.append(
        f"| {flight['statuses']} | {flight['elapsed_s']:.1f} s | "
        f"{flight['worker_rss_idle_mb']:.0f} MB | {flight['worker_rss_peak_mb']:.0f} MB | "
        f"{flight['model_requests']} |"
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
    for name in ORDER:
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
    xs = range(len(ORDER))
    for offset, key in ((-width / 2, "0ms"), (width / 2, "200ms")):
        medians = [results["latency"][key][n]["median"] for n in ORDER]
        p95 = [results["latency"][key][n]["p95"] for n in ORDER]
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
    left.set_xticklabels(["floor A", "floor B", "ours\n(no mirror)", "ours\n(FileStore)"])
    left.set_ylabel("ms per run (median, whisker = p95)")
    left.set_title("Single-run latency")
    left.grid(axis="y", alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
