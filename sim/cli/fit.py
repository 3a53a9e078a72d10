"""``servesim calibrate --from-run``: fit a cost model to measured runs, torch-free.

``calibration.cli`` adds these options (``add_arguments``) to its parser and
hands a ``--from-run`` line here before it imports torch. This face parses and
prints; ``sim.validation.fit_runs`` replays the runs, fits and writes the
artifact (``sim.cost.fitted``, or ``sim.cost.fitted_cpu`` with ``--fit-kind
engine-cpu``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from sim.cli import options_given
from sim.errors import ConfigError
from sim.hardware.specs import ModelSpec, model_from_ref
from sim.metrics.out_path import check_out_file
from sim.scenario.strict_yaml import DuplicateKeyError, parse_yaml
from sim.validation.fit import (
    DEFAULT_CPU_FREE,
    DEFAULT_MAX_EVALUATIONS,
    ENGINE_CPU_PARAMETERS,
    FIT_MODES,
    WAY_IN,
    render,
)
from sim.validation.fit_runs import fit_and_save, replay_runs
from sim.validation.identify import free_parameters, identified_free


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``--from-run`` options to ``servesim calibrate``'s parser."""
    parser.add_argument(
        "--from-run",
        nargs="+",
        metavar="RUN",
        help=(
            "black-box calibration: fit an overhead and prefill / decode multipliers of a "
            "base cost model to these measured runs (any import-run format, measure "
            "folders); no torch needed"
        ),
    )
    parser.add_argument("--hardware", help="with --from-run: the hardware preset the runs ran on")
    parser.add_argument(
        "--assume-model",
        metavar="NAME",
        help="with --from-run: the model a run served, when it does not say (as validate's)",
    )
    parser.add_argument(
        "--scenario",
        help="with --from-run: replay with this scenario's engine settings and cost model "
        "(default: the runs' recorded settings and cost kind auto)",
    )
    parser.add_argument(
        "--fit-kind",
        choices=FIT_MODES,
        default="multipliers",
        help="with --from-run: what to fit. multipliers: an overhead and prefill / decode "
        "multipliers of the base (sim.cost.fitted; default); engine-cpu: the engine's CPU "
        "coefficients on top of the base's kernel prices, and the way in per request where "
        "the runs' arrivals include it (sim.cost.fitted_cpu)",
    )
    parser.add_argument(
        "--free",
        default=None,
        help="with --from-run: parameters to fit, comma-separated (default: multipliers: all "
        f"three; engine-cpu: {', '.join(DEFAULT_CPU_FREE)}, plus {WAY_IN} where every run's "
        f"arrivals include the way in; choose from {', '.join(ENGINE_CPU_PARAMETERS)})",
    )
    parser.add_argument(
        "--max-evals",
        type=int,
        default=DEFAULT_MAX_EVALUATIONS,
        help=f"with --from-run: simulations per fit after 13 that pick a start (default "
        f"{DEFAULT_MAX_EVALUATIONS})",
    )
    parser.add_argument(
        "--no-cross-validation", action="store_true", help="with --from-run: fit on all runs only"
    )


def refuse_from_run_options(args: argparse.Namespace) -> None:
    """ConfigError naming the first of ``add_arguments``' options given without
    ``--from-run`` (``args`` has none): timing a model reads none of them."""
    for flag in options_given(args, add_arguments):
        raise ConfigError(f"{flag} applies with --from-run only")


def model_option(value: str) -> ModelSpec:
    """``--model``: what a scenario's ``model:`` accepts, resolved the same way.

    A preset name, a ``config.json`` path (or its folder) from the working
    directory, or an inline spec or ``{preset: ..., **overrides}`` in YAML
    flow style (``'{preset: llama-3-8b, kv_dtype_bytes: 1}'``).
    """
    ref: Any = value
    if value.lstrip().startswith("{"):
        try:
            ref = parse_yaml(value)
        except (yaml.YAMLError, DuplicateKeyError) as error:
            problem = " ".join(str(error).split())
            raise ConfigError(f"--model: not a YAML mapping: {problem}") from None
    return model_from_ref(ref, Path.cwd(), "--model")


def calibrate_from_runs(args: argparse.Namespace) -> int:
    """The whole command (module docstring); ConfigError on bad input. Returns 0."""
    if args.max_evals < 2:
        raise ConfigError(f"--max-evals must be at least 2, got {args.max_evals}")
    replays = replay_runs(
        args.from_run,
        model_option(args.model),
        args.hardware,
        args.scenario,
        args.fit_kind,
        args.assume_model,
    )
    for caveat in replays.caveats:
        print(f"servesim: warning: {caveat}", file=sys.stderr)
    runs = replays.runs
    free = free_parameters(args.fit_kind, args.free, runs)
    cpu_mode = args.fit_kind == "engine-cpu"
    if cpu_mode:
        free = identified_free(runs, free, args.free, print)
    if args.max_evals < len(free) + 1:
        raise ConfigError(f"--max-evals must be at least {len(free) + 1}, got {args.max_evals}")
    model, hardware = runs[0].scenario.model.name, runs[0].scenario.hardware.name
    stem = "engine-cpu" if cpu_mode else "fitted"
    out = Path(args.out or Path("runs") / f"{stem}-{model}-{hardware}.json")
    check_out_file(out)  # before the fit: a bad --out would lose minutes of it
    if cpu_mode and WAY_IN not in free:
        print(
            f"{WAY_IN} not fitted: the runs' arrivals are the engine's queue times, after "
            "the way in (or --free leaves it out)"
        )
    print(f"fitting {', '.join(free)} of {runs[0].base.label} to {len(runs)} run(s)")
    # command_line: set only where a caller forwards its own line (calibration.cli).
    command = getattr(args, "command_line", None) or shlex.join(["servesim", *sys.argv[1:]])
    errors, table, outcome, use = fit_and_save(
        replays, free, args.max_evals, not args.no_cross_validation, out, command
    )
    print(render(errors))
    if table:
        print("\n".join(table))
    print(
        f"objective {outcome.base_value:.4g} (base) -> {outcome.value:.4g} (fitted) in "
        f"{outcome.num_evaluations} simulations; wrote {out}; use it with {use}"
    )
    return 0
