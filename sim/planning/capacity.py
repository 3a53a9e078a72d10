"""Capacity search: the highest load that is served and at which every SLO target holds.

Served: the server keeps up with the offered rate, its queue does not grow
(:mod:`sim.planning.served`). Without that check a loose tail SLO holds at any
rate once the request count is finite, and the search would run off to
millions of req/s.

The load knob depends on the workload: ``arrival.rate_per_s`` (synthetic),
``time_scale`` (trace; the rate is the trace's own rate over ``time_scale``)
or ``num_users`` (closed loop, an integer).

Each load is simulated with the same ``num_seeds`` seeds: common random
numbers, so request lengths and the shape of the arrival sequence do not
depend on the rate and neighbouring loads see the same requests. A target
holds *on average* at a load when the mean over seeds of its statistic is
within the limit; a 95% Student-t interval of that mean also classifies the
load as ``pass`` (every upper bound within its limit), ``fail`` (some lower
bound beyond it) or ``unclear`` (the noise band around the answer). A trace
replay draws nothing at random, so it runs under one seed and its interval
only reflects the search's resolution.

Why means and t intervals rather than a majority vote: a vote over 3 seeds
discards how far each run is from the limit and yields no interval, while the
t interval turns the spread between seeds into the answer's uncertainty.

The search itself (bracket, bisect, bound) is in :mod:`sim.planning.capacity_search`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from sim.errors import ConfigError
from sim.metrics.slo_targets import SloTarget, metric_value, per_request_slo
from sim.planning.served import SERVED_MIN_RATIO
from sim.planning.sweep_exec import Record, execute
from sim.scenario import Scenario, scenario_from_dict, set_dotted

Status = Literal["pass", "fail", "unclear"]

# Two-sided 95% Student-t critical values by degrees of freedom (1..30).
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
MAX_DOUBLINGS = 20


def t95(dof: int) -> float:
    """Two-sided 95% critical value of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError("need at least 1 degree of freedom")
    if dof <= len(_T95):
        return _T95[dof - 1]
    return 2.000 if dof <= 60 else 1.980 if dof <= 120 else 1.960


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% t half-width of ``values`` (half-width 0 for one value or an inf)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2 or not np.all(np.isfinite(x)):
        return mean, 0.0
    return mean, t95(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)


@dataclass(frozen=True)
class LoadKnob:
    """Which scenario field sets the load, and how a load maps onto it."""

    kind: Literal["rate", "time_scale", "users"]
    key: str
    start: float
    base_rate_per_s: float | None = None  # a trace's rate at time_scale 1

    @property
    def integer(self) -> bool:
        """Closed-loop loads are user counts."""
        return self.kind == "users"

    @property
    def unit(self) -> str:
        """Unit of a load for reports."""
        return "users" if self.integer else "req/s"

    def value(self, load: float) -> float | int:
        """The field value giving ``load``."""
        if self.kind == "users":
            return int(load)
        if self.kind == "time_scale":
            assert self.base_rate_per_s is not None
            return self.base_rate_per_s / load
        return load


def load_knob(scenario: Scenario, base_dir: Path) -> LoadKnob:
    """The knob of a scenario's workload, starting at its current load."""
    workload = scenario.workload
    if workload.kind == "closed_loop":
        return LoadKnob("users", "workload.num_users", float(workload.num_users))
    if workload.kind == "synthetic":
        return LoadKnob("rate", "workload.arrival.rate_per_s", workload.arrival.rate_per_s)
    from sim.workload.generate import generate_open_loop

    if workload.arrival is not None:  # a length list (sharegpt): its own arrival process
        return LoadKnob("rate", "workload.arrival.rate_per_s", workload.arrival.rate_per_s)
    if workload.rate_per_s is not None:
        return LoadKnob("rate", "workload.rate_per_s", workload.rate_per_s)
    unscaled = workload.model_copy(update={"time_scale": 1.0})
    arrivals = generate_open_loop(unscaled, np.random.default_rng(0), base_dir).arrival_s
    span_s = float(arrivals[-1] - arrivals[0]) if arrivals.size >= 2 else 0.0
    if span_s <= 0:
        raise ConfigError(f"{workload.path}: a capacity search needs a trace spanning time")
    base_rate = (arrivals.size - 1) / span_s
    return LoadKnob("time_scale", "workload.time_scale", base_rate / workload.time_scale, base_rate)


@dataclass
class LoadPoint:
    """One load, simulated under every seed, and its verdict."""

    load: float
    records: list[Record]
    means: dict[str, float]
    half_widths: dict[str, float]
    status: Status
    ratio: float  # worst of mean statistic / limit and SERVED_MIN_RATIO / served ratio
    served: tuple[float, float] | None = None  # mean served ratio and its 95% half-width

    def mean_of(self, key: str) -> float | None:
        """Mean over seeds of a summary field (``None`` if never set)."""
        values = [r[key] for r in self.records if r.get(key) is not None]
        return float(np.mean(values)) if values else None


def _verdict(mean: float, half: float, limit: float) -> Status:
    """``fail`` when the interval lies beyond the limit, ``unclear`` when it straddles it."""
    if mean - half > limit:
        return "fail"
    return "unclear" if mean + half > limit else "pass"


def judge(
    load: float, records: list[Record], targets: Sequence[SloTarget], check_served: bool = True
) -> LoadPoint:
    """Classify one load from its runs (see module docstring).

    A load passes only if every target holds and, with ``check_served``
    (open-loop workloads), the server keeps up with it: the mean served ratio
    (:mod:`sim.planning.served`) is at least ``SERVED_MIN_RATIO``. A closed
    loop cannot be overloaded (users wait for their answers), so it skips that.
    """
    means: dict[str, float] = {}
    halves: dict[str, float] = {}
    verdicts: list[Status] = []
    ratio = 0.0
    for target in targets:
        mean, half = mean_interval([metric_value(r, target) for r in records])
        means[target.name], halves[target.name] = mean, half
        ratio = max(ratio, mean / target.limit_ms)
        verdicts.append(_verdict(mean, half, target.limit_ms))
    served = None
    ratios = [r["served_ratio"] for r in records if r.get("served_ratio") is not None]
    if check_served and ratios:
        mean, half = mean_interval(ratios)
        served = (mean, half)
        ratio = max(ratio, SERVED_MIN_RATIO / mean if mean > 0 else math.inf)
        # Served means a ratio at least the minimum: negate to reuse "at most a limit".
        verdicts.append(_verdict(-mean, half, -SERVED_MIN_RATIO))
    status: Status = next((v for v in ("fail", "unclear") if v in verdicts), "pass")
    return LoadPoint(load, records, means, halves, status, ratio, served)


@dataclass
class CapacitySearch:
    """The result: estimate, interval, every evaluated load, and why it stopped."""

    knob: LoadKnob
    targets: tuple[SloTarget, ...]
    seeds: tuple[int, ...]
    points: list[LoadPoint] = field(default_factory=list)
    lower: float | None = None  # highest `pass` load below `upper`
    upper: float | None = None  # lowest `fail` load
    cell: tuple[float | None, float | None] = (None, None)  # mean holds at [0], fails at [1]
    estimate: float | None = None
    at_estimate: LoadPoint | None = None
    stop_reason: str = ""
    num_sims: int = 0

    @property
    def interval(self) -> tuple[float | None, float | None]:
        """The ~95% interval, widened to hold the estimate if noise put it outside."""
        low, high, est = self.lower, self.upper, self.estimate
        if est is not None and low is not None:
            low = min(low, est)
        if est is not None and high is not None:
            high = max(high, est)
        return low, high


class Searcher:
    """Runs loads through the simulator and keeps the bracket up to date."""

    def __init__(
        self,
        scenario: Scenario,
        targets: Sequence[SloTarget],
        base_dir: Path,
        num_seeds: int = 3,
        jobs: int | None = 1,
        on_point: Callable[[LoadPoint, CapacitySearch], None] | None = None,
    ) -> None:
        if not targets:
            raise ConfigError("--slo: give at least one SLO target, e.g. ttft_p99_ms=500")
        if num_seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {num_seeds}")
        doc = scenario.model_dump(mode="json")
        slo = per_request_slo(targets)
        if slo is not None:  # goodput counts requests within the targets' limits
            doc["slo"] = slo.model_dump(exclude_none=True)
        self.doc, self.base_dir, self.jobs, self.on_point = doc, base_dir, jobs, on_point
        knob = load_knob(scenario, base_dir)
        if scenario.workload.kind == "trace":
            num_seeds = 1  # a replay draws nothing at random: every seed gives the same run
        seeds = tuple(scenario.seed + k for k in range(num_seeds))
        self.result = CapacitySearch(knob, tuple(targets), seeds)

    def evaluate(self, load: float) -> LoadPoint:
        """Simulate ``load`` under every seed and record its verdict."""
        knob = self.result.knob
        tasks = []
        for seed in self.result.seeds:
            doc = copy.deepcopy(self.doc)
            doc["seed"] = seed
            set_dotted(doc, knob.key, knob.value(load), "capacity")
            scenario_from_dict(doc, f"capacity search at {knob.key}={knob.value(load)}")
            tasks.append({"scenario": doc, "base_dir": str(self.base_dir)})
        records: list[Record] = [{}] * len(tasks)
        for index, record in execute(tasks, "local", self.jobs):
            records[index] = record
        point = judge(load, records, self.result.targets, knob.kind != "users")
        self.result.points.append(point)
        self.result.num_sims += len(tasks)
        self._update_bracket()
        if self.on_point is not None:
            self.on_point(point, self.result)
        return point

    def _update_bracket(self) -> None:
        res = self.result
        fails = [p.load for p in res.points if p.status == "fail"]
        res.upper = min(fails) if fails else None
        passes = [p.load for p in res.points if p.status == "pass"]
        passes = [x for x in passes if res.upper is None or x < res.upper]
        res.lower = max(passes) if passes else None
