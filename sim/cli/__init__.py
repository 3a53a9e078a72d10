"""``servesim``: the command line, a thin layer over ``sim.api``.

Every user error (a bad scenario, trace, option or artifact) is printed as one
line on stderr and exits with status 2; there is no traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.cli.figures import FigureWorker

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def _cmd_run(args: argparse.Namespace) -> int:
    from sim.cli.figures import FigureError, FigureWorker, spare_core

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
    try:
        with worker:
            return _run_and_write(args, worker)
    except FigureError as error:  # a bug or a crash there, not a user error: status 1
        print(f"servesim: error: {one_line(str(error))}", file=sys.stderr)
        return 1


def _run_and_write(args: argparse.Namespace, worker: FigureWorker | None) -> int:
    """Check the scenario and --out, simulate, print the summary, write the files
    (the figures by ``worker`` when given)."""
    from sim import api
    from sim.metrics.out_path import check_out_dir
    from sim.metrics.rejections import rejection_warning
    from sim.metrics.report import format_summary_table
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
    rejected = rejection_warning(result.raw.records)  # before any frame is built
    if rejected is not None:
        print(f"servesim: warning: {rejected}", file=sys.stderr)
    print(format_summary_table(result.summary))
    auto = result.scenario.cost.kind == "auto"
    why = " (cost: auto: kernel tables, else a calibrated artifact, else the roofline)"
    # Flushed before the files are written (plots take longest): the user reads
    # the summary while they are drawn, even when stdout is a pipe.
    print(f"cost model: {result.summary['cost_model']}{why if auto else ''}", flush=True)
    if worker is None:
        paths = result.write(out, write_steps=args.write_steps, trace=args.trace)
    else:
        out.mkdir(parents=True, exist_ok=True)
        worker.submit(result.figure_job(out))  # drawn there while the tables are written here
        paths = result.write(out, write_steps=args.write_steps, trace=args.trace, plots=False)
        paths += worker.finish()
    print(
        f"simulated {len(result.raw.records)} requests in {elapsed_s:.2f} s"
        f"{' (compiled loop)' if result.raw.compiled else ''}; wrote {len(paths)} files to {out}/"
    )
    return 0


RUN_HELP = "simulate a scenario and report latency metrics"


def _add_run(subparsers: Subparsers) -> None:
    run = subparsers.add_parser("run", help=RUN_HELP)
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
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--figure-process",
        choices=("auto", "yes", "no"),
        default="auto",
        help="draw the figures in a second process while the tables are written (Linux): "
        "yes, no, or auto (default): when a core is free",
    )
    run.set_defaults(handler=_cmd_run)


def _add_calibrate(subparsers: Subparsers) -> None:
    try:
        from calibration.cli import add_parser
    except ImportError:
        return
    add_parser(subparsers)


def _add_planning(subparsers: Subparsers) -> None:
    from sim.planning.cli import add_parsers  # capacity, sweep (issue 6)

    add_parsers(subparsers)


def _add_measure(subparsers: Subparsers) -> None:
    from calibration.serve_cli import add_parsers  # measure, validate (issue 4)

    add_parsers(subparsers)


def _add_serve(subparsers: Subparsers) -> None:
    from calibration.serve_http_cli import add_parser  # serve (issue 13)

    add_parser(subparsers)


def _add_validation(subparsers: Subparsers) -> None:
    from sim.validation.cli import add_parsers  # import-run

    add_parsers(subparsers)


# Subcommands whose own parser lives in sim.cost.kernels: name -> (help, module.function
# there that parses and runs the rest of the line). main() hands the line over
# before parsing; they are registered only so that --help lists them.
FORWARDED: dict[str, tuple[str, str]] = {
    "import-profile": (
        "turn an LLMServingSim per-layer GPU profile into a kernel-table artifact",
        "llmservingsim.main",
    ),
    "export-kernels": (
        "cut a model's kernel tables out of aiconfigurator-core's database into an artifact",
        "slice.export_main",
    ),
}


def _add_forwarded(subparsers: Subparsers) -> None:
    for name, (help_text, _) in FORWARDED.items():
        subparsers.add_parser(name, help=help_text, add_help=False)


Adder = Callable[["Subparsers"], None]

# Each adder with the subcommands it registers and their one-line help, in the
# order --help lists them. Together the adders import numpy, pandas, pydantic
# and more (about a second): `servesim --help` needs only the names and help (a
# stub each), `servesim CMD` also the one adder of CMD (issue 16: instant help).
# tests/test_cli_startup.py checks these help lines against the adders' own.
COMMANDS: tuple[tuple[Adder, tuple[tuple[str, str], ...]], ...] = (
    (_add_run, (("run", RUN_HELP),)),
    (
        _add_calibrate,
        (("calibrate", "time a real model on this machine and fit a calibrated cost artifact"),),
    ),
    (
        _add_planning,
        (
            ("capacity", "highest load meeting SLOs, replicas and cost for a target rate"),
            ("sweep", "run a grid or list of scenario variants in parallel"),
        ),
    ),
    (
        _add_measure,
        (
            (
                "measure",
                "serve a scenario on the real model (PyTorch) and record latencies",
            ),
            ("validate", "simulate measured runs and report the prediction error"),
        ),
    ),
    (
        _add_serve,
        (
            (
                "serve",
                "serve a scenario's model on the reference engine as an OpenAI-compatible server",
            ),
        ),
    ),
    (
        _add_validation,
        (
            (
                "import-run",
                "convert a measured run (vllm bench serve, GuideLLM, vLLM OTLP spans, ...)",
            ),
        ),
    ),
    (_add_forwarded, tuple((name, help_text) for name, (help_text, _) in FORWARDED.items())),
)
ADDERS: list[Adder] = [add for add, _ in COMMANDS]


def _has_calibration() -> bool:
    """Whether the ``calibration`` package is importable (it is not in a sim-only install)."""
    return importlib.util.find_spec("calibration") is not None


def build_parser(command: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``servesim`` parser.

    With ``lazy=True`` only ``command``'s own adder runs (none when ``command``
    is None or unknown); every other subcommand is a stub that carries its name
    and help, enough for ``servesim --help`` and for argparse's choice check.
    """
    parser = argparse.ArgumentParser(
        prog="servesim",
        description="Discrete-event simulator of LLM inference serving.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add, names in COMMANDS:
        if not lazy or any(name == command for name, _ in names):
            add(subparsers)
            continue
        if add is _add_calibrate and not _has_calibration():
            continue
        for name, help_text in names:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    return f"servesim: warning: {message}\n"


def one_line(message: str) -> str:
    """``message`` with control characters escaped: a value a user typed (a ``--set``
    with a newline, a key holding a carriage return) cannot break the one-line error."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning  # users get one line, not a source dump
    line = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(line[0] if line else None, lazy=True)
    if line and line[0] in FORWARDED:
        module, function = FORWARDED[line[0]][1].split(".")
        forwarded = importlib.import_module(f"sim.cost.kernels.{module}")
        return int(getattr(forwarded, function)(line[1:]))
    args = parser.parse_args(line)
    try:
        return int(args.handler(args))
    except ConfigError as error:
        print(f"servesim: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
