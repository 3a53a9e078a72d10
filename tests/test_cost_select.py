"""Choosing the cost model: shipped artifacts by name, ``auto``, uncalibrated roofline."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from sim import api
from sim.cost.base import StepShape
from sim.cost.calibrated import CalibratedCost, load_artifact
from sim.cost.config import (
    AutoCostConfig,
    CalibratedCostConfig,
    artifact_hardware,
    build_cost_model,
    resolve_artifact,
    shipped_artifacts,
)
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import load_scenario, scenario_from_dict

TINY, CPU = model_preset("tiny"), hardware_preset("cpu-2core")
LLAMA, H100 = model_preset("llama-3-8b"), hardware_preset("h100")
DECODE = StepShape(num_decode_seqs=4, num_decode_context_tokens=2000)


def test_the_cpu_artifact_ships_and_names_its_hardware() -> None:
    names = [p.stem for p in shipped_artifacts()]
    assert "cpu-tiny-fp32" in names
    artifact = load_artifact(resolve_artifact("cpu-tiny-fp32", None))
    assert artifact_hardware(artifact) == "cpu-2core"
    assert artifact.model.spec == TINY


def test_auto_uses_the_shipped_artifact_for_its_model_and_hardware() -> None:
    cost = build_cost_model(AutoCostConfig(), TINY, CPU)
    assert isinstance(cost, CalibratedCost)
    assert "cpu-tiny-fp32.json" in cost.label


def test_auto_falls_back_to_a_roofline_labelled_uncalibrated() -> None:
    l4 = hardware_preset("l4")  # no kernel tables measure an L4
    cost = build_cost_model(AutoCostConfig(), LLAMA, l4)
    assert type(cost) is RooflineCost
    assert cost.label.endswith("(uncalibrated)")
    # Same numbers as the plain roofline: only the label differs.
    assert cost.step_s(DECODE) == RooflineCost(LLAMA, l4).step_s(DECODE)


def test_calibrated_by_name_matches_the_artifact_fit() -> None:
    cost = build_cost_model(CalibratedCostConfig(artifact="cpu-tiny-fp32"), TINY, CPU)
    path = resolve_artifact("cpu-tiny-fp32", None)
    direct = CalibratedCost(load_artifact(path).fit)
    assert cost.step_s(DECODE) == direct.step_s(DECODE)


def test_calibrated_by_relative_path_is_anchored_at_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "arts").mkdir()
    shutil.copy(resolve_artifact("cpu-tiny-fp32", None), tmp_path / "arts" / "mine.json")
    config = CalibratedCostConfig(artifact="arts/mine.json")
    cost = build_cost_model(config, TINY, CPU, base_dir=tmp_path)
    assert "mine.json" in cost.label


def test_unknown_artifact_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match=r"no shipped artifact 'nope'.*cpu-tiny-fp32"):
        build_cost_model(CalibratedCostConfig(artifact="nope"), TINY, CPU)


def test_a_missing_artifact_path_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        build_cost_model(CalibratedCostConfig(artifact="x/none.json"), TINY, CPU, tmp_path)


def test_model_or_hardware_mismatch_warns() -> None:
    with pytest.warns(UserWarning) as record:
        build_cost_model(CalibratedCostConfig(artifact="cpu-tiny-fp32"), LLAMA, H100)
    messages = " ".join(str(w.message) for w in record)
    assert "llama-3-8b" in messages and "h100" in messages


def test_matching_artifact_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_cost_model(CalibratedCostConfig(artifact="cpu-tiny-fp32"), TINY, CPU)


def test_scaling_to_the_scenario_hardware_is_an_extrapolation_and_faster_on_a_gpu() -> None:
    config = CalibratedCostConfig(artifact="cpu-tiny-fp32", scale_to_scenario_hardware=True)
    with pytest.warns(UserWarning, match="extrapolated"):
        scaled = build_cost_model(config, TINY, H100)
    measured = build_cost_model(CalibratedCostConfig(artifact="cpu-tiny-fp32"), TINY, CPU)
    assert "extrapolated" in scaled.label
    assert scaled.step_s(DECODE) < measured.step_s(DECODE)


def _tiny_doc(**cost: object) -> dict[str, object]:
    return {
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": cost,
        "workload": {
            "kind": "synthetic",
            "num_requests": 30,
            "arrival": {"kind": "poisson", "rate_per_s": 2},
            "prompt_tokens": {"kind": "fixed", "tokens": 64},
            "output_tokens": {"kind": "fixed", "tokens": 8},
        },
    }


def test_auto_is_the_default_and_summary_names_the_artifact() -> None:
    doc = _tiny_doc()
    del doc["cost"]
    result = api.run(scenario_from_dict(doc))
    assert "cpu-tiny-fp32.json" in result.summary["cost_model"]


def test_an_unknown_cost_field_is_rejected_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"cost\.artefact"):
        scenario_from_dict(_tiny_doc(kind="calibrated", artefact="cpu-tiny-fp32"))


def test_bad_artifact_name_in_a_scenario_names_the_file_and_field() -> None:
    with pytest.raises(ConfigError, match=r"cost\.artifact"):
        api.run(scenario_from_dict(_tiny_doc(kind="calibrated", artifact="nope")))


def test_the_smollm2_artifact_ships_and_auto_picks_it_on_the_cpu() -> None:
    smollm2 = model_preset("smollm2-135m")
    artifact = load_artifact(resolve_artifact("cpu-smollm2-135m-fp32", None))
    assert artifact.model.spec == smollm2
    assert artifact_hardware(artifact) == "cpu-2core"
    cost = build_cost_model(AutoCostConfig(), smollm2, CPU)
    assert isinstance(cost, CalibratedCost)
    assert "cpu-smollm2-135m-fp32.json" in cost.label
    # A 135M model costs more per step than the 12.9M tiny one on the same CPU.
    tiny = build_cost_model(AutoCostConfig(), TINY, CPU)
    assert cost.step_s(DECODE) > 2 * tiny.step_s(DECODE)


def test_the_smollm2_validation_scenario_simulates_with_its_shipped_curve() -> None:
    path = Path(__file__).resolve().parent.parent / "scenarios" / "validate_smollm2_cpu.yaml"
    scenario = load_scenario(path, ["workload.duration_s=20"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # model and hardware match the artifact: no warning
        result = api.run(scenario, base_dir=path.parent)
    assert "cpu-smollm2-135m-fp32.json" in result.summary["cost_model"]
    assert result.summary["completed"] > 0
