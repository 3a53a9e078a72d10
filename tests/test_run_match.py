"""validate refuses a measured run that is not its scenario's, listing the differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_validate import SCENARIO, _fake_measured_dir

from calibration.run_match import check_matches, mismatches
from calibration.validate import MeasuredDir
from sim.cli import main
from sim.errors import ConfigError
from sim.scenario import load_scenario

SETS = ["workload.duration_s=5"]


@pytest.fixture
def measured(tmp_path: Path) -> MeasuredDir:
    return MeasuredDir.load(_fake_measured_dir(tmp_path, SETS))


def differences(run: MeasuredDir, sets: list[str]) -> list[str]:
    return mismatches(load_scenario(SCENARIO, sets), run.summary, run.requests, SCENARIO.parent)


def test_the_scenarios_own_run_matches(measured: MeasuredDir) -> None:
    assert differences(measured, SETS) == []


def test_another_seed_or_count_is_listed(measured: MeasuredDir) -> None:
    found = differences(measured, [*SETS, "seed=12345"])
    assert any("requests' num_prompt_tokens differ" in f for f in found) or any(
        "requests (scenario:" in f for f in found
    )
    longer = differences(measured, ["workload.duration_s=20"])
    assert any(f.endswith(")") and "requests (scenario:" in f for f in longer)


def test_model_and_hardware_differences_are_listed(measured: MeasuredDir) -> None:
    summary = {**measured.summary, "model": "smollm2-135m", "hardware": "h100"}
    found = mismatches(load_scenario(SCENARIO, SETS), summary, measured.requests, SCENARIO.parent)
    scenario = load_scenario(SCENARIO, SETS)
    assert f"model smollm2-135m (scenario: {scenario.model.name})" in found
    assert f"hardware h100 (scenario: {scenario.hardware.name})" in found


def test_a_run_cut_short_may_hold_fewer_requests(measured: MeasuredDir) -> None:
    scenario = load_scenario(SCENARIO, SETS)
    head = measured.requests.sort_values("request_id").head(3)
    cut = {**measured.summary, "status": "time limit"}
    assert mismatches(scenario, cut, head, SCENARIO.parent) == []
    assert mismatches(scenario, measured.summary, head, SCENARIO.parent) != []  # complete: no
    lengths = head.assign(num_output_tokens=head["num_output_tokens"] + 1)
    found = mismatches(scenario, cut, lengths, SCENARIO.parent)
    assert found and found[0].startswith("3 requests' num_output_tokens differ (request 0:")


def test_the_error_is_one_line(measured: MeasuredDir) -> None:
    scenario = load_scenario(SCENARIO, [*SETS, "seed=777"])
    with pytest.raises(ConfigError) as error:
        check_matches(scenario, measured.summary, measured.requests, SCENARIO.parent, "--m x")
    assert "\n" not in str(error.value) and "not a run of this scenario" in str(error.value)


def test_validate_cli_refuses_a_mismatched_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fake_measured_dir(tmp_path, SETS)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "model": "llama-3-70b"}))
    argv = ["validate", str(SCENARIO), "--measured", str(run), "--out", str(tmp_path / "v")]
    assert main([*argv, *(x for s in SETS for x in ("--set", s)), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model llama-3-70b (scenario:" in err
