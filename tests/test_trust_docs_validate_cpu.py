"""``servesim validate`` says when the run's CPU is not the one its calibration was timed on.

Issue 39, item 23: the README's validate example missed by -41 / -52 % on a
machine whose CPU differs from the shipped artifact's, and nothing said so. A
calibrated curve is one CPU model's step time; the report (printout and JSON)
now carries a caveat naming both CPUs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.compare_measured import (
    calibration_cpu_caveat,
    load_measured,
    validate,
    write_validation,
)
from sim import api
from sim.cli import main as cli_main
from sim.cost.calibrated import CalibratedCost, load_artifact
from sim.cost.linear import LinearCost
from sim.metrics.report import summary_to_json
from sim.scenario import load_scenario
from sim.validation.match import LAYOUT_SETTINGS

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
ARTIFACT = ROOT / "calibration" / "artifacts" / "cpu-tiny-fp32.json"
OTHER_CPU = "AMD EPYC 7763 64-Core Processor"  # not the shipped artifact's CPU
OVERRIDES = ["workload.duration_s=8"]


def _artifact_cpu() -> str:
    # Read from the file itself, not through the cost model under test.
    return str(json.loads(ARTIFACT.read_text())["hardware"]["cpu_model"])


def _cost() -> CalibratedCost:
    cost = api.cost_model_for(load_scenario(SCENARIO, OVERRIDES))
    assert isinstance(cost, CalibratedCost)
    return cost


def test_the_premise_the_other_cpu_is_not_the_artifacts() -> None:
    assert _artifact_cpu() != OTHER_CPU
    assert load_artifact(ARTIFACT).hardware.device == "cpu"


def test_a_calibrated_cost_knows_the_cpu_it_was_timed_on() -> None:
    timed_on = _cost().timed_on
    assert timed_on is not None and timed_on.cpu_model == _artifact_cpu()


def test_a_run_on_another_cpu_gets_one_line_naming_both() -> None:
    caveat = calibration_cpu_caveat(_cost(), {"device": "cpu", "device_name": OTHER_CPU})
    assert caveat is not None and "\n" not in caveat
    assert OTHER_CPU in caveat and _artifact_cpu() in caveat and "cpu-tiny-fp32" in caveat


@pytest.mark.parametrize(
    "summary",
    [
        {"device": "cpu", "device_name": "<the artifact's>"},  # the same CPU: nothing to say
        {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"},  # not a CPU run
        {"format": "vllm_bench"},  # imported: no CPU recorded
    ],
)
def test_no_caveat_without_evidence_of_another_cpu(summary: dict[str, str]) -> None:
    if summary.get("device_name") == "<the artifact's>":
        summary = {**summary, "device_name": _artifact_cpu()}
    assert calibration_cpu_caveat(_cost(), summary) is None


def test_a_cost_model_not_timed_on_a_cpu_gets_no_cpu_caveat() -> None:
    linear = LinearCost(step_overhead_s=1e-3)
    assert calibration_cpu_caveat(linear, {"device": "cpu", "device_name": OTHER_CPU}) is None


def _fake_measured_dir(tmp_path: Path, device_name: str) -> Path:
    """A simulated run written like a measure folder, said to be measured on ``device_name``."""
    result = api.run(load_scenario(SCENARIO, OVERRIDES))
    out = tmp_path / "measured"
    out.mkdir()
    result.requests.to_parquet(out / "requests.parquet")
    # As measure writes it: the settings that ran and the reference engine's layout.
    settings = {**result.summary["engine_settings"], **dict.fromkeys(LAYOUT_SETTINGS, 1)}
    summary = {**result.summary, "mode": "measured", "device": "cpu", "device_name": device_name}
    summary["engine_settings"] = settings
    (out / "summary.json").write_text(summary_to_json(summary))
    return out


def test_validate_reports_the_other_cpu_in_report_md_and_json(tmp_path: Path) -> None:
    measured = load_measured(_fake_measured_dir(tmp_path, OTHER_CPU))
    result = validate(load_scenario(SCENARIO, OVERRIDES), measured, base_dir=SCENARIO.parent)
    assert len(result.caveats) == 1 and OTHER_CPU in result.caveats[0]
    write_validation(result, tmp_path / "v", "test")
    assert OTHER_CPU in (tmp_path / "v" / "report.md").read_text()
    data = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert data["caveats"] == result.caveats


def test_validate_on_the_artifacts_cpu_has_no_caveat(tmp_path: Path) -> None:
    measured = load_measured(_fake_measured_dir(tmp_path, _artifact_cpu()))
    result = validate(load_scenario(SCENARIO, OVERRIDES), measured, base_dir=SCENARIO.parent)
    assert result.caveats == []


def test_the_validate_command_warns_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fake_measured_dir(tmp_path, OTHER_CPU)
    args = ["validate", str(SCENARIO), "--set", OVERRIDES[0], "--measured", str(run)]
    code = cli_main([*args, "--out", str(tmp_path / "v")])
    assert code == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "servesim: warning:" in line]
    assert len(warnings) == 1 and OTHER_CPU in warnings[0]
    assert OTHER_CPU in captured.out  # the printed report.md carries it too
