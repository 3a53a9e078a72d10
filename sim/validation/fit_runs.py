"""Measured runs for black-box calibration: read any format, check it, replay it, fit it.

``--from-run`` accepts, per path, as ``validate --measured`` does
(``sim.validation.importers.run_kind`` tells which):

- a ``servesim measure`` folder (``summary.json`` marked ``mode: measured``);
- an imported-run folder (``servesim import-run`` output, or written by hand: ``run.json``);
- anything ``servesim import-run`` reads (``sim.validation.importers.import_run``,
  format detected from the files), so a new importer works here unchanged.

A run that records its model (or device) must match ``--model`` (``--hardware``):
a fit to another model's latencies is refused, naming both. A run that
records its engine settings (``run.json``'s ``engine``) is replayed with them
on a scenario built here; a ``measure`` folder records no scheduler limits,
so it needs ``--scenario`` (the scenario it measured). ``replay_runs`` does
all of that for ``--from-run``; ``fit_and_save`` fits them and writes the artifact.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

import sim
from sim.api import cost_model_for
from sim.cost.engine_cpu import EngineCpuCost
from sim.cost.fitted import (
    FitParameters,
    FitSummary,
    FittedCostArtifact,
    FittedProvenance,
    FittedRunInfo,
    rebase_paths,
    save_fitted_artifact,
)
from sim.cost.fitted_cpu import (
    EngineCpuArtifact,
    EngineCpuFitValues,
    EngineCpuProvenance,
)
from sim.cost.provenance import git_revision, utc_now
from sim.errors import ConfigError, format_error
from sim.hardware.device_names import hardware_matches
from sim.hardware.model_names import same_model
from sim.hardware.specs import HardwareSpec, ModelSpec, hardware_preset
from sim.metrics.stats import text_dtype
from sim.scenario import Scenario, load_scenario
from sim.validation import identify
from sim.validation.fit import (
    METRICS,
    OBJECTIVE,
    OPTIMISER,
    WAY_IN,
    FitOutcome,
    FitRun,
    Target,
    base_of,
    cross_validate,
    fit_free,
    params_json,
    target_rows,
)
from sim.validation.formats.measure_dir import read_measure_folder
from sim.validation.importers import import_run, run_kind
from sim.validation.intake import ENGINE_INTAKE
from sim.validation.match import (
    DTYPE_SETTINGS,
    LAYOUT_SETTINGS,
    RunFacts,
    check_settings,
    imported_engine_settings,
    unreplayed,
)
from sim.validation.predict import per_request_latencies
from sim.validation.runs import ImportedRun

MEASURE_FORMAT = "servesim-measure"


def load_measured_run(path: str | Path) -> ImportedRun:
    """The run at ``path`` in whichever format it is (module docstring)."""
    source = Path(path)
    kind = run_kind(source, "--from-run")
    if kind == "measure":
        # Its summary.json as the meta: what it records where RunFacts reads it.
        measured = read_measure_folder(source)
        run = ImportedRun(measured.requests, {"format": MEASURE_FORMAT, **measured.summary})
    else:
        run = import_run(source, kind)
    if "rejection_reason" not in run.requests.columns:  # every request was served
        served = pd.Series(index=run.requests.index, dtype=text_dtype())
        requests = run.requests.assign(rejection_reason=served)
        run = ImportedRun(requests, run.meta)
    return run


def arrivals_include_way_in(run: ImportedRun) -> bool:
    """Whether the run's arrival times are when requests were sent, before the server's way
    in: a ``servesim measure`` folder's are (its ready times come after). The importers'
    runs (LLMServingSim's vLLM logs) record the engine's queue times, after the way in."""
    return run.meta.get("format") == MEASURE_FORMAT


def check_run(
    run: ImportedRun,
    source: str,
    model: ModelSpec,
    hardware: HardwareSpec,
    assume_model: str | None = None,
) -> None:
    """ConfigError naming what differs when the run is of another model or hardware
    (what it records, read as ``validate`` reads it: ``RunFacts``), or when it names no
    model and ``assume_model`` (``--assume-model``, as validate's) says none."""
    said = RunFacts.from_summary(run.requests, run.meta)
    served = said.model or assume_model
    if served is None:
        raise ConfigError(
            f"--from-run {source}: the run names no model (--assume-model NAME if it "
            f"served --model {model.name})"
        )
    if not same_model(model.name, served):
        raise ConfigError(f"--from-run {source}: the run served {served}, not --model {model.name}")
    if said.hardware is not None and said.hardware != hardware.name:
        raise ConfigError(
            f"--from-run {source}: the run ran on {said.hardware}, not --hardware {hardware.name}"
        )
    if said.device_name is not None and not hardware_matches(said.device_name, hardware):
        raise ConfigError(
            f"--from-run {source}: the run ran on {said.device_name}, "
            f"not --hardware {hardware.name}"
        )
    if len(run.requests) == 0:
        raise ConfigError(f"--from-run {source}: no requests")


def check_samples(run: ImportedRun, source: str) -> None:
    """ConfigError when the run has no sample of a latency the fit scores (TPOT: a
    request of 2 or more output tokens): its objective would be inf everywhere."""
    measured = per_request_latencies(run.requests)
    for metric in METRICS:
        values = measured[metric].to_numpy(dtype=np.float64)
        if not np.any(np.isfinite(values) & (values > 0)):
            raise ConfigError(
                f"--from-run {source}: no request has a {metric.removesuffix('_s').upper()} "
                "(TPOT needs 2 or more output tokens): the fit scores TTFT and TPOT quantiles"
            )


def run_digest(requests: pd.DataFrame) -> str:
    """sha256 of the columns a fit reads (times, lengths): names the data exactly."""
    columns = ["arrival_s", "first_token_s", "finish_s", "num_prompt_tokens", "num_output_tokens"]
    table = np.ascontiguousarray(requests[columns].to_numpy(dtype=np.float64))
    return hashlib.sha256(table.tobytes()).hexdigest()


def _limits(engine: dict[str, Any]) -> dict[str, Any]:
    """Scenario fields from a run's recorded engine settings (unrecorded ones keep defaults)."""
    settings = imported_engine_settings(engine)
    scheduler: dict[str, Any] = {"kind": "continuous", "chunked_prefill": True}
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if key in settings:
            scheduler[key] = settings.pop(key)
    layout = {key: settings.pop(key) for key in LAYOUT_SETTINGS if key in settings}
    # The storage dtypes the run records price the replay (quantization:).
    quantization = {
        ours: settings.pop(key) for key, ours in DTYPE_SETTINGS.items() if key in settings
    }
    # One replica (scenario_for_run refuses data parallelism); the cost kind auto
    # prices no expert parallelism.
    parallelism = {
        key: layout[key]
        for key in ("tensor_parallel_size", "pipeline_parallel_size")
        if key in layout
    }
    return {
        "scheduler": scheduler,
        "engine": settings,
        "parallelism": parallelism,
        "quantization": quantization,
    }


def scenario_for_run(
    run: ImportedRun,
    source: str,
    model: ModelSpec,
    hardware: HardwareSpec,
    cost: dict[str, Any],
) -> Scenario:
    """A one-replica scenario with the run's recorded engine settings and ``cost``."""
    engine = run.meta.get("engine")
    if not isinstance(engine, dict):
        raise ConfigError(
            f"--from-run {source}: the run records no engine settings "
            f"({run.meta.get('format')}); pass --scenario, the scenario it measured"
        )
    if (engine.get("data_parallel_size") or 1) > 1:
        raise ConfigError(
            f"--from-run {source}: data_parallel_size {engine['data_parallel_size']}; "
            "the recorded settings make one replica: pass --scenario, the cluster it measured"
        )
    data: dict[str, Any] = {
        "name": f"fit-{Path(source).name}",
        "model": model.model_dump(),
        "hardware": hardware.model_dump(),
        "cost": cost,
        # Arrivals are the engine's queue times: the way in already done.
        "frontend": {
            "way_in_s_per_request": 0.0,
            "tokenize_s_per_token": 0.0,
            "detokenize_s_per_token": 0.0,
        },
        # Never read: the fit replays the run's own requests (sim.api.replay).
        "workload": {"kind": "trace", "format": "csv", "path": "trace.csv"},
        **_limits(engine),
    }
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        source_settings = f"--from-run {source}: recorded settings"
        raise ConfigError(format_error(source_settings, error, data)) from None


@dataclass(frozen=True)
class Replays:
    """Measured runs ready to fit: each replay, its provenance, and the base cost as the
    scenario gave it (paths relative to ``base_dir``)."""

    runs: list[FitRun]
    infos: list[FittedRunInfo]
    base_cost: dict[str, Any]
    base_dir: Path
    caveats: list[str]  # what a run does not record of the scenario's (one line each)


def replay_runs(
    sources: Sequence[str],
    model: ModelSpec,
    hardware_name: str | None,
    scenario_path: str | None,
    fit_kind: str,
    assume_model: str | None = None,
) -> Replays:
    """Every run read, checked (``check_run``) and ready to replay: with ``scenario_path``'s
    engine settings and cost model, else each run's recorded settings on cost kind auto."""
    if not sources:
        raise ConfigError("--from-run: no runs given")
    scenario: Scenario | None = None
    base_dir = Path.cwd()
    if scenario_path is not None:
        scenario, base_dir = load_scenario(scenario_path), Path(scenario_path).parent
        # A fitted cost is a fine base for the way in alone (engine-cpu on a whole-step
        # cost), never for another set of multipliers on top.
        if scenario.cost.kind == "fitted" and fit_kind == "multipliers":
            raise ConfigError(
                f"{scenario_path}: cost is already fitted; give the scenario of its base"
            )
    hardware_name = hardware_name or (scenario.hardware.name if scenario is not None else None)
    if hardware_name is None:
        raise ConfigError("--from-run needs --hardware (or --scenario, which names it)")
    hardware = hardware_preset(hardware_name)
    if scenario is not None and (scenario.model.name, scenario.hardware.name) != (
        model.name,
        hardware.name,
    ):
        raise ConfigError(
            f"--scenario {scenario_path}: model {scenario.model.name} on "
            f"{scenario.hardware.name}, not --model {model.name} on --hardware {hardware.name}"
        )
    runs, infos, caveats = [], [], []
    for source in sources:
        run = load_measured_run(source)
        check_run(run, source, model, hardware, assume_model)
        check_samples(run, source)
        # As validate checks it: the scenario must run the run's settings and layout
        # (a measure folder's as its summary records them, its unrecorded layout UNKNOWN).
        said = RunFacts.from_summary(run.requests, run.meta)
        caveats += unreplayed(said, f"--from-run {source}", scenario)
        if scenario is not None and said.engine_settings is not None:
            caveats += check_settings(scenario, said.engine_settings, f"--from-run {source}")
        replay = scenario or scenario_for_run(run, source, model, hardware, {"kind": "auto"})
        try:
            # GPU-only: the fitted overhead or CPU coefficients stand for the engine's
            # CPU work, as build_cost_model rebuilds a fitted artifact's base.
            base = cost_model_for(replay, engine_cpu=False)
            with_cpu = cost_model_for(replay)
        except ConfigError as error:
            raise ConfigError(f"cost: {error}") from None
        cpu = with_cpu.cpu if isinstance(with_cpu, EngineCpuCost) else None
        runs.append(
            FitRun(
                Path(source).name,
                replay,
                run.requests,
                base,
                engine_cpu=cpu,
                arrivals_include_way_in=arrivals_include_way_in(run),
                load=run.meta.get("load"),  # replayed under the run's own load profile
                from_intake=run.meta.get("latency_from") == ENGINE_INTAKE,
            )
        )
        infos.append(
            FittedRunInfo(
                source=source,
                format=str(run.meta.get("format", "imported")),
                num_requests=len(run.requests),
                sha256=run_digest(run.requests),
            )
        )
    base_cost = scenario.cost.model_dump(mode="json") if scenario else {"kind": "auto"}
    return Replays(runs, infos, base_cost, base_dir, caveats)


def fit_and_save(
    replays: Replays,
    free: tuple[str, ...],
    max_evaluations: int,
    cross_validation: bool,
    out: Path,
    command: str,
) -> tuple[
    dict[str, Any], list[str], FitOutcome[FitParameters] | FitOutcome[EngineCpuFitValues], str
]:
    """Cross-validate (where asked), fit ``free`` on all runs and save the artifact at
    ``out`` (``sim.cost.fitted``, or ``sim.cost.fitted_cpu`` for an engine-CPU set).
    Returns the errors (``render`` prints them), the coefficient table (engine CPU; else
    empty), the fit and the scenario line that uses the artifact."""
    runs = replays.runs
    errors: dict[str, Any] = {"objective": OBJECTIVE}
    everything = [Target(i) for i in range(len(runs))]
    try:
        if cross_validation:
            errors["cross_validation"] = cross_validate(runs, free, max_evaluations)
        outcome = fit_free(runs, everything, free, max_evaluations)
    except ValueError as error:  # what the runs cannot inform, or cannot split
        raise ConfigError(f"--from-run: {error}") from None
    if outcome.at_limit:  # identify's rule: refused, naming the term and why
        raise ConfigError(f"--from-run: {outcome.at_limit[0]}")
    errors["in_sample"] = {
        "parameters": params_json(outcome.params),
        "rows": target_rows(runs, everything, outcome.params, base_of(runs, free)),
    }
    first = runs[0]
    common: dict[str, Any] = {
        "tool_version": sim.__version__,
        "created_utc": utc_now(),
        "command": command,
        "git_revision": git_revision(),
        "model": first.scenario.model.name,
        "hardware": first.scenario.hardware.name,
        "runs": replays.infos,
    }
    summary = FitSummary(
        free_parameters=list(free),
        objective=OBJECTIVE,
        objective_value=outcome.value,
        base_objective_value=outcome.base_value,
        num_evaluations=outcome.num_evaluations,
        optimiser=OPTIMISER,
    )
    rebased = rebase_paths(replays.base_cost, replays.base_dir, out.parent)
    if not isinstance(outcome.params, EngineCpuFitValues):
        save_fitted_artifact(
            FittedCostArtifact(
                provenance=FittedProvenance(**common),
                base_cost=rebased,
                base_cost_label=first.base.label,
                parameters=outcome.params,
                fit=summary,
                errors=errors,
            ),
            out,
        )
        return errors, [], outcome, f"cost: {{kind: fitted, artifact: {out}}}"
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
        *identify.coefficient_table(intervals, held, held_source),
        "",
    ]
    save_fitted_artifact(
        EngineCpuArtifact(
            provenance=EngineCpuProvenance(
                **common,
                vllm_version=first.scenario.engine.vllm_version,
                async_scheduling=first.scenario.async_scheduling,
            ),
            base_cost=rebased,
            base_cost_label=first.base.label,
            cpu=None if all(run.engine_cpu is None for run in runs) else outcome.params.cpu,
            way_in_s_per_request=outcome.params.way_in_s_per_request if WAY_IN in free else None,
            fit=summary,
            coefficients=intervals,
            interval_method=identify.INTERVAL_METHOD,
            held_source=held_source,
            errors=errors,
        ),
        out,
    )
    return errors, table, outcome, f"engine: {{cpu_artifact: {out}}}"
