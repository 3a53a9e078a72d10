"""benchmarks/startup.py's own logic: CPU seconds, the option probe, the rows it prints.

Nothing is timed here: the commands are stubs or tiny interpreters, and the
figures asserted are those the stubs hand back.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from benchmark_module import load_benchmark


@pytest.fixture
def bench() -> Any:
    return load_benchmark("startup")


def test_a_command_that_burns_cpu_is_charged_for_it(bench: Any) -> None:
    burn = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass"
    timing = bench.time_command([sys.executable, "-c", burn])
    assert timing.cpu_s >= 0.2  # its own CPU time, counted once it was waited for
    idle = bench.time_command([sys.executable, "-c", "import time; time.sleep(0.2)"])
    assert idle.cpu_s < idle.total_s  # sleeping costs wall time, little CPU


def test_children_cpu_grows_only_with_waited_children(bench: Any) -> None:
    before = bench.children_cpu_s()
    assert bench.children_cpu_s() == before  # nothing ran in between
    bench.time_command([sys.executable, "-c", "sum(range(10**6))"])
    assert bench.children_cpu_s() > before


def test_timing_keeps_its_old_two_field_form(bench: Any) -> None:
    timing = bench.Timing(2.0, 1.0)
    assert (timing.total_s, timing.summary_s, timing.cpu_s) == (2.0, 1.0, 0.0)


def test_the_option_probe_reads_run_help(bench: Any) -> None:
    assert bench.has_option(sys.executable, bench.FIGURE_PROCESS)
    assert not bench.has_option(sys.executable, "--no-such-option-anywhere")


def _fake_best_of(calls: list[list[str]]) -> Any:
    def best_of(args: list[str], repeats: int) -> Any:
        calls.append(list(args))
        if args[-1] == "pass":
            return sys.modules["startup"].Timing(0.05, None, 0.04)
        if "--help" in args:
            return sys.modules["startup"].Timing(0.1, None, 0.08)
        cpu = {"yes": 2.2, "no": 2.4}.get(args[-1], 2.0)
        return sys.modules["startup"].Timing(2.5, 1.25, cpu)

    return best_of


def test_every_figure_process_choice_gets_a_row(
    bench: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(bench, "best_of", _fake_best_of(calls))
    monkeypatch.setattr(bench, "has_option", lambda python, option: True)
    assert bench.main(["--repeats", "2"]) == 0
    runs = [c for c in calls if "run" in c]
    assert [c[c.index("--quiet") + 1 :] for c in runs] == [
        [],
        ["--figure-process", "yes"],
        ["--figure-process", "no"],
    ]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "best of 2 fresh subprocesses each; python -c pass: 0.050 s"
    rows = [line for line in lines if "(to exit)" in line]
    assert len(rows) == 3
    assert "--figure-process yes" in rows[1] and rows[1].endswith("2.20 CPU s")
    assert "--figure-process no" in rows[2] and rows[2].endswith("2.40 CPU s")
    assert all("2.500 s" in row and "misses" in row and "50.0 x" in row for row in rows)
    assert sum("until the summary is printed" in line for line in lines) == 3
    assert "servesim --help" in lines[1] and "meets" in lines[1]


def test_a_tree_without_the_option_is_timed_by_default_only(
    bench: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(bench, "best_of", _fake_best_of(calls))
    monkeypatch.setattr(bench, "has_option", lambda python, option: False)
    assert bench.main([]) == 0
    assert sum("run" in c for c in calls) == 1
    out = capsys.readouterr().out
    assert out.count("(to exit)") == 1 and "--figure-process" not in out
