"""``servesim capacity`` and ``servesim sweep``: argument parsing and handlers.

Only argparse is imported at start-up; the simulator, pandas and matplotlib
are imported when a handler runs, so ``servesim --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError

MAX_LOADS = 20
"""Default bound on a capacity search: this many loads, each under every seed."""

if TYPE_CHECKING:
    from sim.planning.capacity import CapacitySearch, LoadPoint

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def _size_overrides(path: str, sets: list[str], num_requests: int | None) -> list[str]:
    """``--num-requests`` as the override its workload kind needs."""
    if num_requests is None:
        return sets
    if num_requests < 1:
        raise ConfigError(f"--num-requests must be >= 1, got {num_requests}")
    from sim.scenario import load_scenario

    workload = load_scenario(path, sets).workload
    if workload.kind == "trace":
        return [*sets, f"workload.max_requests={num_requests}"]
    extra = [f"workload.num_requests={num_requests}"]
    if getattr(workload, "duration_s", None) is not None:
        extra.append("workload.duration_s=null")
    return [*sets, *extra]


def _cmd_capacity(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sim.metrics.out_path import check_out_dir
    from sim.metrics.slo_targets import parse_targets
    from sim.planning.capacity import Searcher
    from sim.planning.capacity_report import (
        fleet_for,
        format_capacity,
        format_points,
        to_json,
        write_json,
    )
    from sim.planning.capacity_search import search
    from sim.planning.pricing import gpu_price_per_hour, gpus_per_replica
    from sim.scenario import load_scenario

    targets = parse_targets(args.slo or [])
    if not targets:
        raise ConfigError("--slo: give at least one SLO target, e.g. --slo ttft_p99_ms=500")
    if args.gpu_price_per_hour is not None and not args.gpu_price_per_hour > 0:
        raise ConfigError("--gpu-price-per-hour must be > 0")
    if args.target_rate is not None and not args.target_rate > 0:
        raise ConfigError("--target-rate must be > 0 (requests per second)")
    scenario = load_scenario(
        args.scenario, _size_overrides(args.scenario, args.set or [], args.num_requests)
    )
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    check_out_dir(out)  # before the search: a bad --out would lose it
    jobs = args.jobs if args.jobs is not None else None
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    max_num_sims = args.max_sims if args.max_sims is not None else MAX_LOADS * args.seeds
    bar = tqdm(total=max_num_sims, desc="capacity", unit="sim", disable=args.quiet)

    def on_point(point: LoadPoint, result: CapacitySearch) -> None:
        bar.update(len(point.records))
        bar.set_postfix_str(f"{point.load:.4g} {result.knob.unit}: {point.status}")

    started = time.perf_counter()
    searcher = Searcher(scenario, targets, Path(args.scenario).parent, args.seeds, jobs, on_point)
    with bar:
        result = search(searcher, args.rel_width, max_num_sims)
        # The budget is an upper bound; a search that stops early ends its bar full.
        bar.total = bar.n
        bar.refresh()
    elapsed_s = time.perf_counter() - started
    price = gpu_price_per_hour(scenario.hardware.name, args.gpu_price_per_hour)
    per_replica = gpus_per_replica(scenario)
    fleet = fleet_for(result, args.target_rate, per_replica, price) if args.target_rate else None
    label = f"{scenario.name} ({scenario.model.name} on {scenario.hardware.name}, " + (
        f"{scenario.scheduler.kind})"
    )
    print(format_points(result))
    print(format_capacity(result, label, fleet, per_replica, price))
    path = write_json(to_json(result, fleet, label), out)
    print(f"{result.num_sims} simulations in {elapsed_s:.1f} s; wrote {path}")
    return 0


def _add_capacity(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "capacity", help="highest load meeting SLOs, replicas and cost for a target rate"
    )
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument(
        "--slo",
        action="append",
        metavar="NAME=MS",
        help="SLO target <metric>_<stat>_ms=<limit>, metric ttft|tpot|itl|e2el, "
        "stat mean|median|p90|p99, e.g. ttft_p99_ms=500 (repeatable)",
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds per load (default 3)")
    p.add_argument(
        "--target-rate", type=float, metavar="R", help="traffic to size a fleet for (req/s)"
    )
    p.add_argument(
        "--gpu-price-per-hour",
        type=float,
        metavar="USD",
        help="price of one GPU-hour (default: approximate list price of the hardware)",
    )
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario field")
    p.add_argument(
        "--num-requests",
        type=int,
        metavar="N",
        help="requests per simulation (default: the scenario's); fewer is faster, noisier",
    )
    p.add_argument(
        "--rel-width",
        type=float,
        default=0.05,
        help="stop when the interval is narrower than this fraction (default 0.05)",
    )
    p.add_argument(
        "--max-sims", type=int, help=f"simulations at most (default {MAX_LOADS} x seeds)"
    )
    p.add_argument("--jobs", type=int, help="processes for the seeds of a load (default: CPUs)")
    p.add_argument("--out", help="folder for capacity.json (default: runs/<scenario name>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_capacity)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.metrics.out_path import check_out_dir
    from sim.planning.sweep import load_sweep, run_sweep
    from sim.planning.sweep_exec import check_executor
    from sim.planning.sweep_plots import plot_sweep
    from sim.planning.sweep_report import format_report, per_point
    from sim.planning.sweep_table import write_table

    plan = load_sweep(args.sweep)
    out = Path(args.out) if args.out else Path("runs") / plan.name
    check_executor(args.executor, args.jobs, args.address)  # before the banner and the work
    check_out_dir(out)  # an earlier sweep's cache here is reused
    num_runs = sum(len(p.seeds) for p in plan.points)
    print(
        f"sweep {plan.name}: {len(plan.points)} points x seeds = {num_runs} runs -> {out}/",
        file=sys.stderr,
    )
    started = time.perf_counter()
    outcome = run_sweep(plan, out, args.executor, args.jobs, args.address, not args.quiet)
    elapsed_s = time.perf_counter() - started
    points = per_point(outcome.table, plan.targets, plan.override_keys)
    paths = write_table(outcome.table, out)
    points.to_csv(out / "points.csv", index=False)
    paths.append(out / "points.csv")
    paths += plot_sweep(points, outcome.table, plan.targets, plan.load_key, out)
    print(format_report(points, plan.targets, plan.override_keys))
    print(
        f"{outcome.num_computed} runs computed, {outcome.num_cached} from cache, "
        f"in {elapsed_s:.1f} s; wrote {len(paths)} files to {out}/"
    )
    return 0


def _add_sweep(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run a grid or list of scenario variants in parallel")
    p.add_argument("sweep", help="sweep YAML file, e.g. scenarios/sweep_chat.yaml")
    p.add_argument("--out", help="output folder (default: runs/<sweep name>)")
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local processes (default) or a Ray cluster",
    )
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--jobs", type=int, help="local worker processes (default: CPU count)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_sweep)


def add_parsers(subparsers: Subparsers) -> None:
    """Register ``capacity`` and ``sweep`` on the main parser."""
    _add_capacity(subparsers)
    _add_sweep(subparsers)
