"""Single-run latency of two builds of this package, in alternating rounds.

    python bench/builds_latency.py OLD_TREE NEW_TREE [--system local] [--rounds 10] [--runs 5]

The latency counterpart of `builds_ab.py`: two processes, each importing one
tree and running the system on its own dev server, stay up side by side; the
parent asks them in turn for `--runs` sequential runs each (a round), the
order alternating round by round, so both builds see the same load on a
shared machine. Prints each round's medians and then, per build, the median
of all runs with the spread of the round medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def child(tree: str, system: str, model_latency: float) -> None:
    import agentor_temporal

    if not Path(agentor_temporal.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"imported {agentor_temporal.__file__}, not the one in {tree}")
    sys.path.insert(0, str(HERE))
    from agentor_temporal.testing import ScriptedModelServer

    from _common import dev_server
    from scenarios import Ours

    loop = asyncio.get_running_loop()
    with ScriptedModelServer(latency=model_latency) as model:
        env = await dev_server()
        try:
            mirror, local = system == "mirror", system == "local"
            async with Ours(env.client, model.base_url, mirror=mirror, local=local) as scenario:
                for i in range(3):  # warm up
                    await scenario.one(i)
                print("@@ready", flush=True)
                while line := await loop.run_in_executor(None, sys.stdin.readline):
                    times = []
                    for i in range(int(line)):
                        start = time.perf_counter()
                        await scenario.one(i)
                        times.append((time.perf_counter() - start) * 1000)
                    print("@@" + json.dumps(times), flush=True)
        finally:
            await env.shutdown()


def _answer(proc: subprocess.Popen[str]) -> str:
    """The child's next answer (its lines marked `@@`; others are its logs)."""
    assert proc.stdout
    for line in proc.stdout:
        if line.startswith("@@"):
            return line[2:].strip()
    raise SystemExit(f"a child exited ({proc.wait()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--system", default="local")
    parser.add_argument("--model-latency", type=float, default=0.0, help="seconds")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5, help="sequential runs per build a round")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.old, args.system, args.model_latency))
        return
    procs = {}
    for build in ("old", "new"):
        tree = getattr(args, build)
        procs[build] = subprocess.Popen(
            [sys.executable, __file__, tree, tree, "--child", "--system", args.system]
            + ["--model-latency", str(args.model_latency)],
            env={**os.environ, "PYTHONPATH": tree},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    times: dict[str, list[float]] = {"old": [], "new": []}
    medians: dict[str, list[float]] = {"old": [], "new": []}
    try:
        for build, proc in procs.items():
            assert _answer(proc) == "ready", build
        for rnd in range(args.rounds):
            for build in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
                proc = procs[build]
                assert proc.stdin and proc.stdout
                proc.stdin.write(f"{args.runs}\n")
                proc.stdin.flush()
                got = json.loads(_answer(proc))
                times[build] += got
                medians[build].append(statistics.median(got))
            old, new = medians["old"][-1], medians["new"][-1]
            print(
                f"round {rnd + 1}: median ms old {old:.1f} new {new:.1f} ({new / old - 1:+.0%})"
                f"  (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    finally:
        for proc in procs.values():
            if proc.stdin:
                proc.stdin.close()
        for proc in procs.values():
            proc.wait(timeout=60)
    for build in ("old", "new"):
        m = medians[build]
        print(
            f"{build}: median {statistics.median(times[build]):.1f} ms over "
            f"{len(times[build])} runs; round medians {min(m):.1f}-{max(m):.1f}"
        )
    pairs = [n / o - 1 for o, n in zip(medians["old"], medians["new"], strict=True)]
    print(
        f"new vs old by round: median {statistics.median(pairs):+.1%}, "
        f"{min(pairs):+.0%} to {max(pairs):+.0%}, new higher in "
        f"{sum(p > 0 for p in pairs)} of {len(pairs)}"
    )


if __name__ == "__main__":
    main()
