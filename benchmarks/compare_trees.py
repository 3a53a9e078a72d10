"""CPU seconds of the Python path, two source trees side by side (for refactors).

    git worktree add /tmp/before <commit>
    python benchmarks/compare_trees.py /tmp/before . --rounds 3

Each round runs every workload once in a fresh process per tree, alternating
trees, and prints the CPU seconds (``time.process_time``) of ``api.run`` on
the Python path (one process, no compiled loop): wall time on a shared
machine swings by a third, CPU time measured alternately by a few per cent.
The workloads are ``benchmarks/sim_speed.py``'s, built by each tree's own
copy of that file: base (20,000 requests of 512/128 tokens at 8 req/s),
``chat.yaml`` at 25 req/s (10,000) and 16 round-robin replicas (10,000).
The last lines give each tree's median and the ratio of the second to the first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKLOADS = ("base", "chat25", "rep16")

# Run in a child whose sys.path starts at the tree: prints "name seconds" lines.
CHILD = """
import importlib.util, sys, time
root = sys.argv[1]
sys.path.insert(0, root)
spec = importlib.util.spec_from_file_location("bench", root + "/benchmarks/sim_speed.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
import sim
from sim import api
assert sim.__file__.startswith(root), sim.__file__
build = {
    "base": lambda: bench.scenario(20000),
    "chat25": lambda: bench.chat(10000, 25),
    "rep16": lambda: bench.replicas(10000),
}
for name in sys.argv[2].split(","):
    scenario = build[name]()
    started = time.process_time()
    api.run(scenario, workers=1, compiled=False)
    print(name, time.process_time() - started)
"""


def cpu_seconds(tree: Path, workloads: tuple[str, ...]) -> dict[str, float]:
    """One fresh process on ``tree``: each workload's CPU seconds."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), ",".join(workloads)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    return {
        name: float(value)
        for name, value in (line.split() for line in done.stdout.split("\n") if line)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "before", type=Path, help="the first tree (e.g. a worktree of the old commit)"
    )
    parser.add_argument("after", type=Path, help="the second tree")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument(
        "--only", choices=WORKLOADS, action="append", help="a workload (repeatable)"
    )
    args = parser.parse_args(argv)
    workloads = tuple(args.only or WORKLOADS)
    trees = (args.before.resolve(), args.after.resolve())
    seconds: dict[Path, dict[str, list[float]]] = {t: {w: [] for w in workloads} for t in trees}
    for round_number in range(1, args.rounds + 1):
        for tree in trees:
            for name, value in cpu_seconds(tree, workloads).items():
                seconds[tree][name].append(value)
            row = "  ".join(f"{w} {seconds[tree][w][-1]:.3f} s" for w in workloads)
            print(f"round {round_number} {tree}: {row}")
    for name in workloads:
        before, after = (statistics.median(seconds[t][name]) for t in trees)
        print(f"{name}: median {before:.3f} s -> {after:.3f} s, after/before {after / before:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
