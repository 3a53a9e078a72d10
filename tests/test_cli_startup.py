"""``servesim`` starts without the heavy libraries (issue 16), and loses nothing for it.

``servesim --help`` builds stub subcommands (name and help only) instead of
importing every subcommand's module; ``servesim CMD`` builds CMD's own parser.
Nothing here is timed: the tests check which modules are imported, that the
stubs say what the real parsers say, and that a run prints its summary before
writing its files (and still writes them all).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmark_module import load_benchmark

import sim.cli as cli
from sim.api.result import Result

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("matplotlib", "pandas", "torch", "numpy", "pydantic", "pyarrow", "scipy", "simpy")
ALL_COMMANDS = [name for _, names in cli.COMMANDS for name, _ in names]


def _imported_after(code: str) -> list[str]:
    """The top-level modules of HEAVY that a fresh interpreter holds after ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _listed(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    """(name, help) of each subcommand, in the order --help lists them."""
    return [(a.dest, a.help) for a in _subcommands(parser)._choices_actions]


# --- what start-up imports ------------------------------------------------------------------


def test_importing_the_cli_imports_no_heavy_library() -> None:
    assert _imported_after("import sim.cli") == []


def test_top_level_help_imports_no_heavy_library() -> None:
    code = "import sim.cli\ntry:\n    sim.cli.main(['--help'])\nexcept SystemExit:\n    pass"
    assert _imported_after(code) == []


def test_the_api_imports_neither_matplotlib_nor_torch_nor_pandas() -> None:
    # The summary is printed before plots are drawn: matplotlib comes with the first
    # figure, pandas with the first frame (a run's summary is made from its columns).
    imported = _imported_after("import sim.api")
    assert "matplotlib" not in imported and "torch" not in imported
    assert "pandas" not in imported
    assert "numpy" in imported  # the probe sees what is imported


def test_scipy_comes_only_with_the_numerics_that_use_it() -> None:
    # The fit's optimiser, the capacity search's t quantiles and validation's KS statistic
    # import scipy inside the function (~0.2 s): importing their modules does not.
    modules = "sim.api, sim.validation.fit, sim.validation.predict, sim.planning.capacity"
    assert "scipy" not in _imported_after(f"import {modules}")
    assert "scipy" in _imported_after("from sim.planning.capacity import t95\nt95(3)")


def test_a_small_run_s_summary_imports_neither_numpy_ma_nor_the_compiled_loop() -> None:
    # numpy.ma (~30 ms, np.unique's import) and the compiled loop's modules (~15 ms)
    # would come before the summary; a small run needs neither.
    code = (
        "import sys\nfrom sim import api\nfrom sim.metrics.report import format_summary_table\n"
        # On the roofline: chat.yaml's H100 kernel tables are pandas frames (numpy.ma).
        "result = api.run('scenarios/chat.yaml', ['cost.kind=roofline'], progress=False)\n"
        "format_summary_table(result.summary)\n"
        "print(sorted(m for m in ('numpy.ma', 'sim.fast.compiled.path', "
        "'sim.fast.compiled.loop', 'numpy.random') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "['numpy.random']"  # the probe sees imports


# --- stubs say what the real parsers say ----------------------------------------------------


def test_the_lazy_top_level_parser_lists_what_the_full_one_lists() -> None:
    assert _listed(cli.build_parser(lazy=True)) == _listed(cli.build_parser())


def test_every_command_is_listed_once_in_the_registered_order() -> None:
    names = [name for name, _ in _listed(cli.build_parser())]
    assert names == ALL_COMMANDS
    assert len(set(names)) == len(names)
    assert names[:2] == ["run", "calibrate"]


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_typed_command_gets_its_real_parser_and_the_others_stubs(command: str) -> None:
    parser = cli.build_parser(command, lazy=True)
    assert _listed(parser) == _listed(cli.build_parser())
    choices = _subcommands(parser).choices
    real = {name for name, sub in choices.items() if sub.add_help}
    group = next(names for _, names in cli.COMMANDS if any(n == command for n, _ in names))
    if command in cli.FORWARDED:  # parsed by sim.cost.kernels: never a real parser here
        assert real == set()
    else:
        assert real == {name for name, _ in group}
        assert choices[command].get_default("handler") is not None


def test_an_unknown_first_word_gets_only_stubs() -> None:
    parser = cli.build_parser("no-such-command", lazy=True)
    assert not any(sub.add_help for sub in _subcommands(parser).choices.values())


def test_without_calibration_the_stub_list_leaves_calibrate_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "has_calibration", lambda: False)
    names = [name for name, _ in _listed(cli.build_parser(lazy=True))]
    assert "calibrate" not in names
    assert names == [n for n in ALL_COMMANDS if n != "calibrate"]


def test_calibration_is_found_in_this_checkout() -> None:
    assert cli.has_calibration() is (importlib.util.find_spec("calibration") is not None)
    assert cli.has_calibration()


# --- every help still works -----------------------------------------------------------------


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: servesim")
    for name, help_text in _listed(cli.build_parser(lazy=True)):
        assert name in out
        assert help_text is not None and help_text.split()[0] in out


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_every_subcommand_answers_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: servesim {command}")


def test_an_unknown_command_is_refused_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["no-such-command"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in err
    assert all(f"'{name}'" in err for name in ALL_COMMANDS)


def test_no_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([])
    assert exit_.value.code == 2
    assert "required: command" in capsys.readouterr().err


def test_a_bad_option_of_a_stubbed_group_is_still_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `sweep` shares its adder with `capacity`: typing it must build its real options.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sweep", "x.yaml", "--no-such-option"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


# --- a run: summary first, then every file --------------------------------------------------


def _small_scenario(tmp_path: Path) -> Path:
    doc = {
        "name": "startup",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 20,
            "arrival": {"kind": "poisson", "rate_per_s": 5},
            "prompt_tokens": {"kind": "fixed", "tokens": 64},
            "output_tokens": {"kind": "fixed", "tokens": 8},
        },
    }
    path = tmp_path / "startup.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_run_prints_its_summary_before_writing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_before_write: list[str] = []
    write = Result.write

    def spying_write(self: Result, *args: Any, **kwargs: Any) -> list[Path]:
        seen_before_write.append(capsys.readouterr().out)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(Result, "write", spying_write)
    out = tmp_path / "out"
    assert cli.main(["run", str(_small_scenario(tmp_path)), "--out", str(out), "-q"]) == 0
    assert len(seen_before_write) == 1
    before = seen_before_write[0]
    assert "Serving Benchmark Result" in before and "cost model:" in before
    assert "wrote" not in before
    assert "wrote 6 files" in capsys.readouterr().out


def test_a_run_writes_every_file_before_it_returns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli.main(["run", str(_small_scenario(tmp_path)), "--out", str(out), "-q"]) == 0
    names = {p.name for p in out.iterdir()}
    assert names == {
        "requests.parquet",
        "summary.json",
        "timeseries.csv",
        "latency_cdf.png",
        "timeseries.png",
        "waterfall.png",
    }
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text())["completed"] == 20


def test_a_run_with_a_figure_process_never_imports_matplotlib_in_the_main_one(
    tmp_path: Path,
) -> None:
    # The figures are cut into arrays here and drawn in the forked process: matplotlib
    # (~0.3 s) loads there only. A fresh interpreter, so other tests' imports do not count.
    scenario, out = _small_scenario(tmp_path), tmp_path / "out"
    code = (
        "import sim.cli\n"
        f"code = sim.cli.main(['run', {str(scenario)!r}, '--out', {str(out)!r}, '-q', "
        "'--figure-process', 'yes'])\n"
        "assert code == 0, code"
    )
    assert "matplotlib" not in _imported_after(code)
    assert {p.name for p in out.glob("*.png")} == {
        "latency_cdf.png",
        "timeseries.png",
        "waterfall.png",
    }


# --- benchmarks/startup.py's own logic (the timing itself is not tested) --------------------


def _startup_benchmark() -> Any:
    return load_benchmark("startup")


def test_the_benchmark_spots_the_summary_line_and_only_it() -> None:
    bench = _startup_benchmark()
    printing = "print('table'); print('=' * 50); print('files')"
    timing = bench.time_command([sys.executable, "-c", printing])
    assert timing.summary_s is not None and 0 < timing.summary_s <= timing.total_s
    silent = bench.time_command([sys.executable, "-c", "print('=' * 49)"])
    assert silent.summary_s is None and silent.total_s > 0


def test_the_benchmark_stops_on_a_failing_command() -> None:
    bench = _startup_benchmark()
    with pytest.raises(SystemExit, match="exited with status 3"):
        bench.time_command([sys.executable, "-c", "raise SystemExit(3)"])


def test_the_benchmark_keeps_the_fastest_run(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _startup_benchmark()
    timings = iter([bench.Timing(3.0, 1.0), bench.Timing(2.0, None), bench.Timing(4.0, 0.5)])
    monkeypatch.setattr(bench, "time_command", lambda args: next(timings))
    assert bench.best_of(["x"], 3) == bench.Timing(2.0, None)
    assert bench.verdict(0.29, 0.3) == "meets" and bench.verdict(0.3, 0.3) == "misses"


def test_the_benchmark_summary_marker_is_the_tables_closing_rule() -> None:
    from sim.metrics.report import format_summary_table

    assert (
        format_summary_table({"completed": 1}).splitlines()[-1] == _startup_benchmark().SUMMARY_END
    )
