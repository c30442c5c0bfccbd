"""CPU per run of two builds of this package, in alternating pairs of processes.

    python bench/builds_ab.py OLD_TREE NEW_TREE [--system mirror] [--pairs 5] [--runs 300]

`ab.py` compares systems within one process and build; a change to the
package itself needs two processes, each importing one tree (a checkout or
`git archive` of it). Each process starts its own dev server, runs the
system at 100 in flight (after a warm-up), and reports CPU per run: its own
(user and system, which includes the worker's core threads and the scripted
model) and its dev server's, with context switches. The pairs alternate
which build goes first. On a shared machine wall-clock throughput follows
the other tenants' load; CPU per run much less so, and a pair's two
processes share the conditions most closely.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def children_cpu() -> float:
    """CPU seconds of this process's direct children (its dev server)."""
    total, me, tick = 0.0, os.getpid(), os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == me:
            total += (int(stat[11]) + int(stat[12])) / tick
    return total


def switches() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_nvcsw + r.ru_nivcsw


async def child(tree: str, system: str, level: int, total: int) -> dict[str, float]:
    # the tree's package first: `run` puts this checkout's root on sys.path
    import agentor_temporal

    if not Path(agentor_temporal.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"imported {agentor_temporal.__file__}, not the one in {tree}")
    sys.path.insert(0, str(HERE))
    from run import throughput

    from agentor_temporal.testing import ScriptedModelServer

    from _common import dev_server
    from scenarios import Ours

    with ScriptedModelServer(latency=0) as model:
        env = await dev_server()
        try:
            mirror, local = system == "mirror", system == "local"
            async with Ours(env.client, model.base_url, mirror=mirror, local=local) as scenario:
                await throughput(scenario, level, level)  # warm up
                t0, server, ctx = os.times(), children_cpu(), switches()
                rate = await throughput(scenario, level, total)
                t1 = os.times()
                return {
                    "rate": rate,
                    "python": (t1.user + t1.system - t0.user - t0.system) / total * 1000,
                    "system": (t1.system - t0.system) / total * 1000,
                    "server": (children_cpu() - server) / total * 1000,
                    "switches": (switches() - ctx) / total,
                }
        finally:
            await env.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--system", default="mirror")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.old, args.system, args.in_flight, args.runs))))
        return
    for pair in range(args.pairs):
        got = {}
        for build in ("old", "new") if pair % 2 == 0 else ("new", "old"):
            tree = getattr(args, build)
            out = subprocess.run(
                [sys.executable, __file__, tree, tree, "--child", "--system", args.system]
                + ["--runs", str(args.runs), "--in-flight", str(args.in_flight)],
                env={**os.environ, "PYTHONPATH": tree},
                capture_output=True,
                text=True,
                check=True,
            )
            got[build] = json.loads(out.stdout.strip().splitlines()[-1])
        old, new = got["old"], got["new"]
        print(
            f"pair {pair + 1}: "
            + ", ".join(
                f"{key} {old[key]:.1f} -> {new[key]:.1f} ({new[key] / old[key] - 1:+.0%})"
                for key in ("python", "server", "switches", "rate")
            )
            + f"  (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
