"""Bad input to what session 11 added (``--server-setting``, ``--assume-model``, a
measured run's ``summary.json``) gets one line naming the flag or file, exit 2,
no traceback; nothing the user gave is silently dropped."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.cli.endpoint_options import server_setting
from sim.errors import ConfigError
from sim.metrics.vllm_result import parse_metric_percentiles
from sim.planning.sweep import load_sweep
from sim.validation.formats.measure_dir import read_measure_folder
from tests.cli_errors import one_line_error

SCENARIO = "scenarios/chat.yaml"
# Nothing listens on port 9 (discard): a setting refused is refused before any request.
UNREACHABLE = "http://127.0.0.1:9"


def _measure(tmp_path: Path, *settings: str) -> list[str]:
    argv = ["measure", SCENARIO, "--endpoint", UNREACHABLE, "--out", str(tmp_path / "m")]
    argv += ["--set", "workload.num_requests=2", "-q"]
    for setting in settings:
        argv += ["--server-setting", setting]
    return argv


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("tensor_parallel_size=abc", "a whole number >= 1"),
        ("tensor_parallel_size=0", "a whole number >= 1"),
        ("data_parallel_size=-2", "a whole number >= 1"),
        ("max_num_seqs=true", "a whole number >= 1"),
        ("enable_expert_parallel=2", "true or false"),
        ("enable_prefix_caching=yes", "true or false"),
    ],
)
def test_server_setting_of_the_wrong_type_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, setting: str, expected: str
) -> None:
    message = one_line_error(capsys, _measure(tmp_path, setting))
    name = setting.partition("=")[0]
    assert message.startswith(f"--server-setting {setting}:"), message
    assert expected in message and name in message, message
    assert "cannot reach" not in message


def test_server_setting_given_twice_with_two_values_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = _measure(tmp_path, "tensor_parallel_size=2", "tensor-parallel-size=4")
    message = one_line_error(capsys, argv)
    assert "--server-setting tensor_parallel_size" in message, message
    assert "2" in message and "4" in message, message


def test_server_setting_repeated_with_the_same_value_is_one_setting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The same value twice (dashes or underscores) says one thing: the run goes on,
    # to the server, which is not there.
    argv = _measure(tmp_path, "tensor_parallel_size=2", "tensor-parallel-size=2")
    assert "cannot reach the server" in one_line_error(capsys, argv)


@pytest.mark.parametrize("flag", ["--assume-model", "--assume-device"])
@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_assumed_name_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, name: str
) -> None:
    argv = ["validate", SCENARIO, "--out", str(tmp_path / "v"), "--measured", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, flag, name])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert f"argument {flag}: expected a name" in err, err


def _measured_folder(tmp_path: Path, summary: str) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(summary, encoding="utf-8")
    return folder


def _validate(tmp_path: Path, folder: Path) -> list[str]:
    return ["validate", SCENARIO, "--out", str(tmp_path / "v"), "--measured", str(folder)]


def test_a_summary_that_is_not_json_is_named_as_such(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = _measured_folder(tmp_path, "{not json")
    message = one_line_error(capsys, _validate(tmp_path, folder))
    assert message.startswith(f"--measured {folder}"), message
    assert "summary.json" in message and "not JSON" in message, message


def test_a_summary_of_another_mode_says_its_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = _measured_folder(tmp_path, json.dumps({"mode": "simulated"}))
    message = one_line_error(capsys, _validate(tmp_path, folder))
    assert "mode 'simulated'" in message and "measured" in message, message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_summary_says_it_cannot_be_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = _measured_folder(tmp_path, json.dumps({"mode": "measured"}))
    (folder / "summary.json").chmod(0)
    try:
        message = one_line_error(capsys, _validate(tmp_path, folder))
    finally:
        (folder / "summary.json").chmod(0o644)
    assert "summary.json" in message and "cannot read" in message, message


def test_a_summary_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    # A folder named summary.json: read_text fails as for a file of mode 000 (which
    # root reads), through the one reader of measure folders.
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(ConfigError, match=r"cannot read summary.json: Is a directory"):
        read_measure_folder(tmp_path)


@pytest.mark.parametrize("text", ["foo", "=3", "tensor_parallel_size=", "tensor_parallel_size= "])
def test_a_server_setting_that_is_not_name_equals_value_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=VALUE"):
        server_setting(text)


def test_metric_percentiles_take_0_and_100_and_refuse_past_them() -> None:
    # numpy's (and vLLM's) range, ends included.
    assert parse_metric_percentiles("0,100") == (0.0, 100.0)
    for text in ("100.0001", "-0.5", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"--metric-percentiles .*outside \[0, 100\]"):
            parse_metric_percentiles(text)


def _sweep(tmp_path: Path, scenario: str) -> Path:
    path = tmp_path / "sweep.yaml"
    doc = {"name": "s", "scenario": scenario, "grid": {"workload.arrival.rate_per_s": [5]}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_a_sweep_scenario_that_is_a_folder_names_the_sweep_and_field(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    path = _sweep(tmp_path, "folder")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: scenario: .*folder"):
        load_sweep(path)


def test_a_sweep_scenario_under_home_is_read_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # scenario: ~/... is the user's home, as a scenario's own paths (sim.config.anchored),
    # not a folder named ~ beside the sweep file.
    home = tmp_path / "home"
    home.mkdir()
    doc = yaml.safe_load(Path(SCENARIO).read_text(encoding="utf-8"))
    doc["name"] = "the_one_at_home"
    (home / "chat.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    plan = load_sweep(_sweep(tmp_path, "~/chat.yaml"))
    assert [point.scenario.name for point in plan.points] == ["the_one_at_home"]
