"""A stale mutant (its line gone from its file) fails benchmarks/mutants.py loudly.

Six mutants once went stale unnoticed: the code they targeted moved, the run
reported ``stale`` among its verdicts and still exited 0, so they tested
nothing. Now a stale mutant is named on stderr and fails the run and ``--list``
(exit 1), and this suite checks that every listed mutant still applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_benchmark("mutants")


def test_every_listed_mutant_applies_to_the_tree(bench: Any) -> None:
    # A refactor that moves a mutant's line must re-point the mutant in the same change.
    stale = [f"{m.name} ({m.path})" for m in bench.MUTANTS if bench.is_stale(m)]
    assert stale == []


def test_a_run_with_a_stale_mutant_fails_and_names_it(
    bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mod.py").write_text("def f(a, b):\n    return a < b\n")
    (tmp_path / "test_mod.py").write_text(
        "from mod import f\n\n\ndef test_f():\n    assert f(1, 2)\n"
    )
    tests = ("test_mod.py",)
    caught = bench.Mutant("caught", "mod.py", "return a < b", "return a > b", tests, "x")
    moved = bench.Mutant("moved", "mod.py", "return 0", "return 1", tests, "z")
    gone = bench.Mutant("gone", "nowhere.py", "return 0", "return 1", tests, "w")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    # Every applied mutant was killed: before, that alone made the exit status 0.
    assert bench.run([caught, moved, gone], timeout_s=120) == 1
    captured = capsys.readouterr()
    assert "killed    caught" in captured.out and "stale     moved" in captured.out
    assert "score: 1/1 killed (100%)" in captured.out
    assert "STALE mutant moved: its line is not in mod.py" in captured.err
    assert "STALE mutant gone: its line is not in nowhere.py" in captured.err


def test_list_fails_on_a_stale_mutant(
    bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mod.py").write_text("x = 1\n")
    fresh = bench.Mutant("fresh", "mod.py", "x = 1", "x = 2", ("t.py",), "why")
    moved = bench.Mutant("moved", "mod.py", "x = 3", "x = 4", ("t.py",), "why")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "MUTANTS", (fresh,))
    assert bench.main(["--list"]) == 0
    monkeypatch.setattr(bench, "MUTANTS", (fresh, moved))
    assert bench.main(["--list"]) == 1
    assert "STALE mutant moved" in capsys.readouterr().err
