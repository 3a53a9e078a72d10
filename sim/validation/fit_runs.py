"""Measured runs for black-box calibration: read any format, check it, build its replay scenario.

``--from-run`` accepts, per path:

- an imported-run folder (``servesim import-run`` output: ``run.json``);
- a ``servesim measure`` folder (``summary.json`` marked ``mode: measured``);
- anything ``servesim import-run`` reads (``sim.validation.importers.import_run``,
  format detected from the files), so a new importer works here unchanged.

A run that records its model (or device) must match ``--model`` (``--hardware``):
a fit to another model's latencies is refused, naming both. A run that
records its engine settings (``run.json``'s ``engine``) is replayed with them
on a scenario built here; a ``measure`` folder records no scheduler limits,
so it needs ``--scenario`` (the scenario it measured).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from sim.cost.kernels.artifact import model_matches
from sim.errors import ConfigError
from sim.hardware.specs import MODEL_SPEC_ALIASES, HardwareSpec, ModelSpec
from sim.metrics.stats import text_dtype
from sim.scenario import Scenario
from sim.validation.formats.measure_dir import is_measure_folder, read_measure_folder
from sim.validation.importers import import_run
from sim.validation.match import hardware_matches, imported_engine_settings
from sim.validation.runs import ImportedRun, load_run

MEASURE_FORMAT = "servesim-measure"


def load_measured_run(path: str | Path) -> ImportedRun:
    """The run at ``path`` in whichever format it is (module docstring)."""
    source = Path(path)
    if not source.exists():
        raise ConfigError(f"--from-run {source}: no such file or folder")
    if (source / "run.json").is_file():
        run = load_run(source)
    elif is_measure_folder(source):
        # Its summary.json as the meta: model, device and device_name where check_run looks.
        measured = read_measure_folder(source)
        run = ImportedRun(measured.requests, {"format": MEASURE_FORMAT, **measured.summary})
    else:
        run = import_run(source)
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


def recorded_model(run: ImportedRun) -> str | None:
    """The model a run says it served, if it says."""
    engine = run.meta.get("engine") or {}
    name = engine.get("model") or run.meta.get("model")
    return str(name) if name else None


def recorded_device(run: ImportedRun) -> str | None:
    """The device a run says it ran on (``cpu`` for a CPU run), if it says."""
    if run.meta.get("device") == "cpu":
        return "cpu"
    engine = run.meta.get("engine") or {}
    name = engine.get("device_name") or run.meta.get("device_name")
    return str(name) if name else None


def check_run(run: ImportedRun, source: str, model: ModelSpec, hardware: HardwareSpec) -> None:
    """ConfigError naming what differs when the run is of another model or hardware."""
    name = recorded_model(run)
    wanted = MODEL_SPEC_ALIASES.get(model.name, model.name)
    if name is not None and not (model_matches(name, wanted) or model_matches(name, model.name)):
        raise ConfigError(f"--from-run {source}: the run served {name}, not --model {model.name}")
    device = recorded_device(run)
    if device is not None and not hardware_matches(device, hardware):
        raise ConfigError(
            f"--from-run {source}: the run ran on {device}, not --hardware {hardware.name}"
        )
    if len(run.requests) == 0:
        raise ConfigError(f"--from-run {source}: no requests")


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
    return {"scheduler": scheduler, "engine": settings}


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
            "the fit replays one engine (one replica)"
        )
    data: dict[str, Any] = {
        "name": f"fit-{Path(source).name}",
        "model": model.model_dump(),
        "hardware": hardware.model_dump(),
        "cost": cost,
        "parallelism": {"tensor_parallel_size": engine.get("tensor_parallel_size") or 1},
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
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        problem = f"recorded settings, {where}: {first['msg']}"
        raise ConfigError(f"--from-run {source}: {problem}") from None
