"""``servesim capacity``: the highest load that meets SLOs, and the fleet for a target rate."""

from __future__ import annotations

import argparse
import math
import time
import warnings
from typing import TYPE_CHECKING

from tqdm import tqdm

from sim.api.build import cost_model_for
from sim.cli import HELP, Subparsers, add_scenario_arguments, add_target_arguments, out_folder
from sim.cost.model_error import model_error_for
from sim.errors import ConfigError
from sim.metrics.out_path import out_argument
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import (
    Searcher,
    check_target_rate,
    require_targets,
    run_length_overrides,
    search,
    upper_bound_rate_per_s,
)
from sim.planning.capacity_report import (
    fleet_for,
    format_capacity,
    format_points,
    to_json,
    write_json,
)
from sim.planning.pricing import gpu_price_per_hour
from sim.planning.sweep_exec import check_executor
from sim.scenario import load_scenario

MAX_LOADS = 20
"""Default bound on a capacity search: this many loads, each under every seed."""

if TYPE_CHECKING:
    from sim.planning.capacity import CapacitySearch, LoadPoint


def _cmd_capacity(args: argparse.Namespace) -> int:
    targets = parse_targets(args.slo or [])
    require_targets(targets)  # before any work
    if args.gpu_price_per_hour is not None and not 0 < args.gpu_price_per_hour < math.inf:
        # inf would price every fleet at inf dollars (null in capacity.json)
        raise ConfigError(
            f"--gpu-price-per-hour must be > 0 and finite (USD), got {args.gpu_price_per_hour:g}"
        )
    if args.target_rate is not None:  # optional here: without it, no fleet
        check_target_rate(args.target_rate)
    run_length = run_length_overrides(args.scenario, args.set or [], args.num_requests)
    scenario = load_scenario(args.scenario, run_length.sets)
    if run_length.raised is not None:  # said before the runs: they take longer than asked
        print(run_length.raised)
    out = out_folder(args.out, scenario.name)
    check_executor("local", args.jobs, None)  # --jobs, before any work
    max_num_sims = args.max_sims if args.max_sims is not None else MAX_LOADS * args.seeds
    bar = tqdm(total=max_num_sims, desc="capacity", unit="sim", disable=args.quiet)

    def on_point(point: LoadPoint, result: CapacitySearch) -> None:
        bar.update(len(point.records))
        bar.set_postfix_str(f"{point.load:.4g} {result.knob.unit}: {point.status}")

    started = time.perf_counter()
    bound = upper_bound_rate_per_s(scenario, targets, args.seeds)
    searcher = Searcher(scenario, targets, args.seeds, args.jobs, on_point, bound)
    with bar:
        result = search(searcher, args.rel_width, max_num_sims)
        # The budget is an upper bound; a search that stops early ends its bar full.
        bar.total = bar.n
        bar.refresh()
    elapsed_s = time.perf_counter() - started
    price = gpu_price_per_hour(scenario.hardware.name, args.gpu_price_per_hour)
    per_replica = scenario.num_gpus  # one unit: the scenario's replicas, all of them
    fleet = fleet_for(result, args.target_rate, per_replica, price) if args.target_rate else None
    label = f"{scenario.name} ({scenario.model.name} on {scenario.hardware.name}, " + (
        f"{scenario.scheduler.kind})"
    )
    # The scenario's cost source, as its runs built it: its validated error. Built
    # again here, its warnings (extrapolated tables) were already said by the runs.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_error = model_error_for(cost_model_for(scenario))
    print(format_points(result))
    given = args.gpu_price_per_hour is not None
    print(format_capacity(result, label, fleet, per_replica, price, model_error, price_given=given))
    doc = to_json(result, fleet, label, model_error, run_length.raised, per_replica, price)
    path = write_json(doc, out)
    print(f"{result.num_sims} simulations in {elapsed_s:.1f} s; wrote {path}")
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("capacity", help=HELP["capacity"])
    add_scenario_arguments(p)
    add_target_arguments(p)
    p.add_argument("--seeds", type=int, default=3, help="seeds per load (default 3)")
    p.add_argument(
        "--gpu-price-per-hour",
        type=float,
        metavar="USD",
        help="price of one GPU-hour (default: approximate list price of the hardware)",
    )
    p.add_argument(
        "--num-requests",
        type=int,
        metavar="N",
        help="requests per simulation (default: the scenario's, at least 10000: shorter "
        "runs read capacity high); fewer is faster, noisier",
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
    p.add_argument(
        "--out", type=out_argument, help="folder for capacity.json (default: runs/<scenario name>)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_capacity)
