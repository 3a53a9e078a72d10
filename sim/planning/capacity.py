"""Capacity search: the highest load that is served and at which every SLO target holds.

docs/capacity.md tells the method and why ("How the search decides", "Served, not only
within SLO", "What bound the answer"): the load knob (``load_knob``); each load run
under the same seeds and judged ``pass``, ``fail`` or ``unclear`` from a 95% Student-t
interval of each statistic's mean (``judge``); then, within ``max_num_sims``
simulations, a bracket (``_bracket``), a bisection on the mean to an estimate where the
worst mean / limit ratio crosses 1 (``crossing``), an interval probed and bisected
outwards (``_tighten``) and a last evaluation at the estimate (``_estimate``). An
answer above the configuration's own upper bound (``check_bound``) is refused.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from sim.api.build import cost_model_for, kv_blocks_for
from sim.errors import ConfigError
from sim.metrics.slo_targets import SloTarget, metric_value, per_request_slo
from sim.metrics.stats import MIN_TAIL_SAMPLES
from sim.planning.plan_bound import (
    QUANTILES,
    Limits,
    bound_holds,
    length_stats,
    optimistic_rate_per_s,
)
from sim.planning.served import SERVED_MIN_RATIO
from sim.planning.sweep_exec import Record, execute, task_for
from sim.scenario import (
    Scenario,
    layered,
    load_scenario,
    scenario_from_dict,
    set_dotted,
    set_keys,
)
from sim.workload.arrivals import MAX_CLOCK_S
from sim.workload.generate import generate_open_loop

Status = Literal["pass", "fail", "unclear"]

MAX_DOUBLINGS = 20
# A rate run of n requests ends near n / rate s; the lowest rate searched keeps that
# this many times below the clock's limit (MAX_CLOCK_S), room for the random spread
# of the last arrival (Poisson: sqrt(n) / rate; bursty gamma arrivals more).
CLOCK_ROOM = 4.0
# Why a search went no lower (``LoadKnob.clock_bound``), for its stop reason.
CLOCK_BOUND = "the lowest rate whose run the simulator's clock can hold"
# The served check's margin (1 - SERVED_MIN_RATIO) holds this many standard deviations
# of a run's served ratio, or a failing check may be noise (docs/capacity.md).
SERVED_MARGIN_SDS = 3.0
SERVED = "served ratio"  # the served check's name where constraints are named
MAX_CLIENTS_SHARE = 0.025
"""Clients at most this share of a run's requests (``LoadKnob.max_load``). The last
C requests of a capped run drain at a falling concurrency, lighter than the C
clients the answer claims, pulling the run's means off by about half of C / n
(5 % at C / n = 9 %, measured; within Little's 2 % at this share)."""
MIN_STEADY_REQUESTS = 10_000
"""Requests per run below which a capacity carries a caveat: a shorter run ends before
a server near saturation builds its backlog, so it reads capacity high (docs/capacity.md,
"How long a run")."""


def require_targets(targets: Sequence[SloTarget]) -> None:
    """Refuse a search for no SLO: every load would meet it."""
    if not targets:
        raise ConfigError("--slo: give at least one SLO target, e.g. --slo ttft_p99_ms=500")


def clock_min_rate_per_s(num_requests: int) -> float:
    """The lowest rate, req/s, whose run of ``num_requests`` the clock can hold
    (``MAX_CLOCK_S``, with ``CLOCK_ROOM`` for the last arrival's spread)."""
    return CLOCK_ROOM * num_requests / MAX_CLOCK_S


def check_target_rate(target_rate_per_s: float | None, num_requests: int | None = None) -> None:
    """Refuse a rate to size a fleet for that is not given (None), not > 0 or not finite
    (.inf would ask for infinitely many replicas), or, where runs of ``num_requests`` are
    simulated at it (plan's SLOs at the target), below ``clock_min_rate_per_s``."""
    if target_rate_per_s is None or not 0 < target_rate_per_s < math.inf:
        raise ConfigError("--target-rate must be > 0 and finite (requests per second)")
    if num_requests is not None and target_rate_per_s < clock_min_rate_per_s(num_requests):
        raise ConfigError(
            f"--target-rate {target_rate_per_s:g} is below "
            f"{clock_min_rate_per_s(num_requests):.3g} req/s, the lowest rate whose run of "
            f"{num_requests} requests the simulator's clock can hold (plan simulates the SLOs "
            "at the target); raise it"
        )


class RunLength(NamedTuple):
    """The ``--set`` overrides a capacity search runs with, the run length's among them;
    ``raised``: the line saying the scenario's run was lengthened and why, else None."""

    sets: list[str]
    raised: str | None = None


def run_length_overrides(path: str, sets: list[str], num_requests: int | None) -> RunLength:
    """``--num-requests`` as the override its workload kind needs; by default the
    scenario's own length, at least ``MIN_STEADY_REQUESTS`` for a synthetic workload
    sized by a request count (a trace is as long as it is; closed loops build no backlog)."""
    if num_requests is not None and num_requests < 1:
        raise ConfigError(f"--num-requests must be >= 1, got {num_requests}")
    for key in set_keys(sets) if num_requests is not None else ():
        if key in ("workload.num_requests", "workload.max_requests", "workload.duration_s"):
            # The override below would come last and replace the --set's length.
            raise ConfigError(
                f"--num-requests {num_requests} and --set {key} both set the run's length; give one"
            )
    workload = load_scenario(path, sets).workload
    raised = None
    if num_requests is None:
        if (
            workload.kind != "synthetic"
            or workload.num_requests is None
            or workload.num_requests >= MIN_STEADY_REQUESTS
        ):
            return RunLength(sets)
        num_requests = MIN_STEADY_REQUESTS
        raised = (
            f"run length: {num_requests} requests a run, raised from "
            f"{workload.num_requests} (the scenario's, with its --set; a shorter run ends "
            "before a server near saturation "
            "builds its backlog: it reads capacity high); --num-requests N sets it"
        )
    if workload.kind == "trace":
        return RunLength([*sets, f"workload.max_requests={num_requests}"])
    extra = [f"workload.num_requests={num_requests}"]
    if workload.kind == "synthetic" and workload.duration_s is not None:
        extra.append("workload.duration_s=null")
    # A raise replaces the --set's own count (``raised`` says so): a layer, not a key twice.
    return RunLength(layered(sets, extra), raised)


def t95(dof: int) -> float:
    """Two-sided 95% critical value of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError("need at least 1 degree of freedom")
    from scipy.stats import t  # imported when a search first needs it: start-up stays fast

    return float(t.ppf(0.975, dof))


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

    kind: Literal["rate", "time_scale", "users", "concurrency"]
    key: str
    start: float
    base_rate_per_s: float | None = None  # a trace's rate at time_scale 1
    # The most load a run can measure (None: no limit). Under a cap, a share of the
    # run's requests (MAX_CLIENTS_SHARE).
    max_load: float | None = None
    # The least load whose run the clock can hold (None: no limit): at lower rates a
    # run of n requests would outlast MAX_CLOCK_S and be refused (CLOCK_ROOM).
    min_load: float | None = None

    @property
    def integer(self) -> bool:
        """Closed-loop loads are user counts, capped ones client counts."""
        return self.kind in ("users", "concurrency")

    @property
    def unit(self) -> str:
        """Unit of a load for reports."""
        return {"users": "users", "concurrency": "clients"}.get(self.kind, "req/s")

    def value(self, load: float) -> float | int:
        """The field value giving ``load``."""
        if self.integer:
            return int(load)
        if self.kind == "time_scale":
            assert self.base_rate_per_s is not None
            return self.base_rate_per_s / load
        return load

    def above(self, x: float, start: float) -> float | None:
        """The next load up from ``x`` (double, at most ``max_load``); None at the top."""
        if x >= start * 2**MAX_DOUBLINGS or (self.max_load is not None and x >= self.max_load):
            return None
        higher = float(math.floor(2 * x)) if self.integer else 2 * x
        return higher if self.max_load is None else min(higher, self.max_load)

    def below(self, x: float, start: float) -> float | None:
        """The next load down from ``x`` (halve, at least 1 for a count); None at the
        bottom, where a lower run would outlast the clock (``clock_bound``). The one way
        down for every probe of the search, so none can ask for a run the clock refuses."""
        lower = float(max(1, math.floor(x / 2))) if self.integer else x / 2
        if lower >= x or x <= start * 2.0**-MAX_DOUBLINGS or self.clock_bound(x):
            return None
        return lower

    def clock_bound(self, x: float) -> bool:
        """Whether halving ``x`` would go below ``min_load`` (the clock's lowest rate)."""
        return self.min_load is not None and x / 2 < self.min_load


def load_knob(scenario: Scenario) -> LoadKnob:
    """The knob of a scenario's workload, starting at its current load."""
    workload = scenario.workload
    if workload.kind == "closed_loop":
        return LoadKnob("users", "workload.num_users", float(workload.num_users))
    limit = workload.max_concurrency
    if limit is not None:
        return _concurrency_knob(workload, limit)
    if workload.kind == "synthetic":
        least = None
        if workload.num_requests is not None:
            least = clock_min_rate_per_s(workload.num_requests)
        rate = workload.arrival.rate_per_s
        return LoadKnob("rate", "workload.arrival.rate_per_s", rate, min_load=least)

    if workload.arrival is not None:  # a length list (sharegpt): its own arrival process
        return LoadKnob("rate", "workload.arrival.rate_per_s", workload.arrival.rate_per_s)
    if workload.rate_per_s is not None:
        return LoadKnob("rate", "workload.rate_per_s", workload.rate_per_s)
    unscaled = workload.model_copy(update={"time_scale": 1.0})
    arrivals = generate_open_loop(unscaled, np.random.default_rng(0), scenario.base_dir).arrival_s
    span_s = float(arrivals[-1] - arrivals[0]) if arrivals.size >= 2 else 0.0
    if span_s <= 0:
        raise ConfigError(f"{workload.path}: a capacity search needs a trace spanning time")
    base_rate = (arrivals.size - 1) / span_s
    return LoadKnob("time_scale", "workload.time_scale", base_rate / workload.time_scale, base_rate)


def _concurrency_knob(workload: Any, limit: int) -> LoadKnob:
    """Under a cap the load is the number of clients (``max_concurrency``), each
    sending as soon as its last answer is in: GuideLLM's concurrent streams,
    ``vllm bench serve --request-rate inf --max-concurrency C``. A cap on arrivals
    with their own rate is two load knobs at once, and is refused."""
    if workload.kind != "synthetic" or not math.isinf(workload.arrival.rate_per_s):
        rate = (
            f"workload.arrival.rate_per_s {workload.arrival.rate_per_s:g}"
            if workload.kind == "synthetic"
            else "the trace's own arrival times"
        )
        raise ConfigError(
            f"workload.max_concurrency {limit}: a capacity under a cap searches the number "
            f"of clients, but {rate} also sets the load; set "
            "workload.arrival.rate_per_s=.inf (each client sends as soon as its last answer "
            "is in) to search over clients, or remove workload.max_concurrency to search "
            "over the rate"
        )
    assert workload.num_requests is not None  # an infinite rate needs it (validated)
    most = float(max(1, math.floor(MAX_CLIENTS_SHARE * workload.num_requests)))
    return LoadKnob("concurrency", "workload.max_concurrency", min(float(limit), most), None, most)


def capacity_rate_per_s(search: CapacitySearch, point: LoadPoint | None) -> float | None:
    """Requests per second one replica serves at ``point``'s load: the offered rate
    (open loop), the measured throughput (closed loop) or the clients' send rate while
    all are busy (under a cap: ``sim.planning.sweep_exec.offered_rate_per_s``)."""
    if point is None:
        return None
    if search.knob.kind == "users":
        return point.mean_of("request_throughput")
    if search.knob.kind == "concurrency":
        return point.mean_of("offered_rate_per_s")
    return point.load


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
    binding: str = ""  # the constraint giving ``ratio``: a target's name or SERVED

    def mean_of(self, key: str) -> float | None:
        """Mean over seeds of a summary field (``None`` if never set)."""
        values = [r[key] for r in self.records if r.get(key) is not None]
        return float(np.mean(values)) if values else None


def _verdict(mean: float, half: float, limit: float) -> Status:
    """``fail`` when the interval lies beyond the limit, ``unclear`` when it straddles it."""
    if mean - half > limit:
        return "fail"
    return "unclear" if mean + half > limit else "pass"


def judge(load: float, records: list[Record], targets: Sequence[SloTarget]) -> LoadPoint:
    """Classify one load from its runs: it passes when every target holds and, where
    its runs have a served ratio (:mod:`sim.planning.served`), the mean one is at least
    ``SERVED_MIN_RATIO``."""
    means: dict[str, float] = {}
    halves: dict[str, float] = {}
    verdicts: list[Status] = []
    ratios_to_limit: dict[str, float] = {}
    for target in targets:
        mean, half = mean_interval([metric_value(r, target) for r in records])
        means[target.name], halves[target.name] = mean, half
        ratios_to_limit[target.name] = mean / target.limit_ms
        verdicts.append(_verdict(mean, half, target.limit_ms))
    served = None
    ratios = [r["served_ratio"] for r in records if r.get("served_ratio") is not None]
    if ratios:
        mean, half = mean_interval(ratios)
        served = (mean, half)
        ratios_to_limit[SERVED] = SERVED_MIN_RATIO / mean if mean > 0 else math.inf
        # Served means a ratio at least the minimum: negate to reuse "at most a limit".
        verdicts.append(_verdict(-mean, half, -SERVED_MIN_RATIO))
    status: Status = next((v for v in ("fail", "unclear") if v in verdicts), "pass")
    # A NaN statistic (no request completed) binds nothing, as max() always skipped it.
    known = {name: r for name, r in ratios_to_limit.items() if not math.isnan(r)}
    binding = max(known, key=lambda name: known[name], default="")
    ratio = max(0.0, known.get(binding, 0.0))
    return LoadPoint(load, records, means, halves, status, ratio, served, binding)


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
    binding: str | None = None  # the constraint that failed at the cell's upper end
    caveats: list[str] = field(default_factory=list)  # why the answer may be off

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

    # The configuration's own upper bound on its capacity in req/s, if known (module
    # docstring); None: unchecked.
    bound_rate_per_s: float | None = None

    def __init__(
        self,
        scenario: Scenario,
        targets: Sequence[SloTarget],
        num_seeds: int = 3,
        jobs: int | None = 1,
        on_point: Callable[[LoadPoint, CapacitySearch], None] | None = None,
        bound_rate_per_s: float | None = None,
    ) -> None:
        require_targets(targets)
        if num_seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {num_seeds}")
        doc = scenario.model_dump(mode="json")
        slo = per_request_slo(targets)
        if slo is not None:  # goodput counts requests within the targets' limits
            doc["slo"] = slo.model_dump(exclude_none=True)
        self.doc, self.jobs, self.on_point = doc, jobs, on_point
        self.base_dir = scenario.base_dir  # its runs read their relative paths from there
        self.bound_rate_per_s = bound_rate_per_s
        knob = load_knob(scenario)
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
            source = f"capacity search at {knob.key}={knob.value(load)}"
            tasks.append(task_for(doc, scenario_from_dict(doc, source, self.base_dir)))
        records: list[Record] = [{}] * len(tasks)
        for index, record in execute(tasks, "local", self.jobs):
            records[index] = record
        _check_run_length(records, self.result.targets)
        _check_served_length(records)
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


def crossing(low: LoadPoint, high: LoadPoint) -> float:
    """Load where the worst mean ratio crosses 1, linear between two loads."""
    if not math.isfinite(high.ratio) or high.ratio <= low.ratio:
        return low.load
    share = (1.0 - low.ratio) / (high.ratio - low.ratio)
    load = low.load + min(max(share, 0.0), 1.0) * (high.load - low.load)
    # A ratio a rounding error under 1 (a served ratio of exactly 0.95) is at 1: its
    # own load, not a new one a hair above it that the search would simulate again.
    return low.load if math.isclose(load, low.load, rel_tol=1e-9) else load


def _room(res: CapacitySearch, max_num_sims: int) -> bool:
    """Whether simulations are left, keeping one evaluation in reserve for the estimate."""
    return res.num_sims + 2 * len(res.seeds) <= max_num_sims


def search(searcher: Searcher, rel_width: float = 0.05, max_num_sims: int = 60) -> CapacitySearch:
    """Bracket, bisect, bound and estimate (see module docstring)."""
    if not 0 < rel_width < 1:
        raise ConfigError(f"--rel-width must be in (0, 1), got {rel_width}")
    res, knob = searcher.result, searcher.result.knob
    if max_num_sims < 2 * len(res.seeds):
        raise ConfigError(
            f"--max-sims must be >= 2 x seeds = {2 * len(res.seeds)}, got {max_num_sims}"
        )
    step = 1.0 if knob.integer else 0.0
    start = float(max(1, math.floor(knob.start))) if knob.integer else knob.start
    a, b = _bracket(searcher, max_num_sims, start)
    reasons = []
    if a is not None and b is not None:
        while b - a > max(rel_width * b, step):
            if not _room(res, max_num_sims):
                reasons.append(f"stopped at --max-sims {max_num_sims}")
                break
            x = math.floor((a + b) / 2) if knob.integer else (a + b) / 2
            a, b = (x, b) if searcher.evaluate(x).ratio <= 1.0 else (a, x)
        else:
            reasons.append(f"estimate within {rel_width:.0%}")
        reasons.append(_tighten(searcher, max_num_sims, rel_width, step, start))
    elif a is None:
        reasons.append(f"the SLOs fail or the load is not served even at {b:g} {knob.unit}")
        if b is not None and knob.clock_bound(b):
            reasons.append(CLOCK_BOUND)
    else:
        reasons.append(f"the SLOs still hold on average at {a:g} {knob.unit}")
        if knob.max_load is not None and a >= knob.max_load:
            reasons.append(
                f"{a:g} {knob.unit} is {MAX_CLIENTS_SHARE:.1%} of the run's requests, the "
                "most a run measures: more need longer runs (--num-requests)"
            )
    res.cell, res.stop_reason = (a, b), "; ".join(r for r in reasons if r)
    _estimate(searcher, a, b)
    known = {p.load: p for p in res.points}
    failed = known.get(b) if b is not None else None
    res.binding = failed.binding if failed is not None else None
    res.caveats = caveats(res, failed)
    check_bound(res, searcher.bound_rate_per_s)
    return res


def check_bound(res: CapacitySearch, bound_rate_per_s: float | None) -> None:
    """Refuse an answer above the configuration's own upper bound (``bound_rate_per_s``,
    :mod:`sim.planning.plan_bound`: a contradiction, never printed): the estimate, and
    the interval's low end (a load that passed), in req/s."""
    if bound_rate_per_s is None:
        return
    known = {p.load: p for p in res.points}
    low = res.interval[0]
    claims = [("the answer", res.at_estimate)]
    if low is not None:
        claims.append(("the interval's low end", known.get(low)))
    for what, point in claims:
        rate = capacity_rate_per_s(res, point)
        if rate is not None and point is not None and rate > bound_rate_per_s:
            at = f" ({point.load:.4g} {res.knob.unit})" if res.knob.kind != "rate" else ""
            raise ConfigError(
                f"capacity: {what} {rate:.4g} req/s{at} exceeds this configuration's own upper "
                f"bound of {bound_rate_per_s:.4g} req/s (sim/planning/plan_bound.py: no "
                "request is cheaper than the engine's cheapest tokens); refused rather than "
                f"printed: the search is wrong here ({res.stop_reason})"
            )


def upper_bound_rate_per_s(
    scenario: Scenario, targets: Sequence[SloTarget], num_seeds: int
) -> float | None:
    """The scenario's optimistic capacity from its own cost model (plan's bound,
    :mod:`sim.planning.plan_bound`), where that bound holds (``bound_holds``) on one
    replica (it prices no cluster). None elsewhere, and where a lone request already
    breaks an SLO (the bound then speaks of the SLOs, not the rate)."""
    policy = scenario.scheduler
    if (
        not bound_holds(scenario)
        or policy.kind != "continuous"  # bound_holds says so; this narrows the type
        or scenario.cluster is not None
        or policy.max_num_seqs is None  # filled in by validation; None: not continuous
        or policy.max_num_batched_tokens is None
    ):
        return None
    limits = Limits(policy.max_num_seqs, policy.max_num_batched_tokens, policy.chunked_prefill)
    kv_tokens = kv_blocks_for(scenario) * scenario.engine.block_size_tokens
    lengths = length_stats(scenario, num_seeds)
    bound = optimistic_rate_per_s(cost_model_for(scenario), limits, kv_tokens, lengths, targets)
    return None if bound.infeasible else bound.rate_per_s


def tail_requests(q: float, beyond: float = MIN_TAIL_SAMPLES) -> int:
    """Requests per run that put ``beyond`` samples past quantile ``q``."""
    return math.ceil(beyond / (1.0 - q) - 1e-9)


def _fewest_requests(records: Sequence[Record]) -> int:
    """Requests the shortest of these runs was offered: completed or rejected."""
    offered = (int(r.get("completed") or 0) + int(r.get("num_rejected") or 0) for r in records)
    return min(offered, default=0)


def _check_run_length(records: Sequence[Record], targets: Sequence[SloTarget]) -> None:
    """Refuse runs too short for a percentile target: with fewer than 1 / (1 - q)
    requests no sample lies beyond a p-q statistic (the linear method puts it between
    the run's two largest), so it measures no tail."""
    num = _fewest_requests(records)
    for target in targets:
        q = QUANTILES.get(target.stat)  # None: a mean
        if q is not None and num < tail_requests(q, 1.0):
            raise ConfigError(
                f"--slo {target.name}: runs of {num} requests cannot estimate a "
                f"{target.stat} (no sample would lie beyond it); use --num-requests "
                f">= {tail_requests(q)} ({MIN_TAIL_SAMPLES} samples beyond the percentile)"
            )


def _check_served_length(records: Sequence[Record]) -> None:
    """Refuse runs too short to measure a served ratio (:mod:`sim.planning.served`):
    over its window of k arrivals (half the run) it moves in steps of 1 / k, and below
    1 / (1 - SERVED_MIN_RATIO) = 20 arrivals one request at the window's edge moves it
    past the check's margin, so the run's parity, not the server, sets the verdict."""
    num = _fewest_requests(records)
    if any(r.get("served_ratio") is not None for r in records):
        needed = 2 * tail_requests(SERVED_MIN_RATIO, 1.0)
        if num < needed:
            raise ConfigError(
                f"runs of {num} requests cannot tell whether the load is served (the "
                f"second half of the arrivals, whose completions it counts, needs "
                f"{needed // 2}); use --num-requests >= {needed} (a trace: more rows)"
            )


def caveats(res: CapacitySearch, failed: LoadPoint | None) -> list[str]:
    """Reasons the estimate may be off (docs/capacity.md), for the report and JSON."""
    out = []
    point = res.at_estimate
    num = _fewest_requests(point.records) if point is not None else 0
    for target in res.targets:
        q = QUANTILES.get(target.stat)  # None: a mean
        if point is not None and q is not None and num * (1.0 - q) < MIN_TAIL_SAMPLES:
            out.append(
                f"{target.name} rests on runs of {num} requests, about "
                f"{num * (1.0 - q):.0f} beyond the {target.stat} per run: noisy; "
                f"--num-requests >= {tail_requests(q)} gives {MIN_TAIL_SAMPLES}"
            )
    if point is not None and res.knob.kind == "rate" and 0 < num < MIN_STEADY_REQUESTS:
        out.append(  # a rate's runs only: clients build no backlog
            f"runs of {num} requests end before a server near saturation builds its "
            "steady backlog, so tail latencies read low and capacity high (chat.yaml: "
            "9% higher from 1,000 requests per run than from 10,000); "
            f"--num-requests >= {MIN_STEADY_REQUESTS} removes most of that"
        )
    if point is not None and res.knob.kind == "concurrency":
        # Every client sends its first request at 0 (as vllm bench serve and GuideLLM
        # start): a burst of C requests queued at once, whose TTFTs may be the tail.
        clients = int(point.load)
        for target in res.targets:
            q = QUANTILES.get(target.stat)  # None: a mean
            if q is not None and clients > num * (1.0 - q):
                out.append(
                    f"{target.name}: the {clients} clients' first requests are sent at once, "
                    f"more than the {num * (1.0 - q):.0f} requests beyond the {target.stat} "
                    f"of runs of {num}: that start-up burst may set it; --num-requests >= "
                    f"{tail_requests(q, 2 * clients)} measures the clients' steady state"
                )
    if failed is not None and failed.binding == SERVED:
        served_needed = served_num_requests_needed(failed)
        num = _fewest_requests(failed.records)
        if served_needed is not None and num >= 2 and served_needed > num:
            margin = 1.0 - SERVED_MIN_RATIO
            # needed = 2 k sqrt(2 L) / margin and the noise is sqrt(2 L) / (num / 2).
            noise_sd = served_needed * margin / (SERVED_MARGIN_SDS * num)
            out.append(
                f"the served check bound this answer at {failed.load:.3g} "
                f"{res.knob.unit}, where runs of {num} requests measure the served "
                f"ratio to about ±{noise_sd:.2f} (1 sd), against a margin of {margin:.2f}: "
                "the failure may be the runs' noise rather than overload; rerun with "
                f"--num-requests >= {served_needed}"
            )
    return out


def served_num_requests_needed(point: LoadPoint) -> int | None:
    """Requests per run that measure ``point``'s served ratio to within its margin
    (``SERVED_MARGIN_SDS`` sds of its noise, about ``sqrt(2 L) / (n / 2)`` with ``L``
    the mean number in system: docs/capacity.md); None when its runs lack the rate or
    latency to tell."""
    rate, e2el_ms = point.mean_of("offered_rate_per_s"), point.mean_of("mean_e2el_ms")
    if rate is None or e2el_ms is None:
        return None
    in_system = rate * e2el_ms / 1e3  # Little: mean requests in the system
    margin = 1.0 - SERVED_MIN_RATIO
    return math.ceil(2 * SERVED_MARGIN_SDS * math.sqrt(2.0 * in_system) / margin)


def _bracket(
    searcher: Searcher, max_num_sims: int, start: float
) -> tuple[float | None, float | None]:
    """Loads where the mean holds (a) and fails (b), doubling or halving from ``start``."""
    knob = searcher.result.knob
    a: float | None = None
    b: float | None = None
    x = start
    while _room(searcher.result, max_num_sims) or not searcher.result.points:
        if searcher.evaluate(x).ratio <= 1.0:
            a = x
        else:
            b = x
        if a is not None and b is not None:
            break
        if b is None:  # holds so far: go up
            higher = knob.above(x, start)
            if higher is None:
                break
            x = higher
        else:  # fails so far: go down
            lower = knob.below(x, start)
            if lower is None:
                break
            x = lower
    return a, b


def _tighten(
    searcher: Searcher, max_num_sims: int, rel_width: float, step: float, start: float
) -> str:
    """Phase 3: narrow the pass/fail interval as far as noise and budget allow. Each
    load it probes lies between two simulated ones or comes from ``knob.below`` /
    ``knob.above``, so none is under the clock's lowest rate (``LoadKnob.min_load``)."""
    res = searcher.result
    while True:
        lo, hi = res.lower, res.upper
        loads = sorted(p.load for p in res.points)
        if lo is not None and hi is not None:
            if hi - lo <= max(rel_width * hi, step):
                return f"interval within {rel_width:.0%}"
            inside = [x for x in loads if lo <= x <= hi]
            gaps = [(inside[0], inside[1]), (inside[-2], inside[-1])]
            x0, x1 = max(gaps, key=lambda g: g[1] - g[0])
            if x1 - x0 <= max(rel_width * hi / 2, step):
                return "interval noise-limited: more seeds or requests would narrow it"
            x = math.floor((x0 + x1) / 2) if res.knob.integer else (x0 + x1) / 2
        elif lo is None:  # no confident pass yet: probe below
            lower = res.knob.below(loads[0], start)
            if lower is None:
                clock = f"; {CLOCK_BOUND}" if res.knob.clock_bound(loads[0]) else ""
                return f"no load passed with confidence{clock}"
            x = lower
        else:  # no confident fail yet: probe above
            higher = res.knob.above(loads[-1], start)
            if higher is None:
                return "no load failed with confidence"
            x = higher
        if not _room(res, max_num_sims):
            return f"interval stopped at --max-sims {max_num_sims}"
        searcher.evaluate(x)


def _estimate(searcher: Searcher, a: float | None, b: float | None) -> None:
    """Set the estimate (see module docstring) and simulate it unless known."""
    res = searcher.result
    known = {p.load: p for p in res.points}
    if a is None:
        res.estimate = 0.0
        return
    if b is None:
        res.estimate = a  # a lower bound only: no load broke the SLOs
    else:
        load = crossing(known[a], known[b])
        if res.knob.integer:
            load = float(min(max(math.floor(load), a), b - 1))
        res.estimate = load
    res.at_estimate = known.get(res.estimate) or searcher.evaluate(res.estimate)
