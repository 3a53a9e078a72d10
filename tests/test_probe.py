"""Machine-drift probes: timing three step shapes around a run, and reading them back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from calibration.compare_measured import PROBE_POINTS, load_measured, speed_ratio, validate
from sim import api
from sim.cost.base import StepShape
from sim.cost.linear import LinearCost
from sim.metrics.report import summary_to_json
from sim.scenario import load_scenario
from sim.validation.formats.measure_dir import MeasureFolder

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
COST = LinearCost(
    step_overhead_s=0.002, per_prefill_token_s=1e-4, per_decode_seq_s=5e-4, per_context_token_s=1e-7
)


def _predicted(cost: object) -> dict[str, float]:
    out = {}
    for name, (chunks, contexts) in PROBE_POINTS.items():
        out[name] = cost.step_s(StepShape.build(list(chunks), list(contexts)))  # type: ignore[attr-defined]
    return out


def test_probe_shapes_cover_prefill_decode_and_mixed() -> None:
    kinds = {(bool(chunks), bool(contexts)) for chunks, contexts in PROBE_POINTS.values()}
    assert kinds == {(True, False), (False, True), (True, True)}


@given(factor=st.floats(0.2, 5.0))
def test_speed_ratio_recovers_a_uniform_slowdown(factor: float) -> None:
    probe = {name: factor * t for name, t in _predicted(COST).items()}
    ratio = speed_ratio([probe], COST)
    assert ratio == pytest.approx(factor, rel=1e-9)


def test_speed_ratio_is_the_geometric_mean_over_probes() -> None:
    predicted = _predicted(COST)
    before = {name: 1.0 * t for name, t in predicted.items()}
    after = {name: 4.0 * t for name, t in predicted.items()}
    assert speed_ratio([before, after], COST) == pytest.approx(2.0)


def test_speed_ratio_skips_what_it_cannot_read() -> None:
    predicted = _predicted(COST)
    good = {"decode 8 x 160": 3.0 * predicted["decode 8 x 160"]}
    junk: list[object] = [
        None,
        "text",
        {"unknown shape": 1.0},
        {"prefill 128": -1.0},
        {"prefill 128": "slow"},
    ]
    assert speed_ratio([*junk, good], COST) == pytest.approx(3.0)
    assert speed_ratio(junk, COST) is None
    assert speed_ratio([], COST) is None


def _measured_with_probes(tmp_path: Path, factor: float) -> tuple[MeasureFolder, object]:
    """A simulated run stored as measured, with probes saying the machine ran ``factor`` slow."""
    # A light load (requests rarely overlap), so that step times scale TPOT one to one.
    scenario = load_scenario(
        SCENARIO, ["workload.duration_s=30", "workload.arrival.rate_per_s=0.3"]
    )
    result = api.run(scenario)
    out = tmp_path / "measured"
    out.mkdir()
    result.requests.to_parquet(out / "requests.parquet")
    rows = [
        (int(rid), i, float(t), 0)
        for rid in result.requests["request_id"]
        for i, t in enumerate(result.token_times_s(int(rid)))
    ]
    pd.DataFrame(rows, columns=["request_id", "token_index", "time_s", "token_id"]).to_parquet(
        out / "tokens.parquet"
    )
    result.steps.assign(done_s=result.steps["end_s"]).to_parquet(out / "steps.parquet")
    cost = api.cost_model_for(scenario)
    probe = {name: factor * t for name, t in _predicted(cost).items()}
    summary = {**result.summary, "mode": "measured", "probe_s": {"before": probe, "after": probe}}
    (out / "summary.json").write_text(summary_to_json(summary))
    return load_measured(out), scenario


def test_validate_reports_the_drift_and_a_prediction_scaled_by_it(tmp_path: Path) -> None:
    measured, scenario = _measured_with_probes(tmp_path, 1.25)
    result = validate(scenario, measured, base_dir=SCENARIO.parent)  # type: ignore[arg-type]
    labels = list(result.comparisons)
    assert len(labels) == 2
    plain, drift = (result.comparisons[k] for k in labels)
    assert "machine drift" in labels[1] and "x1.25" in labels[1]
    # The run is the plain cost model's own simulation: exact; the drift-scaled
    # prediction is slower by the probe's factor.
    assert plain["tpot"]["error_pct"]["p50"] == pytest.approx(0.0, abs=1e-6)
    assert drift["tpot"]["error_pct"]["p50"] == pytest.approx(25.0, abs=1.0)
    facts = json.dumps(result.to_json(), default=str)
    assert "x1.250 before the run, x1.250 after" in facts


def test_validate_without_probes_has_no_drift_prediction(tmp_path: Path) -> None:
    measured, scenario = _measured_with_probes(tmp_path, 1.0)
    measured.summary.pop("probe_s")
    result = validate(scenario, measured, base_dir=SCENARIO.parent)  # type: ignore[arg-type]
    assert len(result.comparisons) == 1


torch = pytest.importorskip("torch")


def test_run_probe_times_every_shape_on_a_real_model() -> None:
    from calibration.measure import run_probe
    from calibration.model import LlamaModel
    from sim.hardware.specs import model_preset

    times = run_probe(LlamaModel(model_preset("tiny"), seed=0), num_repeats=2)
    assert set(times) == set(PROBE_POINTS)
    assert all(math.isfinite(t) and t > 0 for t in times.values())
