"""The fitted cost model (base + overhead, prefill / decode multipliers) and its artifact."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from decode_runs import by_loop, run_prices
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.cost.base import StepShape
from sim.cost.config import FittedCostConfig, RooflineCostConfig, build_cost_model
from sim.cost.fitted import (
    FitParameters,
    FitSummary,
    FittedCost,
    FittedCostArtifact,
    FittedProvenance,
    FittedRunInfo,
    decode_part,
    load_fitted_artifact,
    prefill_part,
    prefill_share,
    rebase_paths,
    save_fitted_artifact,
)
from sim.cost.linear import LinearCost
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import Scenario

BASE = LinearCost(step_overhead_s=0.01, per_prefill_token_s=0.001, per_decode_seq_s=0.002)
MIXED = StepShape.build(prefill_chunks=[(100, 0)], decode_context_tokens=[10] * 5)


def test_identity_parameters_give_the_base_model() -> None:
    fitted = FittedCost(BASE, FitParameters())
    for shape in (MIXED, prefill_part(MIXED), decode_part(MIXED)):
        assert fitted.step_s(shape) == pytest.approx(BASE.step_s(shape), rel=1e-12)


def test_a_mixed_step_is_split_by_the_parts_alone() -> None:
    # prefill alone 0.01 + 0.1 = 0.11 s; decode alone 0.01 + 5 * 0.002 = 0.02 s;
    # together 0.12 s, of which 0.11 / 0.13 is prefill.
    assert prefill_share(BASE, MIXED) == pytest.approx(0.11 / 0.13)
    fitted = FittedCost(BASE, FitParameters(0.003, 2.0, 0.5))
    expected = 0.003 + 0.12 * (2.0 * 0.11 + 0.5 * 0.02) / 0.13
    assert fitted.step_s(MIXED) == pytest.approx(expected)


def test_pure_steps_use_one_multiplier() -> None:
    fitted = FittedCost(BASE, FitParameters(0.003, 2.0, 0.5))
    prefill = prefill_part(MIXED)
    decode = decode_part(MIXED)
    assert fitted.step_s(prefill) == pytest.approx(0.003 + 2.0 * 0.11)
    assert fitted.step_s(decode) == pytest.approx(0.003 + 0.5 * 0.02)
    assert fitted.step_s(StepShape()) == 0.0


def test_the_parts_keep_their_own_fields() -> None:
    assert prefill_part(MIXED) == StepShape.build(prefill_chunks=[(100, 0)])
    assert decode_part(MIXED) == StepShape.build(decode_context_tokens=[10] * 5)
    assert prefill_share(BASE, prefill_part(MIXED)) == 1.0
    assert prefill_share(BASE, decode_part(MIXED)) == 0.0


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 64),
    st.integers(0, 4000),
    st.integers(0, 20),
    st.floats(0, 0.01),
    st.floats(0.1, 5),
)
def test_decode_runs_equal_steps_one_by_one(
    num_seqs: int, context: int, num_steps: int, overhead_s: float, multiplier: float
) -> None:
    fitted = FittedCost(BASE, FitParameters(overhead_s, 1.7, multiplier))
    np.testing.assert_allclose(
        run_prices(fitted, num_seqs, context, num_steps),
        by_loop(fitted, num_seqs, context, num_steps),
        rtol=1e-12,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"step_overhead_s": -1e-3},
        {"prefill_multiplier": 0.0},
        {"decode_multiplier": -1.0},
        {"decode_multiplier": float("nan")},
    ],
)
def test_parameters_that_would_make_steps_free_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        FitParameters(**kwargs)


def test_the_label_names_base_and_parameters() -> None:
    label = FittedCost(BASE, FitParameters(0.002, 1.5, 0.75), source="x.json").label
    assert BASE.label in label and "2 ms" in label and "x1.5" in label and "x0.75" in label
    assert label.endswith("[x.json]")


def artifact(base_cost: dict[str, Any], params: FitParameters) -> FittedCostArtifact:
    return FittedCostArtifact(
        provenance=FittedProvenance(
            tool_version="test",
            created_utc="2026-01-01T00:00:00+00:00",
            command="servesim calibrate --from-run r",
            model="tiny",
            hardware="cpu-2core",
            runs=[FittedRunInfo(source="r", format="imported", num_requests=3, sha256="0" * 64)],
        ),
        base_cost=base_cost,
        base_cost_label="linear",
        parameters=params,
        fit=FitSummary(
            free_parameters=["decode_multiplier"],
            objective="test",
            objective_value=0.0,
            base_objective_value=1.0,
            num_evaluations=3,
            optimiser="test",
        ),
    )


LINEAR_BLOCK = {
    "kind": "linear",
    "step_overhead_s": 0.01,
    "per_prefill_token_s": 0.001,
    "per_decode_seq_s": 0.002,
}


def test_artifact_round_trip_loads_as_a_scenarios_cost(tmp_path: Path) -> None:
    params = FitParameters(0.004, 1.25, 0.8)
    path = save_fitted_artifact(artifact(LINEAR_BLOCK, params), tmp_path / "a" / "fit.json")
    assert load_fitted_artifact(path) == artifact(LINEAR_BLOCK, params)
    model, hardware = model_preset("tiny"), hardware_preset("cpu-2core")
    built = build_cost_model(FittedCostConfig(artifact="a/fit.json"), model, hardware, tmp_path)
    assert isinstance(built, FittedCost) and built.params == params
    assert built.step_s(MIXED) == pytest.approx(FittedCost(BASE, params).step_s(MIXED))
    # Same predictions as the in-memory model, through a scenario.
    workload = {
        "kind": "synthetic",
        "num_requests": 30,
        "arrival": {"kind": "poisson", "rate_per_s": 20},
        "prompt_tokens": {"kind": "fixed", "tokens": 64},
        "output_tokens": {"kind": "fixed", "tokens": 8},
    }
    common = {"model": "tiny", "hardware": "cpu-2core", "workload": workload}
    scenario = Scenario.model_validate(
        {**common, "cost": {"kind": "fitted", "artifact": "a/fit.json"}}
    )
    loaded = api.run(scenario, base_dir=tmp_path)
    direct = api.run(
        Scenario.model_validate({**common, "cost": LINEAR_BLOCK}),
        wrap_cost=lambda base: FittedCost(base, params),
    )
    np.testing.assert_array_equal(
        loaded.requests["finish_s"].to_numpy(), direct.requests["finish_s"].to_numpy()
    )
    assert "fitted(" in loaded.summary["cost_model"]


def test_a_relative_base_artifact_is_found_from_the_fitted_artifacts_folder(
    tmp_path: Path,
) -> None:
    moved = rebase_paths({"kind": "calibrated", "artifact": "x/c.json"}, tmp_path, tmp_path / "o")
    assert moved["artifact"] == "../x/c.json"
    kept = rebase_paths({"kind": "calibrated", "artifact": "cpu-tiny-fp32"}, tmp_path, tmp_path)
    assert kept["artifact"] == "cpu-tiny-fp32"  # a shipped name, not a path
    absolute = rebase_paths({"artifact": "/abs/c.json"}, tmp_path, tmp_path / "o")
    assert absolute["artifact"] == "/abs/c.json"


def test_a_fitted_base_is_refused(tmp_path: Path) -> None:
    nested = {"kind": "fitted", "artifact": "other.json"}
    path = save_fitted_artifact(artifact(nested, FitParameters()), tmp_path / "f.json")
    with pytest.raises(ConfigError, match=r"f\.json: base_cost\.kind: "):
        build_cost_model(
            FittedCostConfig(artifact=str(path)),
            model_preset("tiny"),
            hardware_preset("cpu-2core"),
        )


def one_line(error: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON at line 1"),
        ('{"format": "servesim-kernels"}', "not a fitted cost artifact"),
        ('{"format": "servesim-fitted-cost", "format_version": 9}', "format_version 9"),
        ('{"format": "servesim-fitted-cost", "format_version": 1}', ": provenance: Field required"),
    ],
)
def test_bad_artifacts_give_one_line(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as error:
        load_fitted_artifact(path)
    assert expected in one_line(error) and str(path) in str(error.value)


def test_a_bad_parameter_in_an_artifact_names_the_field(tmp_path: Path) -> None:
    data = artifact(LINEAR_BLOCK, FitParameters()).model_dump(mode="json")
    data["parameters"]["decode_multiplier"] = -2.0
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as error:
        load_fitted_artifact(path)
    assert "parameters.decode_multiplier" in one_line(error)


def test_a_missing_artifact_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_fitted_artifact(tmp_path / "none.json")
    assert "not found" in one_line(error)


def test_a_fitted_model_wraps_a_parallel_base(tmp_path: Path) -> None:
    path = save_fitted_artifact(
        artifact({"kind": "roofline"}, FitParameters(0.0, 1.0, 2.0)), tmp_path / "r.json"
    )
    workload = {
        "kind": "synthetic",
        "num_requests": 5,
        "arrival": {"kind": "poisson", "rate_per_s": 5},
        "prompt_tokens": {"kind": "fixed", "tokens": 64},
        "output_tokens": {"kind": "fixed", "tokens": 4},
    }
    scenario = Scenario.model_validate(
        {
            "model": "llama-3-70b",
            "hardware": "h100",
            "parallelism": {"tensor_parallel_size": 4},
            "cost": {"kind": "fitted", "artifact": str(path)},
            "workload": workload,
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cost = api.cost_model_for(scenario)
        roofline = scenario.model_copy(update={"cost": RooflineCostConfig()})
        # The fitted model's base is GPU-only: its fitted overhead stands for the CPU work.
        base = api.cost_model_for(roofline, engine_cpu=False)
    assert isinstance(cost, FittedCost)
    decode = decode_part(MIXED)
    assert cost.step_s(decode) == pytest.approx(2.0 * base.step_s(decode))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 4),
    st.integers(1, 300),
    st.integers(0, 32),
    st.floats(0, 0.01),
    st.floats(0.1, 4),
    st.floats(0.1, 4),
    st.floats(0, 0.01),
)
def test_a_step_is_affine_and_increasing_in_every_parameter(
    num_chunks: int,
    chunk_tokens: int,
    num_decode: int,
    overhead_s: float,
    prefill: float,
    decode: float,
    bump: float,
) -> None:
    shape = StepShape.build(
        prefill_chunks=[(chunk_tokens, 7)] * num_chunks, decode_context_tokens=[50] * num_decode
    )
    if shape.is_empty:
        return
    w = prefill_share(BASE, shape)
    step = FittedCost(BASE, FitParameters(overhead_s, prefill, decode)).step_s(shape)
    base_s = BASE.step_s(shape)
    assert step == pytest.approx(overhead_s + base_s * (prefill * w + decode * (1 - w)))
    for more in (
        FitParameters(overhead_s + bump, prefill, decode),
        FitParameters(overhead_s, prefill + bump, decode),
        FitParameters(overhead_s, prefill, decode + bump),
    ):
        assert FittedCost(BASE, more).step_s(shape) >= step - 1e-15
