"""``servesim sweep``: run a grid or list of scenario variants, in parallel, with a cache."""

from __future__ import annotations

import argparse
import sys
import time

from sim.cli import HELP, Subparsers, out_folder
from sim.metrics.out_path import out_argument
from sim.planning.sweep import load_sweep, run_sweep, write_table
from sim.planning.sweep_exec import check_executor
from sim.planning.sweep_plots import plot_sweep
from sim.planning.sweep_report import format_report, per_point


def _cmd_sweep(args: argparse.Namespace) -> int:
    plan = load_sweep(args.sweep)
    check_executor(args.executor, args.jobs, args.address)  # before the banner and the work
    out = out_folder(args.out, plan.name)  # an earlier sweep's cache there is reused
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


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executor`` and ``--address``: where a sweep's (or a plan's) runs go."""
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local processes (default) or a Ray cluster",
    )
    parser.add_argument("--address", help="Ray cluster address (default: start a local Ray)")


def add_parsers(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("sweep", help=HELP["sweep"])
    p.add_argument("sweep", help="sweep YAML file, e.g. scenarios/sweep_chat.yaml")
    p.add_argument("--out", type=out_argument, help="output folder (default: runs/<sweep name>)")
    add_executor_arguments(p)
    p.add_argument("--jobs", type=int, help="local worker processes (default: CPU count)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_sweep)
