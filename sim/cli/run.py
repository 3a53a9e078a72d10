"""``servesim run``: simulate a scenario, print its summary, write its tables and figures."""

from __future__ import annotations

import argparse

from sim.cli import HELP, Subparsers, add_scenario_arguments
from sim.cli.endpoint_options import add_profile_arguments
from sim.cli.figures import FigureWorker, spare_core
from sim.errors import ConfigError
from sim.metrics.out_path import out_argument


def _cmd_run(args: argparse.Namespace) -> int:
    if args.trace_requests is not None and args.trace_requests < 1:
        raise ConfigError(f"--trace-requests: expected a positive count, got {args.trace_requests}")
    if args.trace_requests is not None and not args.trace:
        raise ConfigError("--trace-requests applies only with --trace")  # it sizes trace.json
    # The figure process forks first, before this one imports the simulator (~0.7 s):
    # forked later it would still be importing matplotlib when the summary is printed.
    fork = args.figure_process == "yes" or (args.figure_process == "auto" and spare_core())
    worker = FigureWorker.start() if fork else None
    # Imported here, after the fork: the simulator (numpy, pydantic) loads meanwhile.
    from sim.cli.simulate import run_and_write

    if worker is None:
        return run_and_write(args, None)
    with worker:  # a FigureError in it is a bug or a crash, not a user error: main says 1
        return run_and_write(args, worker)


def add_parsers(subparsers: Subparsers) -> None:
    run = subparsers.add_parser("run", help=HELP["run"])
    add_scenario_arguments(run)
    run.add_argument(
        "--out", type=out_argument, help="output folder (default: runs/<scenario name>)"
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
    _add_bench_arguments(run)
    # GuideLLM's load profiles (docs/benchmark-tools.md), as measure --endpoint has them.
    add_profile_arguments(
        run.add_argument_group("GuideLLM's load profiles (drive the scenario's requests)")
    )
    run.set_defaults(handler=_cmd_run)


def _add_bench_arguments(run: argparse.ArgumentParser) -> None:
    """``vllm bench serve``'s flags (docs/benchmark-tools.md)."""
    bench = run.add_argument_group(
        "vllm bench serve's flags",
        "shortcuts for scenario keys, with vLLM's meaning (docs/benchmark-tools.md); "
        "each is the --set it stands for",
    )
    bench.add_argument(
        "--request-rate",
        type=float,
        metavar="R",
        help="requests per second (inf: all at once): workload.arrival.rate_per_s",
    )
    bench.add_argument(
        "--burstiness",
        type=float,
        metavar="B",
        help="gamma arrivals of shape B (1: Poisson): workload.arrival",
    )
    bench.add_argument(
        "--num-prompts", type=int, metavar="N", help="requests: workload.num_requests"
    )
    bench.add_argument(
        "--random-input-len",
        "--input-len",
        type=int,
        metavar="N",
        help="prompt tokens, as vLLM's random dataset: workload.prompt_tokens",
    )
    bench.add_argument(
        "--random-output-len",
        "--output-len",
        type=int,
        metavar="N",
        help="output tokens, as vLLM's random dataset: workload.output_tokens",
    )
    bench.add_argument(
        "--random-range-ratio",
        type=float,
        metavar="R",
        help="lengths uniform in [N (1 - R), N (1 + R)] (default 0: every length N)",
    )
    bench.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help="requests in flight at most, the rest wait at the client: workload.max_concurrency",
    )
    bench.add_argument(
        "--goodput",
        nargs="+",
        action="extend",
        metavar="NAME:MS",
        help="goodput's SLOs, e.g. --goodput ttft:500 tpot:50 (names ttft, tpot, e2el): "
        "replaces the scenario's slo",
    )
    bench.add_argument(
        "--percentile-metrics",
        metavar="LIST",
        help="metrics printed and saved with --save-result/--save-detailed, "
        "e.g. ttft,tpot,itl (default: ttft,tpot,itl,e2el)",
    )
    bench.add_argument(
        "--metric-percentiles",
        metavar="LIST",
        help="percentiles printed and in summary.json, e.g. 50,90,99 (default 90,99)",
    )
    bench.add_argument(
        "--save-result",
        metavar="FILE",
        help="also write vllm bench serve's result JSON (without per-request lists)",
    )
    bench.add_argument(
        "--save-detailed",
        metavar="FILE",
        help="also write vllm bench serve's detailed result JSON (--save-result "
        "--save-detailed: per-request lists); servesim import-run reads it",
    )
    bench.add_argument(
        "--save-trace",
        metavar="FILE",
        help="also write the requests as a trace: FILE.jsonl in GuideLLM's format "
        "(timestamp, input_length, output_length), FILE.csv in servesim's (with the "
        "hash ids of shared prefixes)",
    )
