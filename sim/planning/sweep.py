"""Sweeps: one base scenario, many override sets, one tidy table of results.

A sweep file (YAML) names a base scenario and the points to run::

    scenario: chat.yaml                # relative to the sweep file
    overrides: {workload.num_requests: 500}   # applied to every point
    grid:                              # Cartesian product, in file order
      workload.arrival.rate_per_s: [4, 8, 16]
      scheduler.chunked_prefill: [true, false]
    points: [{...}, {...}]             # explicit override sets (with a grid: x grid)
    seeds: 2                           # a count (scenario seed, +1, ...) or a list
    slo: {ttft_p99_ms: 500, tpot_p99_ms: 50}
    gpu_price_per_hour: 3.0            # optional, else sim.planning.pricing's table

Every point's scenario is validated before anything runs, so a mistyped key
fails at once with one line naming the sweep file, the point and the key.
Each (point, seed) is cached in ``OUT/cache/<hash>.json``, the hash covering
the validated scenario (seed included), the folder relative paths resolve
against, and the servesim version: a re-run computes only what changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError
from tqdm import tqdm

import sim
from sim.errors import ConfigError
from sim.metrics.slo_targets import targets_from_mapping
from sim.planning.sweep_exec import Record, execute
from sim.planning.sweep_plan import Job, SweepConfig, SweepPlan, SweepPoint
from sim.planning.sweep_table import build_table
from sim.scenario import Scenario, scenario_from_dict, set_dotted
from sim.scenario.strict_yaml import read_yaml


def _validation_message(source: str, error: ValidationError) -> str:
    err = error.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{source}: {loc}: {msg}" if loc else f"{source}: {msg}"


def _seeds(config: SweepConfig, scenario: Scenario) -> tuple[int, ...]:
    if isinstance(config.seeds, list):
        return tuple(config.seeds)
    return tuple(scenario.seed + k for k in range(config.seeds))


def load_sweep(path: str | Path) -> SweepPlan:
    """Read a sweep file and validate it and every point's scenario."""
    path = Path(path)
    doc = read_yaml(path, "sweep")
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of sweep fields at the top level")
    try:
        config = SweepConfig.model_validate(doc)
    except ValidationError as error:
        raise ConfigError(_validation_message(str(path), error)) from None
    targets = targets_from_mapping(config.slo, f"{path}: slo")
    scenario_path = (path.parent / config.scenario).resolve()
    try:
        base_doc = read_yaml(scenario_path, "scenario") or {}
    except ConfigError as error:
        raise ConfigError(f"{path}: scenario: {error}") from None
    if not isinstance(base_doc, dict):
        raise ConfigError(f"{scenario_path}: expected a mapping of scenario fields")
    points = []
    for index, overrides in enumerate(config.override_sets()):
        label = ", ".join(f"{k}={v}" for k, v in overrides.items())
        source = f"{path}: point {index} ({label})"
        point_doc = copy.deepcopy(base_doc)
        for key, value in {**config.overrides, **overrides}.items():
            set_dotted(point_doc, str(key), value, source)
        scenario = scenario_from_dict(point_doc, source)
        points.append(SweepPoint(index, overrides, scenario, _seeds(config, scenario)))
    return SweepPlan(path, config, scenario_path.parent, tuple(points), targets)


def config_hash(scenario_doc: dict[str, Any], base_dir: Path) -> str:
    """Hash of a validated scenario dict (seed included), its base folder, the version."""
    payload = {"scenario": scenario_doc, "base_dir": str(base_dir), "version": sim.__version__}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def jobs_for(plan: SweepPlan) -> list[Job]:
    """Every (point, seed) of the plan with its cache key and task."""
    jobs = []
    for point in plan.points:
        for seed in point.seeds:
            doc = point.scenario.model_copy(update={"seed": seed}).model_dump(mode="json")
            key = config_hash(doc, plan.base_dir)
            jobs.append(Job(point, seed, key, {"scenario": doc, "base_dir": str(plan.base_dir)}))
    return jobs


def _read_cache(path: Path) -> Record | None:
    try:
        record = json.loads(path.read_text())["record"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or damaged: compute again
    return record if isinstance(record, dict) else None


def _write_cache(path: Path, job: Job, record: Record) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    body = {"key": job.key, "version": sim.__version__, "task": job.task, "record": record}
    tmp.write_text(json.dumps(body, default=str))
    os.replace(tmp, path)  # atomic: a crash never leaves half a file


@dataclass(frozen=True)
class SweepOutcome:
    """A finished sweep: its table and how much of it came from the cache."""

    table: pd.DataFrame
    num_computed: int
    num_cached: int


def run_sweep(
    plan: SweepPlan,
    out_dir: str | Path,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress: bool = False,
) -> SweepOutcome:
    """Run every uncached (point, seed), cache it, and return the tidy table."""
    cache_dir = Path(out_dir) / "cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    all_jobs = jobs_for(plan)
    records: dict[str, Record] = {}
    for job in all_jobs:
        cached = _read_cache(cache_dir / f"{job.key}.json")
        if cached is not None:
            records[job.key] = cached
    todo = list({job.key: job for job in all_jobs if job.key not in records}.values())
    bar = tqdm(total=len(todo), desc=f"sweep {plan.name}", unit="run", disable=not progress)
    with bar:
        for index, record in execute([j.task for j in todo], executor, jobs, address):
            job = todo[index]
            _write_cache(cache_dir / f"{job.key}.json", job, record)
            records[job.key] = record
            bar.update()
    table = build_table(plan, [(job, records[job.key]) for job in all_jobs])
    return SweepOutcome(table, len(todo), len(all_jobs) - len(todo))
