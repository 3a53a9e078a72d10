"""The capacity search's phases on a noise-free load response, loads checked by hand.

A fake ``Searcher`` answers each load at once: the worst statistic / limit ratio
is ``load / TRUE_CAPACITY`` (linear, no noise: ``pass`` at ratio <= 1, ``fail``
above). No simulation runs, so this pins what ``test_capacity.py``'s simulated
searches cannot afford to: which loads are visited, how many simulations they
take, the final cell and the interpolated crossing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics.slo_targets import SloTarget
from sim.planning.capacity import (
    CLOCK_BOUND,
    CapacitySearch,
    LoadKnob,
    LoadPoint,
    Searcher,
    Status,
    search,
)

TRUE_CAPACITY = 9.8  # req/s


class LinearSearcher(Searcher):
    """``Searcher`` with each load judged from ``load / capacity`` instead of simulated.
    ``held``: the verdict where the ratio holds (``unclear``: noise straddles the limit
    at every load, as under an SLO at the unloaded latency); ``min_load``: the knob's
    clock limit."""

    def __init__(
        self,
        capacity: float,
        start: float = 1.0,
        num_seeds: int = 1,
        min_load: float | None = None,
        held: Status = "pass",
    ) -> None:
        self.capacity, self.held = capacity, held
        self.doc, self.base_dir, self.jobs, self.on_point = {}, Path.cwd(), 1, None
        target = SloTarget("ttft", "p99", 500.0)
        knob = LoadKnob("rate", "workload.arrival.rate_per_s", start, min_load=min_load)
        self.result = CapacitySearch(knob, (target,), tuple(range(num_seeds)))

    def evaluate(self, load: float) -> LoadPoint:
        ratio = load / self.capacity
        point = LoadPoint(load, [], {}, {}, self.held if ratio <= 1.0 else "fail", ratio)
        self.result.points.append(point)
        self.result.num_sims += len(self.result.seeds)
        self._update_bracket()
        return point


def test_bisection_stops_once_the_cell_is_within_rel_width_of_its_upper_end() -> None:
    res = search(LinearSearcher(TRUE_CAPACITY), rel_width=0.05, max_num_sims=60)
    loads = [p.load for p in res.points]
    # Bracket: 1, 2, 4, 8 hold and 16 fails. Bisect [8, 16]: 12 F, 10 F, 9 P, 9.5 P:
    # [9.5, 10] is 0.5 wide = 0.05 x 10 (the upper end): done. (0.05 x 9.5, the lower
    # end, would bisect once more, to 9.75.) Then the crossing, 9.8, is simulated.
    assert loads[:9] == [1.0, 2.0, 4.0, 8.0, 16.0, 12.0, 10.0, 9.0, 9.5]
    assert res.cell == (9.5, 10.0)
    assert len(loads) == 10 and res.num_sims == 10
    # The estimate passes (ratio 1): it becomes the highest pass below the lowest fail.
    assert res.lower == pytest.approx(TRUE_CAPACITY, rel=1e-12) and res.upper == 10.0
    assert "interval within 5%" in res.stop_reason


def test_the_estimate_is_where_a_linear_ratio_crosses_one() -> None:
    # Between 9.5 (ratio 9.5/9.8) and 10 (10/9.8) a linear ratio crosses 1 at 9.8.
    res = search(LinearSearcher(TRUE_CAPACITY), rel_width=0.05, max_num_sims=60)
    assert res.estimate == pytest.approx(TRUE_CAPACITY, rel=1e-12)
    assert res.at_estimate is not None and res.at_estimate.load == res.estimate
    assert res.points[-1].load == res.estimate  # simulated last, once


@pytest.mark.parametrize(("capacity", "cell"), [(3.3, (3.25, 3.375)), (20.0, (20.0, 21.0))])
def test_cells_of_other_capacities(capacity: float, cell: tuple[float, float]) -> None:
    # 3.3: bracket [2, 4]; 3 P, 3.5 F, 3.25 P, 3.375 F ([3.25, 3.375]: 0.125 <= 0.05 x
    # 3.375, stop). 20: [16, 32]; 24 F, 20 P (ratio exactly 1), 22 F, 21 F ([20, 21]:
    # 1 <= 0.05 x 21, stop).
    res = search(LinearSearcher(capacity), rel_width=0.05, max_num_sims=60)
    assert res.cell == cell
    assert res.estimate == pytest.approx(capacity, rel=1e-12)


# --- the clock's lowest rate (LoadKnob.min_load) ---------------------------------------------


def test_the_tighten_phase_probes_no_rate_below_the_clocks_limit() -> None:
    # Every held load is unclear, so after bisecting [1, 2] the tighten phase looks for
    # a confident pass below the lowest load: 0.5, then 0.25, under min_load 0.3. That
    # run would outlast the clock (a refusal, not an answer, once below min_load / 4);
    # the search stops at 0.5 and says why.
    res = search(LinearSearcher(1.5, min_load=0.3, held="unclear"), 0.05, 60)
    loads = [p.load for p in res.points]
    assert min(loads) == 0.5
    assert res.lower is None and res.estimate == pytest.approx(1.5, rel=1e-12)
    assert f"no load passed with confidence; {CLOCK_BOUND}" in res.stop_reason


def test_the_bracket_halves_no_lower_than_the_clocks_limit() -> None:
    # The SLOs fail at every load: halving from 1 stops at 0.125 (0.0625 < 0.1).
    res = search(LinearSearcher(1e-9, min_load=0.1), 0.05, 60)
    assert [p.load for p in res.points] == [1.0, 0.5, 0.25, 0.125]
    assert res.estimate == 0.0 and res.stop_reason.endswith(CLOCK_BOUND)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.floats(1e-9, 1e3),
    start=st.floats(1e-3, 1e3),
    min_share=st.floats(1e-8, 1.0),  # min_load as a share of the start
    held=st.sampled_from(["pass", "unclear"]),
    rel_width=st.floats(0.01, 0.5),
    max_num_sims=st.integers(2, 120),
)
def test_no_search_probes_below_the_clocks_limit(
    capacity: float,
    start: float,
    min_share: float,
    held: Status,
    rel_width: float,
    max_num_sims: int,
) -> None:
    # Bracket, bisection, tighten and the estimate alike: every load is at least min_load.
    min_load = min_share * start
    searcher = LinearSearcher(capacity, start, min_load=min_load, held=held)
    res = search(searcher, rel_width, max_num_sims)
    assert min(p.load for p in res.points) >= min_load
