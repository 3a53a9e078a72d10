"""benchmarks/sim_speed.py runs end to end on a small slice (not timed: it prints ratios)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import sim_speed


def test_prints_every_workload_with_its_ratio_and_skip_ahead_agrees(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--num-requests", "300", "--other-requests", "150", "--compare-requests", "200"]
    assert sim_speed.main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    for label, num in [
        ("base 512/128 at 8/s", 300),
        ("chat at 8/s", 150),
        ("chat at 25/s", 150),
        ("16 replicas, ", 300),  # as api.run splits them by default
        ("16 replicas, 1 proc.", 300),  # in one process
    ]:
        row = next(line for key, line in rows.items() if key.startswith(label))
        assert f" {num:9,d} " in row
    first = next(line for line in out.splitlines() if line.startswith("base"))
    assert first.split()[-4] == "1.00"  # the base is its own reference
    plans_per_request = float(first.split()[-3])
    assert 1.0 <= plans_per_request <= 3.0  # about one plan at each arrival and finish
    # Skip-ahead is bit-identical to step by step.
    assert "max finish-time difference 0.00e+00 s" in out


def test_only_base_runs_one_workload(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--only", "base", "--num-requests", "100", "--compare-requests", "50"]
    assert sim_speed.main(args) == 0
    out = capsys.readouterr().out
    assert "base 512/128" in out and "chat" not in out and "replicas" not in out
