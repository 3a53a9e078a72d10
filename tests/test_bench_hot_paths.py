"""benchmarks/hot_paths.py's own logic: every operation runs, rows and flags print.

Nothing is timed here: the figures asserted are the rows' names and the flag a
hand-made row's ratio earns, never a measured duration.
"""

from __future__ import annotations

from typing import Any

import pytest
from benchmark_module import load_benchmark


@pytest.fixture
def bench() -> Any:
    return load_benchmark("hot_paths")


def test_every_operation_runs_at_a_small_scale(
    bench: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--scale", "0.001"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["operation", "seconds", "goal", "s", "ratio"]
    names = "\n".join(out[1:])
    for kind in ("poisson", "gamma", "constant"):
        assert f"1,000 {kind} arrival times" in names
    assert "a 1,000-request open-loop workload" in names
    assert "200 closed-loop lengths and think times" in names
    assert "one CalibratedCost.step_s call" in names
    assert "summarize 200 requests, 2,000 steps" in names
    assert len(out) == 1 + 8


def test_a_row_over_its_goal_is_flagged(bench: Any) -> None:
    text = bench.format_rows([bench.Row("slow", 2.0, 1.0), bench.Row("fast", 0.5, 1.0)])
    slow, fast = text.splitlines()[1:]
    assert slow.endswith("2.00  over the goal") and fast.endswith("0.50")


@pytest.mark.parametrize("scale", ["0", "1.5", "-1"])
def test_a_scale_outside_zero_to_one_is_refused(bench: Any, scale: str) -> None:
    with pytest.raises(SystemExit) as error:
        bench.main(["--scale", scale])
    assert error.value.code == 2
