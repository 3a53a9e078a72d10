"""Sweeps: one base scenario, many override sets, one tidy table of results.

docs/capacity.md ("servesim sweep") gives the sweep file's fields and the table's
columns. Every point's scenario is validated before anything runs; each (point, seed)
is cached in ``OUT/cache/<hash>.json`` (``config_hash``), so a re-run computes only
what changed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import (
    Field,
    PositiveFloat,
    ValidationError,
    model_validator,
)
from tqdm import tqdm

import sim
from sim.config import Frozen, anchored, named_files
from sim.errors import ConfigError, format_error
from sim.metrics.slo_targets import SloTarget, meets, targets_from_mapping
from sim.planning.pricing import gpu_price_per_hour, usd_per_unit
from sim.planning.sweep_exec import Record, Task, execute, task_for
from sim.scenario import Scenario, scenario_from_dict, set_dotted
from sim.scenario.overrides import replaces
from sim.scenario.strict_yaml import read_yaml

MAX_SWEEP_RUNS = 100_000
"""Points x seeds a sweep may ask for. Checking a point's scenario takes
~0.3 ms (1,000 points of sweep_chat.yaml's base in 0.3 s) and a run of it
seconds: a million-point grid or a seed count of 10**12 spent minutes
validating (or building the seed list) before failing or running at all."""

# The keys that set a point's load (the last: clients under a cap, sim.planning.served).
LOAD_KEYS = (
    "workload.arrival.rate_per_s",
    "workload.time_scale",
    "workload.num_users",
    "workload.max_concurrency",
)


class SweepConfig(Frozen):
    """A sweep file: base scenario, grid or points, seeds, SLOs, price."""

    name: str | None = Field(default=None, min_length=1)
    description: str = ""
    scenario: str = Field(min_length=1)
    overrides: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] | None = None
    points: list[dict[str, Any]] | None = None
    seeds: int | list[int] = 1
    slo: dict[str, float] = Field(default_factory=dict)
    # One price for every point, or a price per hardware name (a grid over GPUs).
    gpu_price_per_hour: PositiveFloat | dict[str, PositiveFloat] | None = None

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        if self.grid is None and self.points is None:
            raise ValueError("give a grid, a list of points, or both")
        if self.grid is not None and (not self.grid or any(not v for v in self.grid.values())):
            raise ValueError("grid: every key needs a non-empty list of values")
        if self.points is not None and not self.points:
            raise ValueError("points: give at least one point")
        if isinstance(self.seeds, int) and self.seeds < 1:
            raise ValueError("seeds: a count must be >= 1")
        if isinstance(self.seeds, list) and (
            not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0
        ):
            raise ValueError("seeds: a list must be non-empty, distinct and >= 0")
        grid = self.grid or {}

        def lost(key: str, later: dict[str, Any]) -> str | None:
            """``key`` in words if ``later`` (set after it) replaces it (the same key or
            a section holding it), else None."""
            by = next((k for k in later if replaces(k, key)), None)
            return None if by is None else key if by == key else f"{key} (in {by})"

        for index, point in enumerate(self.points or []):
            for key in point:
                # override_sets lets the grid's value win: the point's would be lost.
                if (what := lost(key, grid)) is not None:
                    raise ValueError(f"points[{index}] and grid both set {what}; set it in one")
        for key in self.overrides:
            # A point's value replaces the shared one (its default); one every point
            # replaces is used by none, silently.
            if (what := lost(key, grid)) is not None:
                raise ValueError(f"overrides and grid both set {what}; set it in one")
            if self.points and all(lost(key, point) is not None for point in self.points):
                raise ValueError(f"overrides and every point both set {key}; set it in one")
        num_seeds = self.seeds if isinstance(self.seeds, int) else len(self.seeds)
        num_runs = math.prod(len(v) for v in (self.grid or {}).values()) * num_seeds
        num_runs *= len(self.points or [{}])
        if num_runs > MAX_SWEEP_RUNS:
            raise ValueError(
                f"{num_runs:,} runs (points x seeds), more than {MAX_SWEEP_RUNS:,}: "
                "split the sweep or use fewer values or seeds"
            )
        if isinstance(self.seeds, list) and "seed" in self.overrides:
            # A list of seeds is each run's: the overrides' seed would be no run's.
            raise ValueError("overrides: seed is set by the sweep's seeds: list; give one")
        for where, keys in (("grid", self.grid or {}), *(("points", p) for p in self.points or [])):
            if "seed" in keys:
                # Each run's seed is the sweep's (seeds:); the table's seed column is its.
                raise ValueError(
                    f"{where}: seed is set by the sweep's seeds: field (a count or a list, "
                    "e.g. seeds: [1, 2]); vary it there"
                )
        return self

    def override_sets(self) -> list[dict[str, Any]]:
        """One dict of overrides per point, in file order (grid: last key fastest; with
        points too, every point crossed with every grid combination, points outermost)."""
        grid = self.grid or {}
        keys = list(grid)
        combos = [dict(zip(keys, v, strict=True)) for v in itertools.product(*grid.values())]
        return [{**point, **combo} for point in (self.points or [{}]) for combo in combos]


@dataclass(frozen=True)
class SweepPoint:
    """One validated configuration of the sweep and the seeds to run it with."""

    index: int
    overrides: dict[str, Any]
    scenario: Scenario
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: every point's scenario, ready to run."""

    path: Path
    config: SweepConfig
    points: tuple[SweepPoint, ...]
    targets: tuple[SloTarget, ...]

    @property
    def name(self) -> str:
        """The sweep's name (default: the file's stem)."""
        return self.config.name or self.path.stem

    @property
    def override_keys(self) -> list[str]:
        """Every key some point overrides, in first-seen order."""
        return list(dict.fromkeys(k for p in self.points for k in p.overrides))

    @property
    def varying_keys(self) -> list[str]:
        """Override keys whose value differs between points."""
        return [
            key
            for key in self.override_keys
            if len({json.dumps(p.overrides.get(key), sort_keys=True) for p in self.points}) > 1
        ]

    @property
    def load_key(self) -> str | None:
        """The varied key that sets the load, if any (rate, time scale, users or clients)."""
        return next((key for key in LOAD_KEYS if key in self.varying_keys), None)


@dataclass(frozen=True)
class Job:
    """One simulation of the sweep: a point under one seed."""

    point: SweepPoint
    seed: int
    key: str
    task: Task


def load_sweep(path: str | Path) -> SweepPlan:
    """Read a sweep file and validate it and every point's scenario."""
    path = Path(path)
    doc = read_yaml(path, "sweep")
    try:
        config = SweepConfig.model_validate(doc)
    except ValidationError as error:
        raise ConfigError(format_error(str(path), error, doc)) from None
    targets = targets_from_mapping(config.slo, f"{path}: slo")
    scenario_path = anchored(config.scenario, path.parent).resolve()
    try:
        base_doc = read_yaml(scenario_path, "scenario")
    except ConfigError as error:
        raise ConfigError(f"{path}: scenario: {error}") from None
    points = []
    for index, overrides in enumerate(config.override_sets()):
        label = ", ".join(f"{k}={v}" for k, v in overrides.items())
        source = f"{path}: point {index} ({label})"
        point_doc = copy.deepcopy(base_doc)
        for key, value in {**config.overrides, **overrides}.items():
            set_dotted(point_doc, str(key), value, source)
        scenario = scenario_from_dict(point_doc, source, scenario_path.parent)
        seeds = config.seeds
        if not isinstance(seeds, list):  # a count: the scenario's seed, +1, ...
            seeds = [scenario.seed + k for k in range(seeds)]
        points.append(SweepPoint(index, overrides, scenario, tuple(seeds)))
    return SweepPlan(path, config, tuple(points), targets)


def config_hash(scenario_doc: dict[str, Any], base_dir: Path) -> str:
    """Hash of a validated scenario dict (seed included), its base folder, the version
    and the contents of the files it names (``input_digests``)."""
    payload = {"scenario": scenario_doc, "base_dir": str(base_dir), "version": sim.__version__}
    files = input_digests(scenario_doc, base_dir)
    if files:  # (a scenario naming none keeps the key it had)
        payload["files"] = files
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def input_digests(doc: Any, base_dir: Path) -> dict[str, str]:
    """The sha256 of each file a string of ``doc`` names (``named_files``), by path: a
    trace, length list or table edited in place is another run, not a cached one."""
    if isinstance(doc, dict | list):
        found: dict[str, str] = {}
        for value in doc.values() if isinstance(doc, dict) else doc:
            found |= input_digests(value, base_dir)
        return found
    return dict(_named_digests(doc, base_dir)) if isinstance(doc, str) else {}


@functools.lru_cache(maxsize=1024)
def _named_digests(text: str, base_dir: Path) -> tuple[tuple[str, str], ...]:
    """``input_digests`` of one string (memoised: every point of a sweep names the same
    files; ``jobs_for`` clears it, so an edit between two calls is read)."""
    found = []
    for file in named_files(text, base_dir):
        digest = hashlib.sha256()
        try:
            with file.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        except OSError:
            continue  # unreadable: the run says so
        found.append((str(file), digest.hexdigest()))
    return tuple(found)


def jobs_for(plan: SweepPlan) -> list[Job]:
    """Every (point, seed) of the plan with its cache key and task."""
    jobs = []
    _named_digests.cache_clear()  # files read afresh: one may have changed since
    for point in plan.points:
        for seed in point.seeds:
            scenario = point.scenario.model_copy(update={"seed": seed})
            doc = scenario.model_dump(mode="json")
            task = task_for(doc, scenario)  # relative paths from the scenario file's folder
            jobs.append(Job(point, seed, config_hash(doc, Path(task["base_dir"])), task))
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


def _cell(value: Any) -> Any:
    """Override values as table cells: scalars as they are, the rest as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)


def config_label(plan: SweepPlan, overrides: dict[str, Any]) -> str:
    """Short name of a configuration: its varied keys other than the load."""
    keys = [k for k in plan.varying_keys if k != plan.load_key]
    if not keys:
        return plan.name
    tails = [k.rsplit(".", 1)[-1] for k in keys]
    names = tails if len(set(tails)) == len(tails) else keys
    return ", ".join(f"{n}={_cell(overrides.get(k))}" for n, k in zip(names, keys, strict=True))


def build_table(plan: SweepPlan, results: list[tuple[Job, Record]]) -> pd.DataFrame:
    """One row per (point, seed): overrides, seed, summary keys, cost, SLO verdict."""
    keys = plan.override_keys
    rows = []
    for job, record in results:
        scenario = job.point.scenario
        price = gpu_price_per_hour(scenario.hardware.name, plan.config.gpu_price_per_hour)
        num_gpus = scenario.num_gpus
        row: dict[str, Any] = {"point": job.point.index}
        row.update({key: _cell(job.point.overrides.get(key)) for key in keys})
        row |= {"seed": job.seed, "config": config_label(plan, job.point.overrides)}
        row |= {"config_hash": job.key, "hardware": scenario.hardware.name}
        row.update(record)
        row["seed"] = job.seed
        # The summary says the same count; set again so that a record cached before
        # summary.json counted every replica (one replica's then) reads right.
        row["num_gpus"] = num_gpus
        row["gpu_price_per_hour"] = price
        requests_per_s = record.get("request_throughput")
        tokens_per_s = record.get("output_throughput")
        row["gpu_hours_per_1k_requests"] = 1000 * usd_per_unit(requests_per_s, num_gpus, 1.0)
        row["usd_per_1k_requests"] = (
            None if price is None else 1000 * usd_per_unit(requests_per_s, num_gpus, price)
        )
        row["usd_per_million_output_tokens"] = (
            None if price is None else 1e6 * usd_per_unit(tokens_per_s, num_gpus, price)
        )
        row["slo_met"] = meets(record, plan.targets) if plan.targets else None
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["point", "seed"], kind="stable").reset_index(drop=True)


def write_table(table: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """``results.parquet`` and ``results.csv`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.parquet", out / "results.csv"]
    table.to_parquet(paths[0], index=False)
    table.to_csv(paths[1], index=False)
    return paths
