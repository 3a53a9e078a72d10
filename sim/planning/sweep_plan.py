"""What a sweep is made of: its file's configuration, its points, its jobs.

Data only, shared by the sweep runner (``sweep``) and the results table
(``sweep_table``), so that neither needs the other.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.metrics.slo_targets import SloTarget
from sim.planning.sweep_exec import Task
from sim.scenario import Scenario

LOAD_KEYS = ("workload.arrival.rate_per_s", "workload.time_scale", "workload.num_users")


class SweepConfig(BaseModel):
    """A sweep file: base scenario, grid or points, seeds, SLOs, price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1)
    description: str = ""
    scenario: str = Field(min_length=1)
    overrides: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] | None = None
    points: list[dict[str, Any]] | None = None
    seeds: int | list[int] = 1
    slo: dict[str, float] = Field(default_factory=dict)
    gpu_price_per_hour: float | None = Field(default=None, gt=0)

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
        return self

    def override_sets(self) -> list[dict[str, Any]]:
        """One dict of overrides per point, in file order (grid: last key fastest).

        With both a grid and points, every point is crossed with every grid
        combination (points outermost).
        """
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
    base_dir: Path
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
        """The varied key that sets the load, if any (rate, time scale or users)."""
        return next((key for key in LOAD_KEYS if key in self.varying_keys), None)


@dataclass(frozen=True)
class Job:
    """One simulation of the sweep: a point under one seed."""

    point: SweepPoint
    seed: int
    key: str
    task: Task
