"""benchmarks/mutants.py's own logic: how a line is mutated, and that its list is well formed.

Nothing is mutated in the tree here: ``mutate`` works on text, and a run is
tried on a throwaway tree with one mutant and a stub test.
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
    (tmp_path / "mod.py").write_text("def f(a, b):\n    return a < b\n")
    (tmp_path / "test_mod.py").write_text(
        "from mod import f\n\n\ndef test_f():\n    assert f(1, 2)\n"
    )
    tests = ("test_mod.py",)
    caught = bench.Mutant("caught", "mod.py", "return a < b", "return a > b", tests, "x")
    missed = bench.Mutant("missed", "mod.py", "return a < b", "return a <= b", tests, "y")
    stale = bench.Mutant("stale", "mod.py", "return 0", "return 1", tests, "z")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert bench.run([caught, missed, stale], timeout_s=120) == 1  # one survived
    out = capsys.readouterr().out
    assert "killed    caught" in out and "survived  missed" in out and "stale     stale" in out
    assert "score: 1/2 killed (50%)" in out
    assert (tmp_path / "mod.py").read_text() == "def f(a, b):\n    return a < b\n"
