"""Issue 39, a new user's round: capacity's fleet and price lines for edge inputs.

A target far below one replica's capacity still needs one replica; a price
the user gave is not labelled the table's approximation; ``--target-rate
inf`` is refused in one line instead of an OverflowError.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_errors import one_line_error
from test_capacity import md1_doc, point

import sim.planning.capacity
from sim.planning.capacity import LoadKnob
from sim.planning.capacity_report import fleet_for, format_capacity


def _search() -> sim.planning.capacity.CapacitySearch:
    """A finished search whose capacity is 9.8 req/s (the estimate's throughput)."""
    result = sim.planning.capacity.CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0, 1))
    result.points = [point(8.0, 7.9), point(10.0, 9.8)]
    result.lower, result.upper, result.estimate = 8.0, 12.0, 10.0
    result.at_estimate = result.points[1]
    return result


@pytest.mark.parametrize("target", [1e-300, 1e-12, 1e-3])
def test_a_tiny_target_rate_still_needs_one_replica(target: float) -> None:
    # Any positive rate needs at least one server: ceil(x) = 1 for 0 < x <= 1.
    fleet = fleet_for(_search(), target, gpus_per_replica=2, gpu_price_per_hour=3.0)
    assert fleet is not None
    assert fleet.num_replicas == 1 and fleet.num_replicas_at_lower_bound == 1
    assert fleet.num_gpus == 2 and fleet.usd_per_hour == pytest.approx(6.0)


def test_a_price_the_user_gave_is_not_called_approximate() -> None:
    result = _search()
    fleet = fleet_for(result, 20.0, 1, 2.5)
    given = format_capacity(result, "x", fleet, 1, 2.5, price_given=True)
    line = next(x for x in given.splitlines() if x.startswith("GPU price:"))
    assert "2.50" in line and "approximate" not in line
    listed = format_capacity(result, "x", fleet, 1, 3.0)
    line = next(x for x in listed.splitlines() if x.startswith("GPU price:"))
    assert "approximate" in line


@pytest.mark.parametrize("rate", ["inf", "Infinity"])
def test_an_infinite_target_rate_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: str
) -> None:
    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(md1_doc(50)))
    argv = ["capacity", str(path), "--slo", "ttft_mean_ms=500", "--target-rate", rate, "-q"]
    argv += ["--num-requests", "50", "--seeds", "1", "--out", str(tmp_path / "out")]
    message = one_line_error(capsys, argv)
    assert message.startswith("--target-rate") and "finite" in message
    assert not (tmp_path / "out").exists()
