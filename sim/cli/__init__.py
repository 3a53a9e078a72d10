"""``servesim``: the command line, a thin layer over ``sim.api``.

One module per subcommand (``COMMANDS``; ``calibrate``, ``measure`` and ``validate``
in ``calibration``, which may import torch), each with ``add_parsers(subparsers)``;
the options several share are declared here once. Every user error is one line
on stderr and exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from sim.cli.figures import FigureError
from sim.errors import ConfigError, InvariantError
from sim.metrics.out_path import check_out_dir

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
_FORWARDED_MODULE = ""  # COMMANDS' entry for FORWARDED: no module, stubs only
_CALIBRATE_MODULE = "calibration.cli"

# The module of each group of subcommands with their one-line help, in --help's
# order. The modules import numpy, pandas, pydantic and more (about a second):
# `servesim --help` needs only the names and help, `servesim CMD` the one module
# of CMD (issue 16: instant help).
COMMANDS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("sim.cli.run", (("run", "simulate a scenario and report latency metrics"),)),
    (
        _CALIBRATE_MODULE,
        (("calibrate", "time a real model on this machine and fit a calibrated cost artifact"),),
    ),
    (
        "sim.cli.capacity",
        (("capacity", "highest load meeting SLOs, replicas and cost for a target rate"),),
    ),
    ("sim.cli.sweep", (("sweep", "run a grid or list of scenario variants in parallel"),)),
    (
        "sim.cli.plan",
        (("plan", "cheapest GPU, TP, replicas and batch limits meeting SLOs at a target rate"),),
    ),
    (
        "calibration.serve_cli",
        (
            ("measure", "serve a scenario on the real model (PyTorch) and record latencies"),
            ("validate", "simulate measured runs and report the prediction error"),
        ),
    ),
    (
        "sim.cli.serve",
        (
            (
                "serve",
                "serve a scenario's model as an OpenAI-compatible server: "
                "on the reference engine, or its predicted GPU (--simulate)",
            ),
        ),
    ),
    (
        "sim.cli.import_run",
        (
            (
                "import-run",
                "convert a measured run (vllm bench serve, GuideLLM, vLLM OTLP spans, ...)",
            ),
        ),
    ),
    (
        "sim.cli.cost_breakdown",
        (
            (
                "cost-breakdown",
                "where one step's time goes, op by op, under a scenario's cost model",
            ),
        ),
    ),
    (
        "sim.lab.command",
        (
            (
                "lab",
                "a queueing lab in the browser: move the load and the engine's limits, "
                "watch the plots",
            ),
        ),
    ),
    (_FORWARDED_MODULE, tuple((name, help_text) for name, (help_text, _) in FORWARDED.items())),
)


HELP = {name: help_text for _, names in COMMANDS for name, help_text in names}
"""Each subcommand's one-line help, as --help lists it and its own parser says it."""

# What each module's add_parsers registers its subcommands on (a string: argparse's
# class is generic to type checkers only).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_scenario_arguments(
    parser: argparse.ArgumentParser, help_text: str = "scenario YAML file, e.g. scenarios/chat.yaml"
) -> None:
    """The scenario file a command reads, and ``--set KEY=VALUE``: a field of it
    overridden (``sim.scenario.apply_overrides``)."""
    parser.add_argument("scenario", help=help_text)
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set scheduler.max_num_seqs=128 (repeatable)",
    )


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``--slo NAME=MS`` (``sim.metrics.slo_targets.parse_targets`` reads them) and
    ``--target-rate R``: what a capacity search or a plan sizes a fleet for."""
    parser.add_argument(
        "--slo",
        action="append",
        metavar="NAME=MS",
        help="SLO target <metric>_<stat>_ms=<limit>, metric ttft|tpot|itl|e2el, "
        "stat mean|median|p90|p99, e.g. ttft_p99_ms=500 (repeatable)",
    )
    parser.add_argument(
        "--target-rate", type=float, metavar="R", help="traffic to size the fleet for (req/s)"
    )


def add_listen_arguments(parser: argparse.ArgumentParser, default_port: int) -> None:
    """``--host`` and ``--port``: where an HTTP face (``serve``, ``lab``) listens."""
    parser.add_argument("--host", default="127.0.0.1", help="(default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=port_number,
        default=default_port,
        help=f"(default {default_port}; 0 = any free port)",
    )


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 to 65535 (0: any free one), refused in one line."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: any free one), got {port}")
    return port


def out_folder(out: str | None, name: str) -> Path:
    """``--out``, else ``runs/<name>``: checked before the work (a bad --out would lose it)."""
    folder = Path(out) if out else Path("runs") / name
    check_out_dir(folder)
    return folder


def has_calibration() -> bool:
    """Whether the ``calibration`` package is importable (it is not in a sim-only install)."""
    return importlib.util.find_spec("calibration") is not None


def build_parser(command: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``servesim`` parser; with ``lazy=True`` only ``command``'s own module is
    imported, every other subcommand a stub with its name and help (enough for
    ``--help`` and argparse's choice check)."""
    parser = argparse.ArgumentParser(
        prog="servesim",
        description="Discrete-event simulator of LLM inference serving.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module, names in COMMANDS:
        if module == _CALIBRATE_MODULE and not has_calibration():
            continue
        if module and (not lazy or any(name == command for name, _ in names)):
            importlib.import_module(module).add_parsers(subparsers)
            continue
        for name, help_text in names:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def options_given(
    args: argparse.Namespace,
    add_options: Callable[[argparse.ArgumentParser], object],
    flags: Collection[str] | None = None,
) -> dict[str, Any]:
    """The options ``add_options`` adds (only ``flags``, where given) that ``args`` holds
    a value other than their default for, flag -> value in the order added: those the
    user gave, for a mode that reads none of them to refuse. The defaults are read from
    a parser ``add_options`` builds, never typed a second time; an option ``args`` lacks
    (a sim-only install has no torch options) is not given."""
    parser = argparse.ArgumentParser(add_help=False)
    add_options(parser)
    given: dict[str, Any] = {}
    for action in parser._actions:  # argparse lists a parser's options nowhere public
        flag = action.option_strings[-1] if action.option_strings else ""  # the long one
        default = parser.get_default(action.dest)
        value = getattr(args, action.dest, default)
        if flag and (flags is None or flag in flags) and value != default:
            given[flag] = value
    return given


def one_line(message: str) -> str:
    """``message`` with control characters escaped: a value a user typed (a ``--set``
    with a newline, a key holding a carriage return) cannot break the one-line error."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def error_line(error: Exception) -> str:
    """The one line a user gets for ``error`` (stderr, the lab's page)."""
    return f"servesim: error: {one_line(str(error))}"


def main(argv: Sequence[str] | None = None) -> int:
    # Users get one line, not a source dump.
    warnings.formatwarning = lambda message, *_, **__: f"servesim: warning: {message}\n"
    line = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(line[0] if line else None, lazy=True)
    try:
        if line and line[0] in FORWARDED:
            module, function = FORWARDED[line[0]][1].split(".")
            forwarded = importlib.import_module(f"sim.cost.kernels.{module}")
            # A plugin lookup: the function FORWARDED names in that module.
            return int(getattr(forwarded, function)(line[1:]))
        args = parser.parse_args(line)
        status = int(args.handler(args))
        sys.stdout.flush()  # here, where a closed pipe is caught below, not at exit
        return status
    except BrokenPipeError:
        # The reader went away (`servesim run ... | head`): what it did not read is
        # dropped, quietly (the Python docs' recipe: stdout onto devnull, or the
        # interpreter's own flush at exit fails again and prints a traceback).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ConfigError as error:
        print(error_line(error), file=sys.stderr)
        return 2
    except (FigureError, InvariantError) as error:  # a bug, not a user error: status 1
        print(error_line(error), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return 130
