"""Session 13's audit of plan and capacity: a tiny target rate refused before any
work, and printed arithmetic a reader can check."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.planning.capacity import clock_min_rate_per_s
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
