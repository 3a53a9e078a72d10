"""CalibratedCost, the artifact schema and its loader (all torch-free)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from decode_runs import by_loop, run_prices
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.base import CostModel, StepShape
from sim.cost.calibrated import (
    SCHEMA_VERSION,
    CalibratedCost,
    CalibrationArtifact,
    CalibrationSample,
    FitCoefficients,
    FitError,
    HardwareInfo,
    ModelInfo,
    SoftwareInfo,
    load_artifact,
    save_artifact,
    scale_to_hardware,
    tokens_curve_s,
)
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "calibration" / "artifacts" / "cpu-tiny-fp32.json"

seconds = st.floats(min_value=0.0, max_value=1e-2, allow_nan=False)


def _fit(**overrides: Any) -> FitCoefficients:
    values: dict[str, Any] = {
        "kind": "piecewise",
        "token_knots": [1, 4, 16, 256],
        "token_knot_s": [5e-3, 6e-3, 4e-3, 30e-3],
        "decode_batch_knots": [1, 8, 64],
        "decode_batch_knot_s": [1e-4, 2e-3, 1e-2],
        "per_prefill_seq_s": 1e-3,
        "per_prefill_attention_pair_s": 1e-7,
        "per_prefill_kv_read_token_s": 2e-6,
        "per_decode_seq_s": 5e-4,
        "decode_context_hinges": [0, 1024, 8192],
        "per_decode_context_token_s": [1e-6, 0.0, 3e-6],
        "floor_s": 1e-3,
    }
    values.update(overrides)
    return FitCoefficients(**values)


def _sample(shape: StepShape, median_s: float, section: str = "decode") -> CalibrationSample:
    times_s = [median_s, median_s * 1.01, median_s * 0.99]
    return CalibrationSample.from_times(section, shape, times_s)  # type: ignore[arg-type]


def _artifact(fit: FitCoefficients | None = None) -> CalibrationArtifact:
    spec = model_preset("tiny")
    return CalibrationArtifact(
        schema_version=SCHEMA_VERSION,
        created_utc="2026-11-29T21:00:00+00:00",
        command="servesim calibrate --model tiny",
        git_revision=None,
        hardware=HardwareInfo(
            device="cpu",
            device_name="Some CPU",
            device_count=1,
            cpu_model="Some CPU",
            num_threads=1,
        ),
        model=ModelInfo(spec=spec, num_params=spec.num_params, dtype="fp32"),
        software=SoftwareInfo(python="3.11", numpy="2", servesim="0.1.0"),
        grid="small",
        num_warmup=1,
        num_repeats=3,
        sampling_temperature=1.0,
        total_seconds=1.5,
        samples=[
            _sample(StepShape.build(decode_context_tokens=[100, 200]), 0.01),
            _sample(StepShape.build(prefill_chunks=[(64, 0)]), 0.02, "prefill"),
        ],
        fit=fit or _fit(),
        fit_error=FitError(
            num_train=1,
            num_held_out=1,
            train_mean_ape=0.01,
            held_out_mean_ape=0.02,
            held_out_max_ape=0.02,
        ),
    )


# --- the evaluator -----------------------------------------------------------


def test_is_a_cost_model() -> None:
    assert isinstance(CalibratedCost(_fit()), CostModel)


def test_empty_step_is_free_and_others_are_positive() -> None:
    cost = CalibratedCost(_fit())
    assert cost.step_s(StepShape()) == 0.0
    assert cost.step_s(StepShape.build(decode_context_tokens=[1])) > 0
    assert cost.step_s(StepShape.build(prefill_chunks=[(1, 0)])) > 0


def test_floor_bounds_every_step_from_below() -> None:
    cost = CalibratedCost(_fit(token_knot_s=[0.0] * 4, decode_batch_knot_s=[0.0] * 3, floor_s=7e-3))
    assert cost.step_s(StepShape.build(decode_context_tokens=[1])) == 7e-3


def test_terms_add_up_as_documented() -> None:
    fit = _fit()
    cost = CalibratedCost(fit)
    shape = StepShape.build(prefill_chunks=[(12, 100)], decode_context_tokens=[3000, 7000])
    tokens = 12 + 2
    context = 10_000
    expected = (
        tokens_curve_s(fit.token_knots, fit.token_knot_s, tokens)
        + 1e-3 * 1
        + 1e-7 * shape.prefill_attention_pairs
        + 2e-6 * 112
        + 5e-4 * 2
        + tokens_curve_s(fit.decode_batch_knots, fit.decode_batch_knot_s, 2)
        + 1e-6 * context
        + 3e-6 * (context - 8192)
    )
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)


def test_tokens_curve_interpolates_and_extrapolates_as_documented() -> None:
    knots, values = [2, 4, 8], [1.0, 3.0, 2.0]
    assert [tokens_curve_s(knots, values, k) for k in knots] == values
    assert tokens_curve_s(knots, values, 3) == pytest.approx(2.0)
    assert tokens_curve_s(knots, values, 1) == 0.0  # first segment extended below
    assert tokens_curve_s([2, 4], [1.0, 9.0], 1) == 0.0  # ... and floored at 0
    assert tokens_curve_s([2, 4], [2.0, 3.0], 1) == 1.5
    assert tokens_curve_s(knots, values, 100) == 2.0  # a falling last slope is clipped
    assert tokens_curve_s([2, 4], [1.0, 3.0], 6) == pytest.approx(5.0)  # rising: kept
    assert tokens_curve_s([5], [1.5], 50) == 1.5
    assert tokens_curve_s([], [], 50) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    knot_s=st.lists(seconds, min_size=3, max_size=3),
    batch_s=st.lists(seconds, min_size=2, max_size=2),
    slopes=st.lists(st.floats(min_value=0, max_value=1e-5), min_size=3, max_size=3),
    per_seq=seconds,
    num_seqs=st.integers(0, 300),
    context=st.integers(0, 50_000),
    num_steps=st.integers(0, 40),
)
def test_decode_steps_equal_step_by_step(
    knot_s: list[float],
    batch_s: list[float],
    slopes: list[float],
    per_seq: float,
    num_seqs: int,
    context: int,
    num_steps: int,
) -> None:
    fit = _fit(
        token_knots=[1, 8, 64],
        token_knot_s=knot_s,
        decode_batch_knots=[2, 16],
        decode_batch_knot_s=batch_s,
        per_decode_seq_s=per_seq,
        per_decode_context_token_s=slopes,
    )
    cost = CalibratedCost(fit)
    vectorised = run_prices(cost, num_seqs, context, num_steps)
    looped = by_loop(cost, num_seqs, context, num_steps)
    assert vectorised.shape == (num_steps,)
    np.testing.assert_allclose(vectorised, looped, rtol=1e-12, atol=0)


def test_decode_context_cost_is_non_decreasing() -> None:
    cost = CalibratedCost(_fit())
    steps = run_prices(cost, 8, 100, 2000)
    assert np.all(np.diff(steps) >= 0)


# --- the schema --------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"token_knots": [4, 2, 8, 16]},
        {"token_knot_s": [1.0]},
        {"decode_batch_knots": [8, 1, 64]},
        {"decode_batch_knot_s": [1.0]},
        {"kind": "linear"},
        {"kind": "linear", "token_knots": [], "token_knot_s": []},
        {"decode_context_hinges": [5, 1024, 8192]},
        {"decode_context_hinges": [0, 8192, 1024]},
        {"per_decode_context_token_s": [1e-6]},
        {"per_decode_seq_s": -1.0},
        {"floor_s": 0.0},
    ],
)
def test_fit_coefficients_reject_inconsistent_values(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _fit(**overrides)


def test_linear_fit_has_no_knots() -> None:
    fit = _fit(
        kind="linear",
        token_knots=[],
        token_knot_s=[],
        decode_batch_knots=[],
        decode_batch_knot_s=[],
        intercept_s=1e-3,
    )
    assert CalibratedCost(fit).step_s(StepShape.build(decode_context_tokens=[10])) > 1e-3


# --- loading and saving ----------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    artifact = _artifact()
    path = save_artifact(artifact, tmp_path / "sub" / "a.json")
    loaded = load_artifact(path)
    assert loaded == artifact
    assert (
        CalibratedCost.from_artifact(load_artifact(path)).label == "calibrated:tiny-fp32@Some CPU"
    )
    assert CalibratedCost.from_artifact(load_artifact(path)).step_s(
        artifact.samples[0].shape
    ) == CalibratedCost(artifact.fit).step_s(artifact.samples[0].shape)


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _one_line_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_artifact(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    assert "not found" in _one_line_error(tmp_path / "nope.json")


def test_corrupted_file(tmp_path: Path) -> None:
    good = json.dumps(_artifact().model_dump(mode="json"))
    message = _one_line_error(_write(tmp_path, good[: len(good) // 2]))
    assert "not valid JSON" in message and "line" in message


def test_not_an_object(tmp_path: Path) -> None:
    assert "JSON object" in _one_line_error(_write(tmp_path, [1, 2]))


def test_wrong_version(tmp_path: Path) -> None:
    data = _artifact().model_dump(mode="json") | {"schema_version": 99}
    message = _one_line_error(_write(tmp_path, data))
    assert "schema_version" in message and "99" in message


def test_missing_version(tmp_path: Path) -> None:
    data = _artifact().model_dump(mode="json")
    del data["schema_version"]
    assert "'schema_version' is missing" in _one_line_error(_write(tmp_path, data))


def test_missing_nested_field_is_named(tmp_path: Path) -> None:
    data = _artifact().model_dump(mode="json")
    del data["fit"]["floor_s"]
    assert ": fit.floor_s: Field required" in _one_line_error(_write(tmp_path, data))


def test_wrong_field_is_named(tmp_path: Path) -> None:
    data = _artifact().model_dump(mode="json")
    data["samples"][1]["median_s"] = "fast"
    message = _one_line_error(_write(tmp_path, data))
    assert ": samples.1.median_s: Input should be a valid number" in message


def test_unknown_field_is_named(tmp_path: Path) -> None:
    data = _artifact().model_dump(mode="json") | {"surprise": 1}
    assert ": surprise: Extra inputs are not permitted" in _one_line_error(_write(tmp_path, data))


# --- extrapolation -----------------------------------------------------------


def test_scaling_to_the_same_hardware_changes_nothing_but_the_label() -> None:
    artifact = _artifact()
    hw = hardware_preset("cpu-2core")
    with pytest.warns(UserWarning, match="extrapolated"):
        scaled = scale_to_hardware(artifact, hw, hw)
    assert scaled.extrapolation is not None
    assert "extrapolated" in CalibratedCost.from_artifact(scaled).label
    before, after = CalibratedCost(artifact.fit), CalibratedCost(scaled.fit)
    for shape in (s.shape for s in artifact.samples):
        assert after.step_s(shape) == pytest.approx(before.step_s(shape), rel=1e-9)


def test_scaling_to_faster_hardware_never_slows_a_step() -> None:
    artifact = _artifact()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = scale_to_hardware(artifact, hardware_preset("l4"), hardware_preset("h200"))
    before, after = CalibratedCost(artifact.fit), CalibratedCost(scaled.fit)
    shapes = [
        StepShape.build(decode_context_tokens=[2000] * 16),
        StepShape.build(prefill_chunks=[(256, 1024)]),
        StepShape.build(prefill_chunks=[(16, 0)], decode_context_tokens=[10_000] * 4),
    ]
    for shape in shapes:
        assert after.step_s(shape) <= before.step_s(shape)
    # KV-read terms scale by exactly the bandwidth ratio.
    ratio = (300e9 * 0.8) / (4.8e12 * 0.8)
    assert scaled.fit.per_decode_context_token_s[0] == pytest.approx(
        artifact.fit.per_decode_context_token_s[0] * ratio
    )


# --- the shipped artifact and the torch-free promise -----------------------


def test_shipped_cpu_artifact_loads_and_is_small() -> None:
    assert SHIPPED.is_file(), f"the shipped artifact {SHIPPED} is missing"  # fail, never skip
    assert SHIPPED.stat().st_size < 1_000_000
    artifact = load_artifact(SHIPPED)
    assert artifact.model.spec == model_preset("tiny")
    assert artifact.hardware.num_threads == 1
    assert artifact.fit_error.num_held_out > 0
    cost = CalibratedCost.from_artifact(load_artifact(SHIPPED))
    for sample in artifact.samples:
        assert cost.step_s(sample.shape) > 0


def test_sim_cost_imports_without_torch() -> None:
    code = "import sys; sys.modules['torch'] = None\nimport sim.cost.calibrated, calibration.fit\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
