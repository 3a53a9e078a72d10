"""``servesim run``: simulate a scenario, print its summary, write its tables and figures."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.cli.figures import FigureWorker
    from sim.scenario import Scenario

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def _cmd_run(args: argparse.Namespace) -> int:
    from sim.cli.figures import FigureWorker, spare_core

    if args.trace_requests is not None and args.trace_requests < 1:
        raise ConfigError(f"--trace-requests: expected a positive count, got {args.trace_requests}")
    # The figure process forks first, before this one imports numpy, pandas and
    # the simulator (~0.7 s): it imports numpy and matplotlib (never pandas),
    # draws a first figure and makes the run's figures up to their data, on the
    # other core meanwhile, and is ready to draw by the time the summary is
    # printed (issue 16). Forked later it would still be importing matplotlib
    # then. A scenario or --out refused below ends it unused.
    fork = args.figure_process == "yes" or (args.figure_process == "auto" and spare_core())
    worker = FigureWorker.start() if fork else None
    if worker is None:
        return _run_and_write(args, None)
    with worker:  # a FigureError in it is a bug or a crash, not a user error: main says 1
        return _run_and_write(args, worker)


def _run_and_write(args: argparse.Namespace, worker: FigureWorker | None) -> int:
    """Check the scenario and --out, simulate, print the summary, write the files
    (the figures by ``worker`` when given)."""
    from sim import api
    from sim.metrics.out_path import check_out_dir
    from sim.metrics.report import all_rejected_error, format_summary_table, rejection_warning
    from sim.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set or ())
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    check_out_dir(out)  # before the work: a bad --out would lose it
    started = time.perf_counter()
    traced = (args.trace_requests or api.DEFAULT_TRACE_REQUESTS) if args.trace else None
    result = api.run(
        scenario,  # loaded once, above; relative paths in it from its folder, as api.run would
        base_dir=Path(args.scenario).parent,
        progress=not args.quiet,
        trace_requests=traced,
        source=str(Path(args.scenario)),
    )
    elapsed_s = time.perf_counter() - started
    nothing = all_rejected_error(result.raw.records)
    if nothing is not None and not args.allow_all_rejected:
        raise ConfigError(nothing)
    rejected = rejection_warning(result.raw.records)  # before any frame is built
    if rejected is not None:
        print(f"servesim: warning: {rejected}", file=sys.stderr)
    caveat = result.summary.get("model_caveat")
    if caveat is not None:
        print(f"servesim: warning: {caveat}", file=sys.stderr)
    print(format_summary_table(result.summary))
    auto = result.scenario.cost.kind == "auto"
    why = f" (cost: auto: {_auto_choice(result.scenario)})" if auto else ""
    # Flushed before the files are written (plots take longest): the user reads
    # the summary while they are drawn, even when stdout is a pipe.
    print(f"cost model: {result.summary['cost_model']}{why}", flush=True)
    if worker is None:
        paths = result.write(out, write_steps=args.write_steps, trace=args.trace)
    else:
        out.mkdir(parents=True, exist_ok=True)
        worker.submit(result.figure_job(out))  # drawn there while the tables are written here
        paths = result.write(out, write_steps=args.write_steps, trace=args.trace, plots=False)
        paths += worker.finish()
    accelerator = f" ({result.raw.accelerator})" if result.raw.accelerator else ""
    print(
        f"simulated {len(result.raw.records)} requests in {elapsed_s:.2f} s{accelerator};"
        f" wrote {len(paths)} files to {out}/"
    )
    return 0


def _auto_choice(scenario: Scenario) -> str:
    """What ``cost: auto`` priced the run from, or why not kernel tables (one line)."""
    from sim.api.build import model_for
    from sim.cost.config import auto_choice

    return auto_choice(model_for(scenario), scenario.hardware, scenario.parallelism)


def add_parsers(subparsers: Subparsers) -> None:
    """Register ``run``."""
    run = subparsers.add_parser("run", help="simulate a scenario and report latency metrics")
    run.add_argument("scenario", help="scenario YAML file, e.g. scenarios/chat.yaml")
    run.add_argument("--out", help="output folder (default: runs/<scenario name>)")
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set workload.arrival.rate_per_s=8 (repeatable)",
    )
    run.add_argument("--write-steps", action="store_true", help="also write the step log")
    run.add_argument(
        "--trace",
        action="store_true",
        help="also write trace.json (Perfetto / chrome://tracing): each request's phases "
        "and each replica's steps",
    )
    run.add_argument(
        "--trace-requests",
        type=int,
        metavar="N",
        help="requests in trace.json: the first N (default 100)",
    )
    run.add_argument(
        "--allow-all-rejected",
        action="store_true",
        help="write a run whose every request was rejected (an error otherwise: it measures "
        "nothing)",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--figure-process",
        choices=("auto", "yes", "no"),
        default="auto",
        help="draw the figures in a second process while the tables are written (Linux): "
        "yes, no, or auto (default): when a core is free",
    )
    run.set_defaults(handler=_cmd_run)
