"""Simulator speed: requests simulated per wall second, side by side, and peak memory.

Seven workloads in one run (issue 16's and 32's targets in brackets), each printed
with its ratio to the first (timings on shared machines are noisy; ratios measured
in one run are the numbers to trust):

- ``base``: N requests of 512 input / 128 output tokens, Poisson 8 req/s,
  Llama-3-8B on an H100 roofline, one replica (>= 60,000 req/s);
- ``base, kernels``: the same priced from the shipped H100 kernel tables
  (aiconfigurator's, ``kind: kernels``), as real-GPU capacity searches are
  (>= 100,000 req/s compiled);
- ``chat 8/s`` and ``chat 25/s``: ``scenarios/chat.yaml`` (lognormal lengths)
  at 8 and 25 req/s on the H100 roofline, which the compiled loop plays
  (cost flat in load: >= 30,000 req/s at 25 req/s);
- ``16 replicas``: ``scenarios/replicas.yaml`` with 16 replicas behind its
  round-robin router at 160 req/s (cost flat in cluster size: >= 20,000
  req/s), simulated as ``api.run`` does by default (the replicas dealt to
  one worker process per usable CPU, ``sim.fast.workers``) and in this
  process alone, side by side;
- ``chat 8/s, kernels``: the chat workload priced from measured kernel tables
  (the shipped RTX PRO 6000 / Llama-3.1-8B artifact, ``kind: kernels``).

Each workload runs twice, side by side: through the compiled loop
(``sim.fast.compiled``, numba; ``api.run(..., compiled=True)``) and through
the Python path (``compiled=False``), and the two runs' finish times must be identical.
The 16 replicas' "1 proc." row is the Python path in this process alone (the
compiled loop always runs every replica in this process). ``--loop`` picks
one. Each row also gives the engine plans per request (about one at each
arrival and one at each finish: the cost is per plan and per request, not per
token) and the CPU seconds of this process (on a busy machine they move less
than the wall's; worker processes' are not counted), and ``inv %``: the CPU
time of the invariants every run is checked against
(``sim.metrics.invariants.check_run``, timed again on the run's result) as a
share of the run's own (issue 39: within 5 %).

Then a smaller slice of ``base`` step by step and with skip-ahead, whose finish
times must agree exactly. Peak memory (RSS) is the process's high-water mark,
so run ``--only base`` for the memory of the base workloads.

    python benchmarks/sim_speed.py                       # 100,000 base requests
    python benchmarks/sim_speed.py --only base --num-requests 1000000 --loop compiled
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sim import api
from sim.fast.compiled import path
from sim.fast.workers import default_num_workers
from sim.metrics.invariants import check_run
from sim.scenario import Scenario, layered, load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent


def scenario(num_requests: int, skip_ahead: bool = True) -> Scenario:
    """The base workload (see the module's docstring)."""
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


def kernel_base(num_requests: int) -> Scenario:
    """The base workload priced from the shipped H100 kernel tables (the slice in
    sim/cost/kernels/artifacts: no aiconfigurator-core install needed)."""
    cost = {"kind": "kernels", "source": "path", "artifact": "h100_sxm-vllm-0.24.0-llama-3.1-8b"}
    return scenario_from_dict(
        {**scenario(num_requests).model_dump(), "cost": cost}, "benchmarks/sim_speed.py"
    )


def chat(num_requests: int, rate_per_s: float, *overrides: str) -> Scenario:
    """``scenarios/chat.yaml`` at ``rate_per_s`` on the roofline (its ``auto`` picks
    H100 kernel tables), and ``overrides`` (KEY=VALUE)."""
    defaults = [
        f"workload.num_requests={num_requests}",
        f"workload.arrival.rate_per_s={rate_per_s}",
        "cost.kind=roofline",
    ]
    return load_scenario(ROOT / "scenarios" / "chat.yaml", layered(defaults, overrides))


# The shipped RTX PRO 6000 / Llama-3.1-8B kernel tables (real-GPU predictions).
KERNEL_TABLES = (
    "hardware=rtx-pro-6000",
    "cost.kind=kernels",
    "cost.source=path",
    "cost.artifact=rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b",
)


def replicas(num_requests: int) -> Scenario:
    """``scenarios/replicas.yaml`` with 16 replicas at 160 req/s (its 4 at 40, scaled)."""
    return load_scenario(
        ROOT / "scenarios" / "replicas.yaml",
        [
            f"workload.num_requests={num_requests}",
            "workload.arrival.rate_per_s=160",
            "cluster.num_replicas=16",
        ],
    )


def timed(sc: Scenario, compiled: bool, workers: int | None = None) -> tuple[float, api.Result]:
    """``api.run`` of ``sc`` (``compiled``: through the compiled loop where it can
    play the run, at any size; else the Python path): wall seconds, result."""
    wall_s, _, result = timed_cpu(sc, compiled, workers)
    return wall_s, result


def timed_cpu(
    sc: Scenario, compiled: bool, workers: int | None = None
) -> tuple[float, float, api.Result]:
    """``timed``, and the CPU seconds of this process (not its workers'): on a
    busy shared machine they move less than wall seconds."""
    started, started_cpu = time.perf_counter(), time.process_time()
    result = api.run(sc, workers=workers, compiled=compiled)
    return time.perf_counter() - started, time.process_time() - started_cpu, result


def invariants_cpu_s(result: api.Result) -> float:
    """CPU seconds of ``check_run`` on ``result`` (the run paid them once already):
    the best of three, as a short timing on a busy machine is noisy."""
    raw, best = result.raw, float("inf")
    num_kv_blocks = int(result.summary["num_kv_blocks"])
    for _ in range(3):
        started = time.process_time()
        check_run(raw.records, raw.series, raw.num_sent, num_kv_blocks)
        best = min(best, time.process_time() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=100_000, help="base requests")
    parser.add_argument(
        "--other-requests",
        type=int,
        default=20_000,
        help="requests of each chat and replica workload (the replicas get twice as many)",
    )
    parser.add_argument(
        "--compare-requests",
        type=int,
        default=5_000,
        help="requests in the skip-ahead vs step-by-step comparison",
    )
    parser.add_argument(
        "--only", choices=["base"], help="run only the base workload (roofline and kernels)"
    )
    parser.add_argument(
        "--loop",
        choices=["both", "compiled", "python"],
        default="both",
        help="the compiled loop, the Python path, or both side by side (default)",
    )
    args = parser.parse_args(argv)
    n = args.other_requests
    # (label, scenario, workers for api.run (None: its default), processes the Python
    # path then uses, target)
    cases: list[tuple[str, Callable[[], Scenario], int | None, int, str]] = [
        ("base 512/128 at 8/s", lambda: scenario(args.num_requests), None, 1, ">= 60,000"),
        ("base, kernels", lambda: kernel_base(args.num_requests), None, 1, ">= 100,000"),
    ]
    if args.only is None:
        num_workers = default_num_workers(16, 2 * n)
        cases += [
            ("chat at 8/s", lambda: chat(n, 8), None, 1, ""),
            ("chat at 25/s", lambda: chat(n, 25), None, 1, ">= 30,000"),
            ("16 replicas", lambda: replicas(2 * n), None, num_workers, ">= 20,000"),
            ("16 replicas", lambda: replicas(2 * n), 1, 1, ""),
            ("chat 8/s, kernels", lambda: chat(n, 8, *KERNEL_TABLES), None, 1, ""),
        ]
    loops = {"both": [True, False], "compiled": [True], "python": [False]}[args.loop]
    if True in loops and path.compiled() is None:
        print("numba is not installed: the compiled rows take the Python path too")
    elif True in loops:  # numba's import and the cached compilation's load, once a process
        warm_s, _ = timed(scenario(100), True)
        print(f"compiled loop's start-up (numba import, cached compilation): {warm_s:.2f} s")
    # plans/req: engine plans (one time-series row each) per request: the cost is
    # per plan and per request, so this says how much work a request causes.
    print(
        f"{'workload':20s} {'loop':17s} {'requests':>9s} {'wall s':>7s} {'req/s':>8s} "
        f"{'ratio':>6s} {'plans/req':>9s} {'cpu s':>6s} {'inv %':>5s}  target"
    )
    first_rate = None
    for label, build, workers, processes, target in cases:
        finishes, rates = [], []
        for compiled in loops:
            if compiled and workers is not None:
                continue  # the compiled loop runs every replica in this process
            elapsed_s, cpu_s, result = timed_cpu(build(), compiled, workers)
            num = len(result.requests)
            rate = num / elapsed_s
            first_rate = first_rate or rate
            plans = len(result.timeseries) / num
            # (The compiled loop runs every replica in this process.)
            name = (
                "compiled"
                if result.raw.accelerator == "compiled loop"
                else f"Python, {processes} proc."
            )
            figures = f"{num:9,d} {elapsed_s:7.2f} {rate:8,.0f} {rate / first_rate:6.2f}"
            checks = 100 * invariants_cpu_s(result) / cpu_s if cpu_s > 0 else float("nan")
            figures += f" {plans:9.2f} {cpu_s:6.2f} {checks:5.1f}"
            print(f"{label:20s} {name:17s} {figures}  {target}")
            finishes.append(result.requests["finish_s"].to_numpy())
            rates.append(rate)
        if len(finishes) == 2:
            same = bool((finishes[0] == finishes[1]).all())
            print(
                f"{'':20s} compiled and Python finish times identical: {same}; "
                f"compiled / Python: {rates[0] / rates[1]:.1f}x"
            )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (MB, RSS, whole process): {peak_mb:,.0f}")

    m = args.compare_requests
    fast_s, fast = timed(scenario(m, skip_ahead=True), False)
    slow_s, slow = timed(scenario(m, skip_ahead=False), False)
    same_s = (fast.requests["finish_s"] - slow.requests["finish_s"]).abs().max()
    print(
        f"skip-ahead vs step-by-step on {m} requests (Python path): {slow_s / fast_s:.1f}x "
        f"faster ({fast_s:.2f} s vs {slow_s:.2f} s; max finish-time difference {same_s:.2e} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
