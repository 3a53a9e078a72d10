"""Simulator speed: requests simulated per wall second, and peak memory.

Workload (from the core issue): N requests of 512 input / 128 output tokens,
Poisson arrivals at 8 req/s, Llama-3-8B on an H100 roofline, continuous
batching. Also runs a smaller slice step by step and with skip-ahead, side by
side, and prints the speed-up ratio (timings on shared machines are noisy;
ratios measured in one run are the number to trust).

    python benchmarks/sim_speed.py                 # 100,000 requests
    python benchmarks/sim_speed.py --num-requests 1000000
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from sim import api
from sim.scenario import Scenario, scenario_from_dict


def scenario(num_requests: int, skip_ahead: bool = True) -> Scenario:
    return scenario_from_dict(
        {
            "name": "sim-speed",
            "model": "llama-3-8b",
            "hardware": "h100",
            "cost": {"kind": "roofline"},
            "scheduler": {"kind": "continuous"},
            "engine": {"skip_ahead": skip_ahead},
            "workload": {
                "kind": "synthetic",
                "num_requests": num_requests,
                "arrival": {"kind": "poisson", "rate_per_s": 8},
                "prompt_tokens": {"kind": "fixed", "tokens": 512},
                "output_tokens": {"kind": "fixed", "tokens": 128},
            },
        },
        "benchmarks/sim_speed.py",
    )


def timed(sc: Scenario) -> tuple[float, api.Result]:
    started = time.perf_counter()
    result = api.run(sc)
    return time.perf_counter() - started, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=100_000)
    parser.add_argument(
        "--compare-requests",
        type=int,
        default=5_000,
        help="requests in the skip-ahead vs step-by-step comparison",
    )
    args = parser.parse_args(argv)

    elapsed_s, result = timed(scenario(args.num_requests))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = len(result.requests)
    print(f"requests simulated      : {n}")
    print(f"simulated time (s)      : {result.summary['duration']:.1f}")
    print(f"engine steps            : {len(result.steps)}")
    print(f"wall time (s)           : {elapsed_s:.2f}")
    print(f"requests per wall second: {n / elapsed_s:,.0f}")
    print(f"peak memory (MB, RSS)   : {peak_mb:,.0f}")
    print(
        f"p99 TTFT / TPOT (ms)    : {result.summary['p99_ttft_ms']:.1f} / "
        f"{result.summary['p99_tpot_ms']:.2f}"
    )

    m = args.compare_requests
    fast_s, fast = timed(scenario(m, skip_ahead=True))
    slow_s, slow = timed(scenario(m, skip_ahead=False))
    same = (fast.requests["finish_s"] - slow.requests["finish_s"]).abs().max()
    print(
        f"skip-ahead vs step-by-step on {m} requests: {slow_s / fast_s:.1f}x faster "
        f"({fast_s:.2f} s vs {slow_s:.2f} s; max finish-time difference {same:.2e} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
