"""How a capacity search's answer moves with the requests per run (issue 39, item 24).

A finite run ends before a loaded server reaches its steady backlog, so its
tail latencies read low near saturation and a short run's capacity reads high.
This runs the README's search (scenarios/chat.yaml, ttft_p99_ms=500,
tpot_p99_ms=50) at several run lengths and prints each answer and interval.

    PYTHONPATH=. python benchmarks/capacity_length_bias.py [--lengths 1000 10000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import Searcher, search
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """Print capacity, interval and the length's caveats per run length."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "chat.yaml"))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--slo", nargs="+", default=["ttft_p99_ms=500", "tpot_p99_ms=50"])
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    targets = parse_targets(args.slo)
    for num in args.lengths:
        started = time.perf_counter()
        scenario = load_scenario(args.scenario, [f"workload.num_requests={num}"])
        searcher = Searcher(scenario, targets, args.seeds, args.jobs)
        res = search(searcher, 0.05, 20 * args.seeds)
        low, high = res.interval
        print(
            f"{num:>6} requests: capacity {res.estimate:.2f} req/s, interval "
            f"{low} .. {high}, bound by {res.binding}, {res.num_sims} sims in "
            f"{time.perf_counter() - started:.0f} s; caveats: {res.caveats}",
            flush=True,
        )


if __name__ == "__main__":
    main()
