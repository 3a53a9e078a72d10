"""Capacity search: the highest load at which every SLO target holds.

The load knob depends on the workload: ``arrival.rate_per_s`` (synthetic),
``time_scale`` (trace; the rate is the trace's own rate over ``time_scale``)
or ``num_users`` (closed loop, an integer).

Each load is simulated with the same ``num_seeds`` seeds (common random
numbers: request lengths do not depend on the rate, so neighbouring loads see
the same requests). For each target, the mean over seeds of its statistic and
a 95% Student-t interval of that mean classify the load:

- ``pass``: every target's upper bound is within its limit;
- ``fail``: some target's lower bound is beyond its limit;
- ``unclear``: neither; the noise band around the answer.

Why means and t intervals rather than a majority vote: a vote over 3 seeds
discards how far each run is from the limit and yields no interval, while the
t interval turns the spread between seeds into the answer's uncertainty.
Assuming the statistics grow with load, the true capacity (where the expected
statistic meets its limit) lies between the highest ``pass`` load below the
lowest ``fail`` load and that ``fail`` load, each side at ~95% confidence.

Search: bracket (double or halve from the scenario's load until both a pass
and a fail are found), then bisect the widest of three gaps: next to each end
of the bracket (to narrow the interval) and where the mean crosses the limit
(to sharpen the estimate), until the bracket is narrower than ``rel_width`` of
its top, or those gaps are (the interval is then as narrow as the noise
allows), or ``max_sims`` simulations are spent. The point estimate interpolates
where the worst mean statistic / limit ratio crosses 1; a last evaluation there
gives the goodput and latencies at capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sim.errors import ConfigError
from sim.scenario import Scenario, scenario_from_dict
from sim.slo_targets import SloTarget, metric_value, per_request_slo
from sim.sweep import set_dotted
from sim.sweep_exec import Record, execute

Status = Literal["pass", "fail", "unclear"]

# Two-sided 95% Student-t critical values by degrees of freedom (1..30).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
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
    from sim.workload import generate_open_loop

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
    ratio: float  # worst mean statistic / limit over targets (> 1: fails on average)

    def mean_of(self, key: str) -> float | None:
        """Mean over seeds of a summary field (``None`` if never set)."""
        values = [r[key] for r in self.records if r.get(key) is not None]
        return float(np.mean(values)) if values else None


def judge(load: float, records: list[Record], targets: Sequence[SloTarget]) -> LoadPoint:
    """Classify one load from its runs (see module docstring)."""
    means, halves, status, ratio = {}, {}, "pass", 0.0
    failed = False
    for target in targets:
        mean, half = mean_interval([metric_value(r, target) for r in records])
        means[target.name], halves[target.name] = mean, half
        ratio = max(ratio, mean / target.limit_ms)
        if mean - half > target.limit_ms:
            failed = True
        elif mean + half > target.limit_ms:
            status = "unclear"
    return LoadPoint(load, records, means, halves, "fail" if failed else status, ratio)  # type: ignore[arg-type]


@dataclass
class CapacitySearch:
    """The result: bracket, estimate, every evaluated load, and why it stopped."""

    knob: LoadKnob
    targets: tuple[SloTarget, ...]
    seeds: tuple[int, ...]
    points: list[LoadPoint] = field(default_factory=list)
    lower: float | None = None  # highest pass below `upper`
    upper: float | None = None  # lowest fail
    estimate: float | None = None
    at_estimate: LoadPoint | None = None
    stop_reason: str = ""
    num_sims: int = 0


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
        seeds = tuple(scenario.seed + k for k in range(num_seeds))
        self.result = CapacitySearch(knob, tuple(targets), seeds)

    def evaluate(self, load: float) -> LoadPoint:
        """Simulate ``load`` under every seed and record its verdict."""
        knob = self.result.knob
        tasks = []
        for seed in self.result.seeds:
            doc = {**self.doc, "seed": seed}
            doc["workload"] = dict(doc["workload"])
            set_dotted(doc, knob.key, knob.value(load), "capacity")
            scenario_from_dict(doc, f"capacity search at {knob.key}={knob.value(load)}")
            tasks.append({"scenario": doc, "base_dir": str(self.base_dir)})
        records: list[Record] = [{}] * len(tasks)
        for index, record in execute(tasks, "local", self.jobs):
            records[index] = record
        point = judge(load, records, self.result.targets)
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


def _crossing(points: list[LoadPoint], lower: float, upper: float) -> float:
    """Load where the worst mean ratio crosses 1, linear between evaluated loads."""
    inside = sorted((p for p in points if lower <= p.load <= upper), key=lambda p: p.load)
    for a, b in zip(inside, inside[1:], strict=False):
        if a.ratio <= 1.0 < b.ratio:
            if not math.isfinite(b.ratio):
                return a.load
            return a.load + (1.0 - a.ratio) * (b.load - a.load) / (b.ratio - a.ratio)
    return lower


def _gaps(points: list[LoadPoint], lower: float, upper: float) -> list[tuple[float, float]]:
    """Gaps worth bisecting: next to each end of the bracket, and where the mean crosses."""
    inside = sorted((p for p in points if lower <= p.load <= upper), key=lambda p: p.load)
    gaps = [(inside[0].load, inside[1].load), (inside[-2].load, inside[-1].load)]
    for a, b in zip(inside, inside[1:], strict=False):
        if a.ratio <= 1.0 < b.ratio:
            gaps.append((a.load, b.load))
            break
    return gaps


def search(searcher: Searcher, rel_width: float = 0.05, max_sims: int = 60) -> CapacitySearch:
    """Bracket, bisect and estimate (see module docstring); bounded by ``max_sims``."""
    if not 0 < rel_width < 1:
        raise ConfigError(f"--rel-width must be in (0, 1), got {rel_width}")
    res, knob = searcher.result, searcher.result.knob
    per_point = len(res.seeds)
    if max_sims < 2 * per_point:
        raise ConfigError(f"--max-sims must be >= 2 x seeds = {2 * per_point}, got {max_sims}")

    def room() -> bool:  # keeps one evaluation in reserve for the estimate
        return res.num_sims + 2 * per_point <= max_sims

    def snap(load: float) -> float:
        return float(max(1, math.floor(load))) if knob.integer else load

    start = snap(knob.start)
    searcher.evaluate(start)
    while res.upper is None:
        top = max(p.load for p in res.points)
        if top >= start * 2**MAX_DOUBLINGS or not room():
            res.stop_reason = f"no SLO failure found up to {top:g} {knob.unit}"
            break
        searcher.evaluate(snap(2 * top))
    while res.upper is not None and res.lower is None:
        bottom = min(p.load for p in res.points)
        lower = snap(bottom / 2)
        if lower >= bottom or bottom <= start * 2.0**-MAX_DOUBLINGS or not room():
            res.stop_reason = f"the SLOs fail even at {bottom:g} {knob.unit}"
            break
        searcher.evaluate(lower)
    while res.lower is not None and res.upper is not None:
        lo, hi = res.lower, res.upper
        step = 1.0 if knob.integer else 0.0
        if hi - lo <= max(rel_width * hi, step):
            res.stop_reason = f"converged: interval within {rel_width:.0%}"
            break
        a, b = max(_gaps(res.points, lo, hi), key=lambda g: g[1] - g[0])
        if b - a <= max(rel_width * hi / 2, step):
            res.stop_reason = "noise-limited: more seeds or requests would narrow the interval"
            break
        if not room():
            res.stop_reason = f"stopped at --max-sims {max_sims}"
            break
        searcher.evaluate(math.floor((a + b) / 2) if knob.integer else (a + b) / 2)
    _estimate(searcher)
    return res


def _estimate(searcher: Searcher) -> None:
    """Set the point estimate and simulate it (unless already simulated).

    If that last run confidently fails (noise put the crossing too high), the
    estimate is recomputed with it and the figures come from the nearest
    evaluated load below.
    """
    res = searcher.result
    if res.lower is None:
        res.estimate = 0.0
        return
    res.estimate = _crossing_or_lower(res)
    known = {p.load: p for p in res.points}
    point = known.get(res.estimate) or searcher.evaluate(res.estimate)
    if point.status == "fail":
        res.estimate = _crossing_or_lower(res)
        below = [p for p in res.points if p.load <= res.estimate]
        point = max(below, key=lambda p: p.load)
    res.at_estimate = point


def _crossing_or_lower(res: CapacitySearch) -> float:
    assert res.lower is not None
    if res.upper is None:
        return res.lower  # a lower bound only: no load broke the SLOs
    crossing = _crossing(res.points, res.lower, res.upper)
    if res.knob.integer:
        crossing = min(max(math.floor(crossing), res.lower), res.upper - 1)
    return crossing
