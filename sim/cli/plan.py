"""``servesim plan``: the cheapest deployment meeting SLOs at a target rate, searched."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from sim.cli import HELP, Subparsers, add_scenario_arguments, add_target_arguments, out_folder
from sim.cli.sweep import add_executor_arguments
from sim.errors import ConfigError
from sim.metrics.out_path import out_argument
from sim.metrics.slo_targets import parse_targets
from sim.planning.plan import check_asks, plan
from sim.planning.plan_file import load_plan_config
from sim.planning.plan_plots import plan_caption, plot_plan
from sim.planning.plan_report import (
    best_scenario,
    format_best,
    format_table,
    to_json,
    write_outputs,
)
from sim.planning.pricing import parse_gpu_prices
from sim.planning.sweep_exec import check_executor
from sim.scenario import apply_overrides, load_scenario, read_yaml, set_keys

if TYPE_CHECKING:
    from sim.planning.plan import Outcome, PlanResult


def _cmd_plan(args: argparse.Namespace) -> int:
    targets = parse_targets(args.slo or [])
    check_asks(targets, args.target_rate, args.headroom)  # before any work
    for key in set_keys(args.set):
        if key in ("workload.num_requests", "workload.duration_s"):
            # sim.planning.plan.plan writes each run's num_requests over the scenario's.
            raise ConfigError(
                f"--set {key}: plan sizes each run itself (the SLO percentiles' need, or "
                "--num-requests / the plan file's num_requests); use --num-requests"
            )
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if args.executor == "ray" and args.workers is not None:
        raise ConfigError("--workers applies to --executor local (Ray places the tasks itself)")
    check_executor(args.executor, None, args.address)  # before any work
    prices = parse_gpu_prices(args.gpu_price or [])
    config = load_plan_config(args.plan)
    if args.num_requests is not None:
        if args.num_requests < 1:
            raise ConfigError(f"--num-requests must be >= 1, got {args.num_requests}")
        config = config.model_copy(update={"num_requests": args.num_requests})
    scenario = load_scenario(args.scenario, args.set or [])
    out = out_folder(args.out, f"{scenario.name}-plan")
    bar = tqdm(total=0, desc="plan", unit="config", disable=args.quiet, file=sys.stderr)

    def on_total(total: int) -> None:
        bar.total = total
        bar.refresh()

    def on_done(outcome: Outcome, result: PlanResult) -> None:
        bar.update()
        best = result.best
        cheapest = f"best ${best.usd_per_hour:.2f}/h" if best and best.usd_per_hour else "no fleet"
        bar.set_postfix_str(f"{cheapest}; {outcome.candidate.label}: {outcome.status}")

    with bar:
        result = plan(
            scenario,
            config,
            targets,
            args.target_rate,
            prices,
            args.workers,
            on_done,
            on_total,
            args.executor,
            args.address,
            args.headroom,  # None: each configuration's own model error
        )
    label = f"{scenario.name} ({scenario.model.name}, {Path(args.scenario).name})"
    roofline = config.cost_model == "roofline" or scenario.cost.kind == "roofline"
    doc = to_json(result, label, args.plan, "roofline" if roofline else "auto")
    source_doc = read_yaml(args.scenario, "scenario")
    apply_overrides(source_doc, args.set or [], args.scenario)
    best = best_scenario(result, scenario, source_doc)
    paths = write_outputs(doc, best, out)
    figure = plot_plan(result, out, plan_caption(result, scenario.name, scenario.model.name))
    if figure is not None:
        paths.append(figure)
    print(format_table(result))
    print(format_best(result))
    if args.headroom is not None:
        print(f"headroom: {args.headroom:.1f} % (--headroom) on every configuration")
    else:
        print(
            "headroom: each configuration sized for the target plus its own model error "
            "(the table's column; --headroom to set one)"
        )
    for caveat in doc.get("caveats", []):
        print(f"caveat: {caveat}")
    if result.warnings:  # once in all, not once per simulation
        count = len(result.warnings)
        more = f" (and {count - 1} more, listed in plan.json)" if count > 1 else ""
        print(f"servesim: warning: {result.warnings[0]}{more}", file=sys.stderr)
    where = (
        "a Ray cluster"
        if result.executor == "ray"
        else f"{result.workers} worker{'s' if result.workers > 1 else ''}"
    )
    requests = f"{result.num_requests}"
    if result.max_requests_per_run > result.num_requests:
        requests += f" to {result.max_requests_per_run} (where the served check needed more)"
    print(
        f"{doc['num_configurations']} configurations ({doc['num_searched']} searched, "
        f"{doc['num_skipped']} skipped, {doc['num_refused']} refused), "
        f"{doc['num_simulations']} simulations of {requests} requests x "
        f"{result.seeds} seeds per load, in {result.wall_s:.1f} s on {where}; "
        f"wrote {', '.join(str(p) for p in paths)}"
    )
    if result.best is None:
        slo = ", ".join(str(t) for t in targets)
        searched = len(result.searched)
        raise ConfigError(
            f"no configuration meets the SLOs ({slo}) at any load: {searched} searched, the "
            "rest skipped or refused (reasons above and in plan.json); loosen an SLO or add GPUs"
        )
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("plan", help=HELP["plan"])
    add_scenario_arguments(p, "scenario YAML file (its model and workload)")
    add_target_arguments(p)
    p.add_argument(
        "--headroom",
        type=float,
        metavar="PCT",
        help="size the fleet for the target rate plus this many percent (default: the "
        "validated model error of the cost source, the larger of its TTFT and TPOT p50 "
        "errors; 0 where none is validated)",
    )
    p.add_argument("--plan", metavar="FILE", help="plan file: the search space (default: built in)")
    p.add_argument(
        "--gpu-price",
        action="append",
        metavar="NAME=USD",
        help="price of one GPU-hour for a GPU, e.g. h100=2.5 (repeatable; default: "
        "approximate list prices)",
    )
    p.add_argument(
        "--num-requests",
        type=int,
        metavar="N",
        help="requests per run at the start of each search (default: the plan file's "
        "num_requests, else the fewest the SLO percentiles need; longer where the served "
        "check needs it)",
    )
    p.add_argument("--workers", type=int, help="processes searching configurations (default: CPUs)")
    add_executor_arguments(p)  # the sweep's executors
    p.add_argument(
        "--out", type=out_argument, help="output folder (default: runs/<scenario name>-plan)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_plan)
