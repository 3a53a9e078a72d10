"""benchmarks/compare_trees.py's own logic: the child runs the tree it is given, and
the medians and ratio come from the rounds it printed.

Nothing is timed against a figure: the seconds are stubbed, or only checked
to be positive.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench() -> Any:
    return load_benchmark("compare_trees")


def test_the_child_runs_the_tree_it_is_given(bench: Any, tmp_path: Path) -> None:
    seconds = bench.cpu_seconds(ROOT, ("chat25",))
    assert list(seconds) == ["chat25"] and seconds["chat25"] > 0
    # A tree without the simulator cannot be timed: the child fails, loudly.
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "sim_speed.py").write_text("")
    with pytest.raises(Exception):  # noqa: B017 (CalledProcessError or an assert in the child)
        bench.cpu_seconds(tmp_path, ("chat25",))


def test_medians_and_ratio_follow_the_rounds(
    bench: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    values = {before: iter([1.0, 3.0, 2.0]), after: iter([2.0, 6.0, 4.0])}
    monkeypatch.setattr(bench, "cpu_seconds", lambda tree, names: {"base": next(values[tree])})
    assert bench.main([str(before), str(after), "--rounds", "3", "--only", "base"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "base: median 2.000 s -> 4.000 s, after/before 2.000"
