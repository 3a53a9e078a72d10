"""The served check of capacity: a load counts only if completions keep up with arrivals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity import SERVICE_S, md1_doc, memo  # noqa: F401 (the fixture is used by name)

from sim.cli import main
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import CapacitySearch, LoadKnob, Searcher, judge, search
from sim.planning.capacity_report import fleet_for, format_capacity, to_json
from sim.planning.served import SERVED_MIN_RATIO, served_ratio
from sim.planning.sweep_exec import Record
from sim.scenario import scenario_from_dict

MU_PER_S = 1 / SERVICE_S  # the M/D/1 server's rate: 10 req/s


def test_a_server_finishing_each_request_a_fixed_delay_later_is_served() -> None:
    arrivals = np.arange(100.0)  # one per second
    assert served_ratio(arrivals, arrivals + 3.0) == 1.0
    # Window (49.5, 99]: 50 arrivals; finishes in it are 50.5 .. 99 minus the
    # 3 arriving last (finishing after 99) plus the 3 arriving before 49.5: still 50.


def test_an_overloaded_server_scores_its_rate_over_the_arrival_rate() -> None:
    # 100 arrivals at 2 req/s over 49.5 s; the server finishes one per second.
    arrivals = np.arange(100) / 2.0
    finishes = np.arange(1, 101, dtype=float)
    # Window (24.75, 49.5]: 50 arrivals, finishes 25..49 = 25 of them: ratio 1/2 = mu / lambda.
    assert served_ratio(arrivals, finishes) == pytest.approx(0.5)


def test_rejected_requests_and_simultaneous_batches() -> None:
    assert served_ratio(np.array([0.0, 1.0]), np.array([np.nan, np.inf])) == 0.0
    assert served_ratio(np.array([5.0]), np.array([6.0])) == 1.0
    assert served_ratio(np.zeros(10), np.arange(10.0)) == 0.0  # all at once: infinite rate
    # Rejected rows (NaN) count neither as arrivals nor as completions.
    arrivals = np.arange(10.0)
    finishes = np.where(arrivals % 2 == 0, arrivals + 0.5, np.nan)
    assert served_ratio(arrivals, finishes) == 1.0


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 300),
    st.floats(0.1, 100.0),
    st.floats(0.0, 10.0),
)
def test_served_ratio_is_a_share_and_one_for_a_constant_delay(
    num: int, rate_per_s: float, delay_s: float
) -> None:
    arrivals = np.arange(num) / rate_per_s
    ratio = served_ratio(arrivals, arrivals + delay_s)
    assert 0.0 <= ratio <= 1.0
    if delay_s == 0.0:
        assert ratio == 1.0


def test_judge_fails_a_load_that_is_not_served_although_the_slo_holds() -> None:
    target = parse_targets(["ttft_p99_ms=1e9"])
    records = [{"p99_ttft_ms": 10.0, "completed": 9, "served_ratio": r} for r in (0.5, 0.52)]
    point = judge(1.0, records, target)
    assert point.status == "fail" and point.ratio == pytest.approx(SERVED_MIN_RATIO / 0.51)
    assert point.served is not None and point.served[0] == pytest.approx(0.51)
    kept_up = [{"p99_ttft_ms": 10.0, "completed": 9, "served_ratio": r} for r in (1.0, 0.99, 1.0)]
    assert judge(1.0, kept_up, target).status == "pass"
    # Closed loops have no served ratio (served_ratio_of): users wait for their answers.
    closed = judge(1.0, [{**r, "served_ratio": None} for r in records], target)
    assert closed.status == "pass" and closed.served is None


@pytest.mark.usefixtures("memo")
@pytest.mark.parametrize("slo", ["ttft_p99_ms=1e7", "e2el_mean_ms=1e8"])
def test_capacity_with_an_slo_that_always_holds_is_the_service_rate(slo: str) -> None:
    """M/D/1 at batch size 1 serves at most 10 req/s, whatever the SLO says."""
    searcher = Searcher(scenario_from_dict(md1_doc(600)), parse_targets([slo]), 2, 1)
    result = search(searcher, 0.05, 40)
    assert result.upper is not None  # overload was found ...
    assert result.estimate is not None
    assert 0.7 * MU_PER_S <= result.estimate <= MU_PER_S * 1.05  # ... at the service rate
    low, high = result.interval
    assert low is not None and high is not None and high < 2 * MU_PER_S


def test_capacity_cli_with_a_loose_slo_sizes_a_real_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(md1_doc(300)))
    argv = ["capacity", str(path), "--slo", "ttft_p99_ms=20000", "--seeds", "1", "--jobs", "1"]
    argv += ["--target-rate", "100", "--out", str(tmp_path / "out"), "-q", "--max-sims", "16"]
    argv += ["--num-requests", "300"]  # the scenario's own length, not the 10,000 default
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "no SLO failure found" not in text and "served" in text
    doc = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert doc["capacity"] <= 1.05 * MU_PER_S
    assert doc["fleet"]["num_replicas"] >= 100 / (1.05 * MU_PER_S)


# --- item 2: one seed gives no confidence interval ---------------------------------------------


def one_seed_search(num_seeds: int) -> CapacitySearch:
    """A finished search over two loads, each run under ``num_seeds`` seeds."""

    def runs(ttft_ms: float) -> list[Record]:
        return [{"p99_ttft_ms": ttft_ms + k, "completed": 10} for k in range(num_seeds)]

    targets = parse_targets(["ttft_p99_ms=100"])
    result = CapacitySearch(LoadKnob("rate", "k", 1.0), targets, tuple(range(num_seeds)))
    result.points = [judge(38.8, runs(90.0), targets), judge(39.1, runs(120.0), targets)]
    result.lower, result.upper, result.estimate = 38.8, 39.1, 39.0
    result.at_estimate = result.points[0]
    return result


def test_one_seed_reports_no_confidence_interval_and_no_spread() -> None:
    result = one_seed_search(1)
    text = format_capacity(result, "x", fleet_for(result, 100.0, 1, None), 1, None)
    assert "95% interval" not in text and "±" not in text
    assert "no confidence interval from one seed" in text and "--seeds 2" in text
    assert "interval's low end" not in text
    doc = to_json(result, None, "x")
    assert doc["ci95_lower"] is None and doc["ci95_upper"] is None
    assert (doc["bracket_lower"], doc["bracket_upper"]) == (38.8, 39.1)
    assert doc["points"][0]["ci95_half_width"] == {"ttft_p99_ms": None}


def test_two_seeds_report_the_95_percent_interval() -> None:
    result = one_seed_search(2)
    text = format_capacity(result, "x", fleet_for(result, 100.0, 1, None), 1, None)
    assert "95% interval 38.8 .. 39.1" in text and "±" in text
    assert to_json(result, None, "x")["ci95_lower"] == 38.8


def test_a_trace_replay_says_why_it_has_no_interval() -> None:
    result = one_seed_search(1)
    result.knob = LoadKnob("time_scale", "workload.time_scale", 1.0, base_rate_per_s=1.0)
    text = format_capacity(result, "x", None, 1, None)
    assert "trace replay" in text and "--seeds" not in text
