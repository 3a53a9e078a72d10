"""Capacity under a concurrency cap (issue 39, item 1): the load is the number of clients.

A client capped at ``max_concurrency`` sends only when a slot frees, so it
always "keeps up" and a served ratio from its send times says nothing: the
search used to run off to millions of req/s. Under a cap the knob is the
number of clients C, and the rate they are served at is checked here against
Little's law computed from the runs' own records: with every client busy, C
requests are in the system at all times, so throughput = C / mean E2E.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from cli_errors import one_line_error

from sim import api
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import CapacitySearch, LoadKnob, Searcher, caveats, judge, search
from sim.planning.capacity_report import capacity_rate_per_s
from sim.planning.served import served_ratio_of
from sim.planning.sweep_exec import offered_rate_per_s, run_point
from sim.scenario import scenario_from_dict

LITTLE_TOLERANCE = 0.02  # the 2 %


def capped_doc(
    max_concurrency: int, rate_per_s: float = math.inf, num: int = 400
) -> dict[str, Any]:
    """Chat-like lengths on an H100 roofline, every request ready at 0 (or at
    ``rate_per_s``), at most ``max_concurrency`` in flight."""
    return {
        "name": "capped",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": num,
            "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
            "prompt_tokens": {
                "kind": "lognormal",
                "median_tokens": 300,
                "sigma": 0.8,
                "min_tokens": 16,
                "max_tokens": 2000,
            },
            "output_tokens": {
                "kind": "lognormal",
                "median_tokens": 80,
                "sigma": 0.6,
                "min_tokens": 4,
                "max_tokens": 500,
            },
            "max_concurrency": max_concurrency,
        },
    }


@pytest.mark.parametrize("clients", [4, 16])
def test_a_capped_runs_rate_is_its_clients_over_their_mean_e2e(clients: int) -> None:
    scenario = scenario_from_dict(capped_doc(clients), "capped")
    records = api.run(scenario, base_dir=Path.cwd()).raw.records
    sent_s = np.asarray(records["arrival_s"], dtype=float)  # send times under a cap
    e2e_s = np.asarray(records["finish_s"], dtype=float) - sent_s
    little_per_s = clients / float(e2e_s.mean())
    rate = offered_rate_per_s(scenario, sent_s)
    assert rate is not None and rate == pytest.approx(little_per_s, rel=LITTLE_TOLERANCE)
    # Clients that wait for their answers cannot fall behind: no served ratio to judge.
    assert served_ratio_of(scenario.workload, sent_s, sent_s + e2e_s) is None


def test_a_sweep_point_under_a_cap_records_the_clients_rate_and_no_served_ratio() -> None:
    record = run_point({"scenario": capped_doc(8), "base_dir": str(Path.cwd())})
    assert record["served_ratio"] is None
    little_per_s = 8 / (record["mean_e2el_ms"] / 1e3)
    assert record["offered_rate_per_s"] == pytest.approx(little_per_s, rel=LITTLE_TOLERANCE)


def test_capacity_under_a_cap_is_a_number_of_clients_and_obeys_littles_law() -> None:
    targets = parse_targets(["ttft_p99_ms=150"])
    scenario = scenario_from_dict(capped_doc(4, num=1000), "capped")
    searcher = Searcher(scenario, targets, 2, 1)
    result = search(searcher, 0.1, 24)
    assert result.knob.key == "workload.max_concurrency" and result.knob.unit == "clients"
    assert result.upper is not None  # the SLO broke at some number of clients ...
    assert result.estimate is not None and 1 <= result.estimate < 25  # 2.5 % of the 1,000
    assert result.estimate == int(result.estimate)
    point = result.at_estimate
    assert point is not None
    # Little from each run's own summary: C / mean E2E, averaged over the seeds.
    little_per_s = float(np.mean([point.load / (r["mean_e2el_ms"] / 1e3) for r in point.records]))
    rate = capacity_rate_per_s(result, point)
    assert rate is not None and rate == pytest.approx(little_per_s, rel=LITTLE_TOLERANCE)
    # ... and the answer is within it on average: the mean p99 TTFT is under the limit.
    assert point.means["ttft_p99_ms"] <= 150


def test_a_cap_with_its_own_arrival_rate_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(capped_doc(16, rate_per_s=10.0)))
    argv = ["capacity", str(path), "--slo", "ttft_p99_ms=500", "-q", "--out", str(tmp_path / "o")]
    message = one_line_error(capsys, argv)
    assert message.startswith("workload.max_concurrency 16:")
    assert "workload.arrival.rate_per_s 10" in message


def test_plan_under_a_cap_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(capped_doc(16)))
    argv = ["plan", str(path), "--slo", "ttft_p99_ms=500", "--target-rate", "10", "-q"]
    message = one_line_error(capsys, [*argv, "--out", str(tmp_path / "o")])
    assert message.startswith("plan: workload.max_concurrency 16:")


@pytest.mark.parametrize(("clients", "warned"), [(50, True), (5, False)])
def test_a_start_up_burst_larger_than_the_percentiles_tail_is_a_caveat(
    clients: int, warned: bool
) -> None:
    """p99 of 1,000 requests rests on the 10 slowest; 50 clients' first requests,
    sent at once, can be all of them (5 cannot)."""
    targets = tuple(parse_targets(["ttft_p99_ms=500"]))
    res = CapacitySearch(LoadKnob("concurrency", "workload.max_concurrency", 4.0), targets, (0,))
    record = {"p99_ttft_ms": 100.0, "served_ratio": None, "completed": 1000, "num_rejected": 0}
    res.at_estimate = judge(float(clients), [record], targets)
    notes = [n for n in caveats(res, None) if "sent at once" in n]
    assert bool(notes) == warned
    if warned:  # 2 x 50 clients / 1 % = 10,000 requests put the burst at half the tail
        assert notes[0].endswith("--num-requests >= 10000 measures the clients' steady state")
