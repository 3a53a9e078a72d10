"""The capacity search: which loads to simulate, and the answer they give.

Search, in three phases, bounded by ``max_num_sims`` simulations in all:

1. bracket: double (or halve) the scenario's load until the mean holds at
   ``a`` and fails at ``b``;
2. bisect ``[a, b]`` on the mean until ``b - a <= rel_width * b``. The
   estimate interpolates where the worst mean statistic / limit ratio crosses
   1 between ``a`` and ``b``. Phases 1-2 visit the same dyadic grid of loads
   whatever the limits, so when statistics grow with load a looser SLO can
   only move the estimate up: capacity is monotone in the SLO;
3. interval: probe outwards for a ``pass`` and a ``fail`` load, then bisect
   the gaps next to them until the interval is within ``rel_width`` or those
   gaps are (it is then as narrow as the noise allows). Assuming statistics
   grow with load, the true capacity (where the expected statistic meets its
   limit) lies between the highest ``pass`` below the lowest ``fail`` and that
   ``fail``, each end at ~95% confidence.

A last evaluation at the estimate gives goodput and latencies at capacity.
"""

from __future__ import annotations

import math

from sim.errors import ConfigError
from sim.planning.capacity import MAX_DOUBLINGS, CapacitySearch, LoadPoint, Searcher


def _crossing(low: LoadPoint, high: LoadPoint) -> float:
    """Load where the worst mean ratio crosses 1, linear between two loads."""
    if not math.isfinite(high.ratio) or high.ratio <= low.ratio:
        return low.load
    share = (1.0 - low.ratio) / (high.ratio - low.ratio)
    return low.load + min(max(share, 0.0), 1.0) * (high.load - low.load)


class _Budget:
    """Simulations left, keeping one evaluation in reserve for the estimate."""

    def __init__(self, searcher: Searcher, max_num_sims: int) -> None:
        self.res, self.max_num_sims = searcher.result, max_num_sims
        self.per_point = len(searcher.result.seeds)

    def room(self) -> bool:
        return self.res.num_sims + 2 * self.per_point <= self.max_num_sims


def search(searcher: Searcher, rel_width: float = 0.05, max_num_sims: int = 60) -> CapacitySearch:
    """Bracket, bisect, bound and estimate (see module docstring)."""
    if not 0 < rel_width < 1:
        raise ConfigError(f"--rel-width must be in (0, 1), got {rel_width}")
    res, knob = searcher.result, searcher.result.knob
    if max_num_sims < 2 * len(res.seeds):
        raise ConfigError(
            f"--max-sims must be >= 2 x seeds = {2 * len(res.seeds)}, got {max_num_sims}"
        )
    budget = _Budget(searcher, max_num_sims)
    step = 1.0 if knob.integer else 0.0
    start = float(max(1, math.floor(knob.start))) if knob.integer else knob.start
    a, b = _bracket(searcher, budget, start)
    reasons = []
    if a is not None and b is not None:
        while b - a > max(rel_width * b, step):
            if not budget.room():
                reasons.append(f"stopped at --max-sims {max_num_sims}")
                break
            x = math.floor((a + b) / 2) if knob.integer else (a + b) / 2
            a, b = (x, b) if searcher.evaluate(x).ratio <= 1.0 else (a, x)
        else:
            reasons.append(f"estimate within {rel_width:.0%}")
        reasons.append(_tighten(searcher, budget, rel_width, step, start))
    elif a is None:
        reasons.append(f"the SLOs fail or the load is not served even at {b:g} {knob.unit}")
    else:
        reasons.append(f"the SLOs still hold on average at {a:g} {knob.unit}")
    res.cell, res.stop_reason = (a, b), "; ".join(r for r in reasons if r)
    _estimate(searcher, a, b)
    return res


def _bracket(
    searcher: Searcher, budget: _Budget, start: float
) -> tuple[float | None, float | None]:
    """Loads where the mean holds (a) and fails (b), doubling or halving from ``start``."""
    knob = searcher.result.knob
    a: float | None = None
    b: float | None = None
    x = start
    while budget.room() or not searcher.result.points:
        if searcher.evaluate(x).ratio <= 1.0:
            a = x
        else:
            b = x
        if a is not None and b is not None:
            break
        if b is None:  # holds so far: go up
            if x >= start * 2**MAX_DOUBLINGS:
                break
            x = float(math.floor(2 * x)) if knob.integer else 2 * x
        else:  # fails so far: go down
            lower = float(max(1, math.floor(x / 2))) if knob.integer else x / 2
            if lower >= x or x <= start * 2.0**-MAX_DOUBLINGS:
                break
            x = lower
    return a, b


def _tighten(
    searcher: Searcher, budget: _Budget, rel_width: float, step: float, start: float
) -> str:
    """Phase 3: narrow the pass/fail interval as far as noise and budget allow."""
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
            x = float(max(1, math.floor(loads[0] / 2))) if res.knob.integer else loads[0] / 2
            if x >= loads[0] or x <= start * 2.0**-MAX_DOUBLINGS:
                return "no load passed with confidence"
        else:  # no confident fail yet: probe above
            x = float(math.floor(2 * loads[-1])) if res.knob.integer else 2 * loads[-1]
            if x >= start * 2**MAX_DOUBLINGS:
                return "no load failed with confidence"
        if not budget.room():
            return f"interval stopped at --max-sims {budget.max_num_sims}"
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
        crossing = _crossing(known[a], known[b])
        if res.knob.integer:
            crossing = float(min(max(math.floor(crossing), a), b - 1))
        res.estimate = crossing
    res.at_estimate = known.get(res.estimate) or searcher.evaluate(res.estimate)
