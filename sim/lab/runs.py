"""The lab's runs: the page's scenario, the load-latency knee around it, and its regime.

``run_doc`` simulates the page's document as ``servesim run lab.yaml`` would. The
knee runs it at the rates of a fixed grid (``knee_rates``: half-octave steps, so a
moved rate slider reuses every point but the new ones, ``KneeCache``) and judges
each rate as a capacity search does (``sim.planning.capacity.judge``), one seed per
rate: the capacity under the SLOs and the saturation load are planning's
``crossing`` between the highest passing rate and the lowest failing one above it.
``regime`` is the caption: utilisation ρ and what binds (the token budget, the
sequence limit, the KV cache, or none: compute), from the run's own steps and samples.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim import api
from sim.lab.controls import RATE_KEY, SOURCE, scenario_for
from sim.metrics.slo_targets import Metric, SloTarget
from sim.planning.capacity import LoadPoint, crossing, judge
from sim.planning.served import SERVED_MIN_RATIO, served_ratio_of
from sim.planning.sweep_exec import run_point
from sim.scenario import set_dotted

if TYPE_CHECKING:
    from sim.scenario import Scenario

KNEE_STEPS_PER_OCTAVE = 2
# The knee spans the current rate / 4 to x 2: the flat part and the wall.
KNEE_LOW_FACTOR, KNEE_HIGH_FACTOR = 0.25, 2.0
NEAR_SATURATION_RHO = 0.8  # from here the queue's 1 / (1 - rho) growth shows
BINDING_SHARE = 0.2  # a limit reached in at least this share of engine time binds


def run_doc(doc: dict[str, Any], base_dir: Path | None = None) -> api.Result:
    """Simulate the page's document; ``ConfigError`` names ``lab.yaml`` as the CLI would."""
    return api.run(scenario_for(doc, base_dir), source=SOURCE, compiled=True, workers=1)


def knee_rates(rate_per_s: float) -> tuple[float, ...]:
    """The knee's rates around ``rate_per_s``: ``2 ** (j / KNEE_STEPS_PER_OCTAVE)`` from a
    quarter of it to twice it, a grid that does not move with the rate."""
    steps = KNEE_STEPS_PER_OCTAVE
    low = math.floor(steps * math.log2(rate_per_s * KNEE_LOW_FACTOR))
    high = math.ceil(steps * math.log2(rate_per_s * KNEE_HIGH_FACTOR))
    return tuple(2.0 ** (j / steps) for j in range(low, high + 1))


def slo_targets(scenario: Scenario) -> tuple[SloTarget, ...]:
    """The scenario's per-request SLOs as the run targets a capacity search judges: its
    p99 (``per_request_slo``'s inverse: ``ttft_ms: 500`` is ``ttft_p99_ms=500``)."""
    slo = scenario.slo
    if slo is None:
        return ()
    pairs: tuple[tuple[Metric, float | None], ...] = (
        ("ttft", slo.ttft_ms),
        ("tpot", slo.tpot_ms),
        ("e2el", slo.e2el_ms),
    )
    return tuple(SloTarget(metric, "p99", limit) for metric, limit in pairs if limit is not None)


class KneeCache:
    """The knee's runs, by their whole document (at most ``size``, oldest dropped)."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._records: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def record(self, doc: dict[str, Any], base_dir: Path) -> dict[str, Any]:
        """The summary record of ``doc`` (the sweeps' ``run_point``), run once."""
        key = json.dumps(doc, sort_keys=True)
        found = self._records.get(key)
        if found is None:
            found = run_point({"scenario": doc, "base_dir": str(base_dir)})
            self._records[key] = found
            while len(self._records) > self.size:
                self._records.popitem(last=False)
        self._records.move_to_end(key)
        return found


@dataclass(frozen=True)
class Knee:
    """p50 and p99 TTFT against the offered rate, each rate judged, and the two loads
    read off it. ``capacity_rate_per_s`` (under the SLOs) and ``saturation_rate_per_s``
    (served only) are None when no rate of the grid passed; ``*_beyond`` says the
    value is only a bound (every rate passed: at least the highest)."""

    rates_per_s: tuple[float, ...]
    p50_ttft_ms: tuple[float, ...]
    p99_ttft_ms: tuple[float, ...]
    status: tuple[str, ...]
    served: tuple[bool, ...]
    targets: tuple[str, ...]
    capacity_rate_per_s: float | None
    capacity_beyond: bool
    saturation_rate_per_s: float | None
    saturation_beyond: bool


def _threshold(points: list[LoadPoint]) -> tuple[float | None, bool]:
    """Planning's ``crossing`` between the highest pass and the lowest fail above it
    (an unclear rate counts as failing: one seed cannot tell); (highest rate, True)
    when all pass, (None, False) when none does."""
    failing = [p for p in points if p.status != "pass"]
    first_fail = failing[0] if failing else None
    passing = [
        p for p in points if p.status == "pass" and (not failing or p.load < failing[0].load)
    ]
    if not passing:
        return None, False
    if first_fail is None:
        return passing[-1].load, True
    return crossing(passing[-1], first_fail), False


def knee(
    doc: dict[str, Any],
    cache: KneeCache,
    base_dir: Path | None = None,
    superseded: Callable[[], bool] = lambda: False,
) -> Knee | None:
    """The knee of ``doc`` (validated already) around its rate; None if ``superseded()``
    turns true between two runs (the page moved on)."""
    scenario = scenario_for(doc, base_dir)
    rate = float(scenario.workload.arrival.rate_per_s)  # type: ignore[union-attr]
    targets = slo_targets(scenario)
    records = []
    for grid_rate in knee_rates(rate):
        if superseded():
            return None
        at = json.loads(json.dumps(doc))
        set_dotted(at, RATE_KEY, grid_rate, SOURCE)
        records.append((grid_rate, cache.record(at, base_dir or Path.cwd())))
    judged = [judge(r, [record], targets) for r, record in records]
    served_only = [judge(r, [record], ()) for r, record in records]
    capacity, capacity_beyond = _threshold(judged)
    saturation, saturation_beyond = _threshold(served_only)
    return Knee(
        tuple(r for r, _ in records),
        tuple(float(record.get("median_ttft_ms") or math.nan) for _, record in records),
        tuple(float(record.get("p99_ttft_ms") or math.nan) for _, record in records),
        tuple(p.status for p in judged),
        tuple(p.status == "pass" for p in served_only),
        tuple(str(t) for t in targets),
        capacity,
        capacity_beyond,
        saturation,
        saturation_beyond,
    )


@dataclass(frozen=True)
class Regime:
    """Where the run sits and what limits it, every figure from the run (and its knee)."""

    rho: float | None  # offered rate / saturation rate; None: the knee found no saturation
    rho_is_bound: bool  # rho is an upper bound (the server kept up at every rate)
    served_ratio: float | None
    budget_share: float  # engine time in steps that filled max_num_batched_tokens
    seqs_share: float  # time with max_num_seqs requests running
    kv_peak: float  # peak KV cache use, 0-1
    num_preemptions: int
    binds: str

    def caption(self) -> str:
        """One paragraph for the page: the regime in words, each claim with its number."""
        if self.served_ratio is not None and self.served_ratio < SERVED_MIN_RATIO:
            where = (
                f"above 1: the server completes {self.served_ratio:.0%} of the arrivals "
                "(second half of the run), so the queue grows for as long as requests come"
            )
            rho = f"ρ > 1 ({1 / max(self.served_ratio, 1e-9):.2f} from the served ratio)"
        elif self.rho is None:
            rho, where = "ρ unknown", "the knee found no rate the server keeps up with"
        else:
            bound = "≤ " if self.rho_is_bound else "≈ "
            rho = f"ρ {bound}{self.rho:.2f}"
            if self.rho >= NEAR_SATURATION_RHO:
                where = "near 1: queueing grows like 1/(1 − ρ), the tail first"
            else:
                where = "below 1: most requests are scheduled at the next step"
        limits = (
            f"token budget filled in {self.budget_share:.0%} of engine time, "
            f"max_num_seqs reached {self.seqs_share:.0%} of the time, "
            f"KV cache peak {self.kv_peak:.0%} with {self.num_preemptions} preemptions"
        )
        return f"{rho}, {where}. {limits}: {self.binds} binds."


def regime(result: api.Result, found: Knee | None) -> Regime:
    """The run's regime (``Regime``), its utilisation from ``found``'s saturation rate."""
    scenario = result.scenario
    rate = float(scenario.workload.arrival.rate_per_s)  # type: ignore[union-attr]
    records = result.raw.records
    ratio = served_ratio_of(
        scenario.workload,
        np.asarray(records["arrival_s"], dtype=float),
        np.asarray(records["finish_s"], dtype=float),
    )
    rho, bound = None, False
    if found is not None and found.saturation_rate_per_s is not None:
        rho, bound = rate / found.saturation_rate_per_s, found.saturation_beyond
    policy = scenario.scheduler
    # Continuous batching's limits; a static or dynamic batch has neither (the lab, a
    # face, names no engine class to tell them apart: tests/test_architecture.py).
    budget = getattr(policy, "max_num_batched_tokens", None)
    max_seqs = getattr(policy, "max_num_seqs", None)
    steps = result.steps
    duration_s = (steps["end_s"] - steps["start_s"]).to_numpy(float)
    busy_s = float(duration_s.sum()) or 1.0
    budget_share = 0.0
    if budget is not None:
        tokens = (steps["num_prefill_tokens"] + steps["num_decode_seqs"]).to_numpy()
        budget_share = float(duration_s[tokens >= budget].sum()) / busy_s
    series = result.timeseries
    seqs_share = 0.0
    if max_seqs is not None and len(series):
        seqs_share = float((series["num_running"].to_numpy() >= max_seqs).mean())
    kv_peak = float(series["kv_cache_usage"].max()) if len(series) else 0.0
    preemptions = int(result.summary.get("num_preemptions") or 0)
    shares = {"the token budget": budget_share, "max_num_seqs": seqs_share}
    if preemptions or kv_peak >= 0.95:
        binds = "the KV cache"
    elif max(shares.values()) >= BINDING_SHARE:
        binds = max(shares, key=lambda name: shares[name])
    else:
        binds = "compute (no limit reached: the step time itself)"
    return Regime(rho, bound, ratio, budget_share, seqs_share, kv_peak, preemptions, binds)
