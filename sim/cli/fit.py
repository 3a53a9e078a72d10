"""``servesim calibrate --from-run``: fit a cost model to measured runs, torch-free.

``calibration.cli`` adds these options (``add_arguments``) to its parser and
hands a ``--from-run`` command line here before it imports torch. The steps:
read every run (``fit_runs.load_measured_run``), refuse runs of another model
or hardware, build each run's replay scenario (``--scenario``, else the run's
recorded engine settings), cross-validate (``fit.cross_validate``), fit
on all runs, and write the artifact (``sim.cost.fitted``) that
``cost: {kind: fitted, artifact: PATH}`` loads; with ``--fit-kind engine-cpu``
the engine's CPU coefficients and the way in instead (``sim.cost.fitted_cpu``),
for ``engine: {cpu_artifact: PATH}``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

import sim
from sim.api import cost_model_for
from sim.cost.engine_cpu import EngineCpuCost
from sim.cost.fitted import (
    FitSummary,
    FittedCostArtifact,
    FittedParameterValues,
    FittedProvenance,
    FittedRunInfo,
    rebase_paths,
    save_fitted_artifact,
)
from sim.cost.fitted_cpu import (
    EngineCpuArtifact,
    EngineCpuFitValues,
    EngineCpuProvenance,
    save_engine_cpu_artifact,
)
from sim.cost.provenance import git_revision, utc_now
from sim.errors import ConfigError
from sim.hardware.specs import ModelSpec, hardware_preset, model_from_ref
from sim.metrics.out_path import check_out_file
from sim.scenario import Scenario, load_scenario
from sim.scenario.strict_yaml import DuplicateKeyError, parse_yaml
from sim.validation import identify
from sim.validation.fit import (
    DEFAULT_MAX_EVALUATIONS,
    ENGINE_CPU_PARAMETERS,
    OBJECTIVE,
    OPTIMISER,
    PARAMETERS,
    WAY_IN,
    FitRun,
    Target,
    base_of,
    cross_validate,
    fit_free,
    params_json,
    render,
    target_rows,
)
from sim.validation.fit_runs import (
    arrivals_include_way_in,
    check_run,
    load_measured_run,
    run_digest,
    scenario_for_run,
)
from sim.validation.runs import ImportedRun

FIT_MODES = ("multipliers", "engine-cpu")
# The scheduler's part per sequence stays at its measured value: a run prices only the sum
# of the two per-sequence parts (sim.validation.fit.structural_problem).
DEFAULT_CPU_FREE = ("per_step_s", "sampling_per_seq_s", "non_overlapped_s")


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


def fit_runs(
    sources: Sequence[str], args: argparse.Namespace
) -> tuple[list[FitRun], list[ImportedRun], Scenario | None, Path]:
    """Every run read, checked and ready to replay."""
    if not sources:
        raise ConfigError("--from-run: no runs given")
    scenario: Scenario | None = None
    base_dir = Path.cwd()
    if args.scenario is not None:
        scenario, base_dir = load_scenario(args.scenario), Path(args.scenario).parent
        # A fitted cost is a fine base for the way in alone (engine-cpu on a whole-step
        # cost), never for another set of multipliers on top.
        if scenario.cost.kind == "fitted" and args.fit_kind == "multipliers":
            raise ConfigError(
                f"{args.scenario}: cost is already fitted; give the scenario of its base"
            )
    model = model_option(args.model)
    hardware_name = args.hardware or (scenario.hardware.name if scenario is not None else None)
    if hardware_name is None:
        raise ConfigError("--from-run needs --hardware (or --scenario, which names it)")
    hardware = hardware_preset(hardware_name)
    if scenario is not None and (scenario.model.name, scenario.hardware.name) != (
        model.name,
        hardware.name,
    ):
        raise ConfigError(
            f"--scenario {args.scenario}: model {scenario.model.name} on "
            f"{scenario.hardware.name}, not --model {model.name} on --hardware {hardware.name}"
        )
    runs, imported = [], []
    for source in sources:
        run = load_measured_run(source)
        check_run(run, source, model, hardware)
        replay = scenario or scenario_for_run(run, source, model, hardware, {"kind": "auto"})
        try:
            # GPU-only: the fitted overhead or CPU coefficients stand for the engine's
            # CPU work, as build_cost_model rebuilds a fitted artifact's base.
            base = cost_model_for(replay, base_dir, engine_cpu=False)
            with_cpu = cost_model_for(replay, base_dir)
        except ConfigError as error:
            raise ConfigError(f"cost: {error}") from None
        cpu = with_cpu.cpu if isinstance(with_cpu, EngineCpuCost) else None
        runs.append(
            FitRun(
                Path(source).name,
                replay,
                run.requests,
                base,
                base_dir,
                engine_cpu=cpu,
                arrivals_include_way_in=arrivals_include_way_in(run),
                load=run.meta.get("load"),  # replayed under the run's own load profile
            )
        )
        imported.append(run)
    return runs, imported, scenario, base_dir


def free_parameters(args: argparse.Namespace, runs: Sequence[FitRun]) -> tuple[str, ...]:
    """``--free``, or the mode's default for these runs; ConfigError when it mixes modes.
    An engine-CPU set is then checked for what the runs identify (``identified_free``)."""
    choices = ENGINE_CPU_PARAMETERS if args.fit_kind == "engine-cpu" else PARAMETERS
    if args.free is not None:
        free = tuple(name.strip() for name in args.free.split(",") if name.strip())
        if not free or any(name not in choices for name in free):
            raise ConfigError(
                f"--free {args.free!r} with --fit-kind {args.fit_kind}: "
                f"choose from {', '.join(choices)}"
            )
        return free
    if args.fit_kind == "multipliers":
        return PARAMETERS
    way_in = (WAY_IN,) if all(run.arrivals_include_way_in for run in runs) else ()
    if all(run.engine_cpu is None for run in runs):
        if not way_in:
            raise ConfigError(
                f"--fit-kind engine-cpu: {runs[0].base.label} times whole steps (no engine CPU "
                "to fit) and the runs' arrivals are the engine's queue times (no way in)"
            )
        return way_in
    return (*DEFAULT_CPU_FREE, *way_in)


def identified_free(
    args: argparse.Namespace, runs: Sequence[FitRun], free: tuple[str, ...]
) -> tuple[str, ...]:
    """The engine-CPU ``free`` set the runs identify (``sim.validation.identify``): a set
    given with ``--free`` must be, else ConfigError naming the term and why; the default
    set loses what is not, each said in one line."""
    everything = [Target(i) for i in range(len(runs))]
    problems = identify.identification_problems(runs, everything, free)
    if not problems:
        return free
    if args.free is not None:
        raise ConfigError(f"--free {args.free}: {problems[0][1]}")
    kept = identify.identified(free, problems)
    for _, why in problems:
        print(f"not fitted: {why}")
    if not kept:
        raise ConfigError("--fit-kind engine-cpu: the runs identify none of " + ", ".join(free))
    return kept


def coefficient_table(
    intervals: Sequence[Any], held: dict[str, float], held_source: str
) -> list[str]:
    """Markdown: every CPU coefficient, fitted with its interval, or held with its source."""
    lines = [
        "| coefficient | value | std error | 95 % interval | source |",
        "|---|---|---|---|---|",
    ]
    for row in intervals:
        error = "n/a" if row.std_error_s is None else f"{row.std_error_s * 1e6:.2f} us"
        span = (
            "n/a"
            if row.low_s is None or row.high_s is None
            else f"{row.low_s * 1e6:.2f} .. {row.high_s * 1e6:.2f} us"
        )
        lines.append(
            f"| {row.name} | {row.value_s * 1e6:.2f} us | {error} | {span} | "
            f"fitted ({row.degrees_of_freedom} degrees of freedom) |"
        )
    for name, value in held.items():
        lines.append(f"| {name} | {value * 1e6:.2f} us | — | — | held: {held_source} |")
    return lines


def calibrate_from_runs(args: argparse.Namespace) -> int:
    """The whole command (module docstring); ConfigError on bad input. Returns 0."""
    if args.max_evals < 2:
        raise ConfigError(f"--max-evals must be at least 2, got {args.max_evals}")
    runs, imported, scenario, base_dir = fit_runs(args.from_run, args)
    free = free_parameters(args, runs)
    cpu_mode = args.fit_kind == "engine-cpu"
    if cpu_mode:
        try:
            free = identified_free(args, runs, free)
        except ValueError as error:  # a fit of none
            raise ConfigError(f"--from-run: {error}") from None
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
    errors: dict[str, Any] = {"objective": OBJECTIVE}
    try:
        if not args.no_cross_validation:
            errors["cross_validation"] = cross_validate(runs, free, args.max_evals)
        everything = [Target(i) for i in range(len(runs))]
        outcome = fit_free(runs, everything, free, args.max_evals)
    except ValueError as error:  # what the runs cannot inform, or cannot split
        raise ConfigError(f"--from-run: {error}") from None
    errors["in_sample"] = {
        "parameters": params_json(outcome.params),
        "rows": target_rows(runs, everything, outcome.params, base_of(runs, free)),
    }
    base_cost = scenario.cost.model_dump(mode="json") if scenario else {"kind": "auto"}
    common: dict[str, Any] = {
        "tool_version": sim.__version__,
        "created_utc": utc_now(),
        # command_line: set only where a caller forwards its own line (calibration.cli).
        "command": getattr(args, "command_line", None) or shlex.join(["servesim", *sys.argv[1:]]),
        "git_revision": git_revision(),
        "model": model,
        "hardware": hardware,
        "runs": [
            FittedRunInfo(
                source=source,
                format=str(run.meta.get("format", "imported")),
                num_requests=len(run.requests),
                sha256=run_digest(run.requests),
            )
            for source, run in zip(args.from_run, imported, strict=True)
        ],
    }
    summary = FitSummary(
        free_parameters=list(free),
        objective=OBJECTIVE,
        objective_value=outcome.value,
        base_objective_value=outcome.base_value,
        num_evaluations=outcome.num_evaluations,
        optimiser=OPTIMISER,
    )
    rebased = rebase_paths(base_cost, base_dir, out.parent)
    table: list[str] = []
    if isinstance(outcome.params, EngineCpuFitValues):
        first = runs[0]
        intervals = identify.intervals(runs, everything, free, outcome.params)
        held_source = first.engine_cpu.source if first.engine_cpu is not None else "none"
        held = {
            name: value
            for name, value in outcome.params.cpu.model_dump().items()
            if name not in free and first.engine_cpu is not None
        }
        table = [
            "Coefficients (" + identify.INTERVAL_METHOD + "):",
            "",
            *coefficient_table(intervals, held, held_source),
            "",
        ]
        save_engine_cpu_artifact(
            EngineCpuArtifact(
                provenance=EngineCpuProvenance(
                    **common,
                    vllm_version=first.scenario.engine.vllm_version,
                    async_scheduling=first.scenario.async_scheduling,
                ),
                base_cost=rebased,
                base_cost_label=first.base.label,
                cpu=None if all(run.engine_cpu is None for run in runs) else outcome.params.cpu,
                way_in_s_per_request=outcome.params.way_in_s_per_request
                if WAY_IN in free
                else None,
                fit=summary,
                coefficients=intervals,
                interval_method=identify.INTERVAL_METHOD,
                held_source=held_source,
                errors=errors,
            ),
            out,
        )
        use = f"engine: {{cpu_artifact: {out}}}"
    else:
        save_fitted_artifact(
            FittedCostArtifact(
                provenance=FittedProvenance(**common),
                base_cost=rebased,
                base_cost_label=runs[0].base.label,
                parameters=FittedParameterValues(
                    step_overhead_s=outcome.params.step_overhead_s,
                    prefill_multiplier=outcome.params.prefill_multiplier,
                    decode_multiplier=outcome.params.decode_multiplier,
                ),
                fit=summary,
                errors=errors,
            ),
            out,
        )
        use = f"cost: {{kind: fitted, artifact: {out}}}"
    print(render(errors))
    if table:
        print("\n".join(table))
    print(
        f"objective {outcome.base_value:.4g} (base) -> {outcome.value:.4g} (fitted) in "
        f"{outcome.num_evaluations} simulations; wrote {out}; use it with {use}"
    )
    return 0
