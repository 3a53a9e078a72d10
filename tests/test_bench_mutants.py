"""benchmarks/mutants.py's own logic: how a line is mutated, and that its list is well formed.

Nothing is mutated in the tree here: ``mutate`` works on text, and a run is
tried on a throwaway tree with one mutant and a stub test. Every listed mutant
must apply to the tree: a refactor that moves a mutant's line re-points it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_benchmark("mutants")


def _toy_tree(tmp_path: Path) -> tuple[str, ...]:
    """A throwaway tree: ``mod.py``'s ``f(a, b)`` is ``a < b``, and the one test
    file (returned) that catches any mutant making ``f(1, 2)`` false."""
    (tmp_path / "mod.py").write_text("def f(a, b):\n    return a < b\n")
    (tmp_path / "test_mod.py").write_text(
        "from mod import f\n\n\ndef test_f():\n    assert f(1, 2)\n"
    )
    return ("test_mod.py",)


def test_a_mutant_replaces_its_line_keeping_indentation_and_ending(bench: Any) -> None:
    mutant = bench.Mutant("m", "f.py", "return a < b", "return a <= b", ("t.py",), "why")
    text = "def f(a, b):\n    return a < b\n"
    assert bench.mutate(text, mutant) == "def f(a, b):\n    return a <= b\n"
    assert bench.mutate("x = 1\r\n  return a < b\r\n", mutant) == "x = 1\r\n  return a <= b\r\n"


def test_an_absent_or_ambiguous_line_is_stale_unless_its_occurrence_is_named(bench: Any) -> None:
    mutant = bench.Mutant("m", "f.py", "x = 1", "x = 2", ("t.py",), "why")
    assert bench.mutate("y = 1\n", mutant) is None
    twice = "x = 1\nif c:\n    x = 1\n"
    assert bench.mutate(twice, mutant) is None
    second = bench.Mutant("m", "f.py", "x = 1", "x = 2", ("t.py",), "why", nth=1)
    assert bench.mutate(twice, second) == "x = 1\nif c:\n    x = 2\n"
    third = bench.Mutant("m", "f.py", "x = 1", "x = 2", ("t.py",), "why", nth=2)
    assert bench.mutate(twice, third) is None


def test_the_list_is_well_formed(bench: Any) -> None:
    names = [m.name for m in bench.MUTANTS]
    assert len(names) == len(set(names))
    for m in bench.MUTANTS:
        assert m.original != m.mutated and m.tests and m.why, m.name
        assert (ROOT / m.path).is_file(), m.name
        for test in m.tests:
            assert (ROOT / test.split("::")[0]).is_file(), (m.name, test)


def test_unknown_names_are_refused(bench: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--only", "no-such-mutant"]) == 2
    assert "unknown mutant(s): no-such-mutant" in capsys.readouterr().err


def test_a_run_kills_a_mutant_its_test_catches_and_leaves_the_tree_alone(
    bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _toy_tree(tmp_path)
    caught = bench.Mutant("caught", "mod.py", "return a < b", "return a > b", tests, "x")
    missed = bench.Mutant("missed", "mod.py", "return a < b", "return a <= b", tests, "y")
    stale = bench.Mutant("stale", "mod.py", "return 0", "return 1", tests, "z")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert bench.run([caught, missed, stale], timeout_s=120) == 1  # one survived
    out = capsys.readouterr().out
    assert "killed    caught" in out and "survived  missed" in out and "stale     stale" in out
    assert "score: 1/2 killed (50%)" in out
    assert (tmp_path / "mod.py").read_text() == "def f(a, b):\n    return a < b\n"


# -- staleness: six mutants once went stale unnoticed (the run reported ``stale`` and
# still exited 0, so they tested nothing); now a stale mutant fails the run and
# ``--list`` (exit 1), and every listed mutant must apply to the tree.


def test_every_listed_mutant_applies_to_the_tree(bench: Any) -> None:
    # A refactor that moves a mutant's line must re-point the mutant in the same change.
    stale = [f"{m.name} ({m.path})" for m in bench.MUTANTS if bench.is_stale(m)]
    assert stale == []


def test_a_run_with_a_stale_mutant_fails_and_names_it(
    bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _toy_tree(tmp_path)
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
