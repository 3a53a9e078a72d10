"""Issue 39, a new user's round: sweep files that hung or dropped a value.

A grid of six keys of ten values (10**6 points) or ``seeds: 10**12`` spent
minutes validating points (or building the seed list) with no output; a key
set both in ``grid`` and in a point lost the point's value silently (the
grid's won). Both are refused up front, in one line naming the sweep file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import one_line_error

from sim.planning.sweep import MAX_SWEEP_RUNS

BASE = {
    "name": "tiny",
    "model": "llama-3-8b",
    "hardware": "h100",
    "workload": {
        "kind": "synthetic",
        "num_requests": 5,
        "arrival": {"kind": "poisson", "rate_per_s": 5},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 10},
    },
}


def _sweep_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], sweep: dict[str, Any]) -> str:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "scenario": "base.yaml", **sweep}))
    out = tmp_path / "out"
    message = one_line_error(capsys, ["sweep", str(path), "-q", "--jobs", "1", "--out", str(out)])
    assert message.startswith(str(path)) and not out.exists()
    return message


def test_a_million_point_grid_is_refused_before_it_is_expanded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ten = list(range(1, 11))
    grid = {
        "workload.prompt_tokens.tokens": ten,
        "workload.arrival.rate_per_s": ten,
        "workload.num_requests": ten,
        "seed": ten,
        "scheduler.max_num_seqs": ten,
        "workload.output_tokens.tokens": ten,
    }
    message = _sweep_error(tmp_path, capsys, {"grid": grid})
    assert f"{10**6:,} runs" in message


def test_a_huge_seed_count_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = {"grid": {"workload.arrival.rate_per_s": [1, 2]}, "seeds": 10**12}
    assert f"{2 * 10**12:,} runs" in _sweep_error(tmp_path, capsys, sweep)


def test_the_limit_counts_points_grid_and_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 points x 10 grid values x (MAX / 20 + 1) seeds: just over the limit.
    seeds = MAX_SWEEP_RUNS // 20 + 1
    sweep = {
        "grid": {"workload.arrival.rate_per_s": list(range(1, 11))},
        "points": [{"seed": 0}, {"seed": 1}],
        "seeds": seeds,
    }
    assert f"{20 * seeds:,} runs" in _sweep_error(tmp_path, capsys, sweep)


def test_a_key_in_both_the_grid_and_a_point_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = {
        "grid": {"workload.arrival.rate_per_s": [5]},
        "points": [{"scheduler.max_num_seqs": 8}, {"workload.arrival.rate_per_s": 7}],
    }
    message = _sweep_error(tmp_path, capsys, sweep)
    assert "points[1]" in message and "workload.arrival.rate_per_s" in message
