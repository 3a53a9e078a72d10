"""``--out`` is checked before any work: a bad location is one line, an occupied one announced."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

import sim.api
import sim.planning.capacity
from sim.cli import main
from sim.errors import ConfigError
from sim.metrics.out_path import check_out_dir, check_out_file

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
CHAT = str(SCENARIOS / "chat.yaml")


def refused(path: Path, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as error:
        check_out_dir(path)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_a_fresh_folder_is_fine_and_not_created(tmp_path: Path) -> None:
    assert check_out_dir(tmp_path / "a" / "b") == []
    assert not (tmp_path / "a").exists()  # nothing is left behind by the probe
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_and_a_path_under_a_file_are_refused(tmp_path: Path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    refused(file, "is a file, not a folder")
    assert "file.txt is a file" in refused(file / "sub" / "deeper", "is a file, not a folder")


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="no /sys (not Linux)")
def test_a_read_only_file_system_is_refused_even_for_root() -> None:
    # /sys refuses new folders to every user, root included: no permission bits involved.
    refused(Path("/sys/servesim-out"), r"cannot write in /sys \(")


def test_a_folder_without_write_permission_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(*args: Any, **kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)  # works as root, unlike chmod
    assert "(Permission denied)" in refused(tmp_path / "out", "cannot write in")


def test_another_runs_folder_is_announced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("summary.json", "requests.parquet", "a.png", "b.png", "c.csv", "d.csv"):
        (tmp_path / name).write_text("x")
    assert len(check_out_dir(tmp_path)) == 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a.png, b.png, c.csv, d.csv and 2 more" in err


def test_an_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_out_file(tmp_path / "new" / "artifact.json") is False
    with pytest.raises(ConfigError, match="is a folder; give a file name"):
        check_out_file(tmp_path)
    (tmp_path / "old.json").write_text("{}")
    assert check_out_file(tmp_path / "old.json") is True
    assert "will be replaced" in capsys.readouterr().err
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_out_file(tmp_path / "f" / "artifact.json")


# --- every command checks before it starts ----------------------------------------------------


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation or search is a test failure: the check must come first."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work started before --out was checked")

    monkeypatch.setattr(sim.api, "run", fail)
    monkeypatch.setattr(sim.planning.capacity, "search", fail)


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "occupied"
    path.write_text("x")
    return path


def test_run_checks_out_first(
    no_work: None, a_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_line_exit_2(["run", CHAT, "--out", str(a_file), "-q"], capsys, "is a file")


def test_capacity_checks_out_first(
    no_work: None, a_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["capacity", CHAT, "--slo", "ttft_p99_ms=500", "--out", str(a_file / "x"), "-q"]
    one_line_exit_2(argv, capsys, "is a file")


def test_sweep_checks_out_and_options_before_its_banner(
    no_work: None, a_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep.yaml"
    # (a grid of one point: seed may not be one, the sweep's seeds: field sets it)
    grid = {"workload.arrival.rate_per_s": [5]}
    sweep.write_text(yaml.safe_dump({"name": "s", "scenario": CHAT, "grid": grid}))
    one_line_exit_2(["sweep", str(sweep), "--out", str(a_file), "-q"], capsys, "is a file")
    out = str(tmp_path / "out")
    one_line_exit_2(["sweep", str(sweep), "--out", out, "--jobs", "0"], capsys, "--jobs")
    one_line_exit_2(
        ["sweep", str(sweep), "--out", out, "--address", "x:1"], capsys, "--address applies"
    )


def test_measure_and_validate_check_out_and_duration_first(
    a_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tiny = str(SCENARIOS / "validate_tiny_cpu.yaml")
    for command in ("measure", "validate"):
        one_line_exit_2([command, tiny, "--out", str(a_file), "-q"], capsys, "is a file")
        argv = [command, tiny, "--out", str(tmp_path / "m"), "--max-duration-s", "-1", "-q"]
        one_line_exit_2(argv, capsys, "--max-duration-s must be > 0 seconds, got -1")
    assert not (tmp_path / "m").exists()


def test_calibrate_checks_its_artifact_path_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    argv = ["calibrate", "--model", "tiny", "--out", str(tmp_path), "--no-progress"]
    one_line_exit_2(argv, capsys, "is a folder; give a file name")
