"""Session 13's audit of plan and capacity: a tiny target rate refused before any
work, and printed arithmetic a reader can check."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from sim.metrics.slo_targets import SloTarget
from sim.planning.capacity import CapacitySearch, LoadKnob, LoadPoint, clock_min_rate_per_s
from sim.planning.capacity_report import fleet_for, format_capacity
from sim.planning.plan import Candidate, Outcome, PlanResult
from sim.planning.plan_report import table_rows
from tests.cli_errors import one_line_error
from tests.test_bad_inputs_s13_answers import PLAN_SPACE, SCENARIO, _write


def test_plan_refuses_a_target_rate_whose_runs_the_clock_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the search ran, then the run at the target's share failed on the clock,
    # naming workload.arrival.rate_per_s (a field the user never set).
    bound = clock_min_rate_per_s(40)
    argv = ["plan", str(_write(tmp_path / "s.yaml", SCENARIO))]
    argv += ["--plan", str(_write(tmp_path / "plan.yaml", PLAN_SPACE))]
    argv += ["--slo", "ttft_mean_ms=2000", "--target-rate", f"{bound / 10:g}"]
    argv += ["--num-requests", "40", "--workers", "1", "-q", "--out", str(tmp_path / "out")]
    message = one_line_error(capsys, argv)
    assert message.startswith("--target-rate ") and f"{bound:.3g} req/s" in message
    assert "rate_per_s" not in message
    assert not (tmp_path / "out" / "plan.json").exists()


def point(load: float) -> LoadPoint:
    """A passing load whose one run served it all."""
    record = {"request_throughput": load, "total_output_tokens": 1000, "completed": 10}
    return LoadPoint(load, [record], {}, {}, "pass", 0.5)


def _ceil_line(text: str) -> tuple[int, float, float]:
    """The replicas line's ``N = ceil(T / C)``, as a reader reads it."""
    line = next(x for x in text.splitlines() if x.startswith("replicas:"))
    match = re.search(r"(\d+) = ceil\(([^ ]+) / ([^)]+)\)", line)
    assert match is not None, line
    return int(match[1]), float(match[2]), float(match[3])


@pytest.mark.parametrize(("target", "capacity"), [(20.0, 19.996), (1234567.0, 9.9996)])
def test_capacity_prints_a_ceil_whose_arithmetic_checks_out(target: float, capacity: float) -> None:
    # Before: "2 = ceil(20 / 20)" (19.996 to 3 digits), and a target of 1234567 as
    # 1.23457e+06.
    result = CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0, 1))
    result.points = [point(capacity)]
    result.lower, result.upper, result.estimate = capacity, 2 * capacity, capacity
    result.at_estimate = result.points[0]
    fleet = fleet_for(result, target, 1, None)
    assert fleet is not None
    num, shown_target, shown_capacity = _ceil_line(format_capacity(result, "x", fleet, 1, None))
    assert num == fleet.num_replicas and shown_target == target
    assert math.ceil(shown_target / shown_capacity) == num


def test_capacity_prints_a_count_of_clients_as_an_integer() -> None:
    # Before: "capacity: 1.23e+03 clients", "at 1.23e+03 clients:".
    clients = 1234.0
    result = CapacitySearch(LoadKnob("concurrency", "k", 1.0, None, 1e6), (), (0, 1))
    result.points = [point(clients)]
    result.lower, result.upper, result.estimate = clients, 2 * clients, clients
    result.at_estimate = result.points[0]
    text = format_capacity(result, "x", None, 1, None)
    assert f"capacity:               {clients:.0f} clients" in text
    assert f"at {clients:.0f} clients:" in text and "e+0" not in text


def test_plan_table_prints_capacity_whose_ceil_is_the_units() -> None:
    # Before: "units 2" beside a capacity of "20" for a target of 20 (19.996 to 3 digits).
    record = {"capacity_rate_per_s": 19.996, "num_units": 2, "usd_per_hour": 2.0}
    record |= {"capacity_per_gpu": 19.996, "num_gpus_total": 2}
    candidate = Candidate("h100", 1, 64, 2048, True)
    outcome = Outcome(candidate, "searched", sized_rate_per_s=20.0, record=record)
    result = PlanResult(20.0, (SloTarget("ttft", "mean", 2000.0),), [outcome])
    (row,) = table_rows(result)
    assert math.ceil(20.0 / float(row["req/s/unit (95%)"])) == int(row["units"]) == 2
