"""benchmarks/sim_speed.py runs end to end on a small slice (not timed: it prints ratios)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import sim_speed

HAS_NUMBA = importlib.util.find_spec("numba") is not None


def test_prints_every_workload_with_its_ratio_and_skip_ahead_agrees(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--num-requests", "300", "--other-requests", "150", "--compare-requests", "200"]
    assert sim_speed.main(args) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if " proc. " in line or " compiled " in line]
    for label, num in [
        ("base 512/128 at 8/s", 300),
        ("base, kernels", 300),
        ("chat at 8/s", 150),
        ("chat at 25/s", 150),
        ("16 replicas", 300),
        ("chat 8/s, kernels", 150),
    ]:
        mine = [row for row in rows if row.startswith(label)]
        assert all(f" {num:9,d} " in row for row in mine)
        assert any("Python, 1 proc." in row for row in mine)  # the Python path
        # The compiled loop plays roofline and kernel-table costs alike.
        assert any(" compiled " in row for row in mine) == HAS_NUMBA
    first = rows[0]
    # After the loop's name: requests, wall s, req/s, ratio, plans/req, cpu s, target.
    tokens = first.split()
    loop_end = tokens.index("compiled") if "compiled" in tokens else tokens.index("proc.")
    ratio, plans = tokens[loop_end + 4], tokens[loop_end + 5]
    assert first.startswith("base") and ratio == "1.00"  # its own reference
    plans_per_request = float(plans)
    assert 1.0 <= plans_per_request <= 3.0  # about one plan at each arrival and finish
    if HAS_NUMBA:  # both loops give the same finish times
        assert out.count("compiled and Python finish times identical: True") == 6
    assert "identical: False" not in out
    # Skip-ahead is bit-identical to step by step.
    assert "max finish-time difference 0.00e+00 s" in out


def test_only_base_runs_one_workload(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--only", "base", "--num-requests", "100", "--compare-requests", "50"]
    assert sim_speed.main(args) == 0
    out = capsys.readouterr().out
    assert "base 512/128" in out and "chat" not in out and "replicas" not in out
