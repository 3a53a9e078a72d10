"""Exact tests where the suite allowed slack (issue 14 items 16 and 17)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_capacity import md1_doc

from sim import api
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import CapacitySearch, LoadKnob, LoadPoint, Searcher, search
from sim.scenario import scenario_from_dict

# --- 16: the estimate is the interpolated crossing, not an end of the bracket -----------------


class KnownRatioSearcher(Searcher):
    """A searcher whose worst SLO ratio is ``load / crossing``: it meets 1 at ``crossing``."""

    def __init__(self, crossing: float, start: float = 1.0, integer: bool = False) -> None:
        knob = LoadKnob("users", "k", start) if integer else LoadKnob("rate", "k", start)
        self.result = CapacitySearch(knob, parse_targets(["ttft_p99_ms=1"]), (0,))
        self.crossing, self.on_point = crossing, None

    def evaluate(self, load: float) -> LoadPoint:
        ratio = load / self.crossing
        point = LoadPoint(load, [{"completed": 1}], {}, {}, "pass" if ratio <= 1 else "fail", ratio)
        self.result.points.append(point)
        self.result.num_sims += 1
        self._update_bracket()
        return point


@pytest.mark.parametrize("crossing", [7.3, 0.0123, 1234.5, 3.0 + 1e-6, 5.99])
def test_the_estimate_is_the_analytic_crossing_strictly_inside_the_bracket(
    crossing: float,
) -> None:
    result = search(KnownRatioSearcher(crossing), rel_width=0.05, max_num_sims=60)
    low, high = result.cell
    assert low is not None and high is not None and result.estimate is not None
    # A linear ratio interpolates exactly: the crossing itself, not the bracket's end.
    assert result.estimate == pytest.approx(crossing, rel=1e-9, abs=0)
    assert low < result.estimate < high
    assert high - low <= 0.05 * high  # the bracket was narrowed, so its ends differ


def test_an_integer_knob_floors_the_crossing_inside_the_bracket() -> None:
    result = search(KnownRatioSearcher(37.6, start=4.0, integer=True), 0.05, 60)
    assert result.estimate == math.floor(37.6)


# --- 17: whole-run TPOT with fixed lengths is known exactly ------------------------------------

DECODE_S = 0.01  # md1_doc's per decode step (batch size 1, no overhead)


def test_whole_run_tpot_is_the_decode_step_exactly() -> None:
    """Requests 1 s apart on a server busy 0.1 s each never overlap: every token after
    the first takes one decode step, so TPOT = (E2E - TTFT) / (n - 1) = 10 ms exactly.
    Dividing by n instead would give 9 ms."""
    doc = md1_doc(num_requests=12)
    doc["workload"]["arrival"] = {"kind": "constant", "rate_per_s": 1.0}
    result = api.run(scenario_from_dict(doc), base_dir=Path.cwd())
    summary = result.summary
    for key in ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms"):
        assert summary[key] == pytest.approx(1e3 * DECODE_S, rel=1e-9), key
    tpot_s = result.requests["tpot_s"].to_numpy(float)
    np.testing.assert_allclose(tpot_s, DECODE_S, rtol=1e-9)
    e2e_minus_ttft_s = (result.requests["e2el_s"] - result.requests["ttft_s"]).to_numpy(float)
    np.testing.assert_allclose(e2e_minus_ttft_s, 9 * DECODE_S, rtol=1e-9)  # n - 1 = 9 gaps
