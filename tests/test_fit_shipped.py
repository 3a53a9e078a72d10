"""The fitted artifacts and measured runs committed under docs/validation/blackbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.api import cost_model_for
from sim.cost.config import FittedCostConfig
from sim.cost.fitted import FittedCost, load_fitted_artifact
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import load_scenario
from sim.validation.fit import FitRun, Target, target_rows
from sim.validation.fit_runs import check_run, load_measured_run, run_digest
from sim.validation.intake import ENGINE_INTAKE

ROOT = Path(__file__).resolve().parent.parent
BLACKBOX = ROOT / "docs" / "validation" / "blackbox"
ARTIFACTS = sorted(BLACKBOX.glob("*.json"))


@pytest.mark.parametrize("path", ARTIFACTS, ids=lambda p: p.stem)
def test_committed_artifacts_load_and_improve_on_their_base(path: Path) -> None:
    artifact = load_fitted_artifact(path)
    assert artifact.fit.objective_value < artifact.fit.base_objective_value
    assert artifact.provenance.command.startswith("servesim calibrate")
    assert len(artifact.errors["in_sample"]["rows"]) == 2 * len(artifact.provenance.runs)


# Each public artifact and the scenario its command names (docs/validation.md).
PUBLIC = {
    "rtx4090-llama-3.1-8b": "rtx4090_llama31_8b.yaml",
    "rtxpro6000-llama-3.1-8b": "rtxpro6000_llama31_8b.yaml",
    "rtxpro6000-qwen3-32b-tp2": "rtxpro6000_qwen3_32b_tp2.yaml",
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_a_public_artifact_reproduces_its_recorded_errors_as_a_scenarios_cost(name: str) -> None:
    path = BLACKBOX / f"{name}.json"
    artifact = load_fitted_artifact(path)
    (info,) = artifact.provenance.runs
    run = load_measured_run(ROOT / info.source)
    assert run_digest(run.requests) == info.sha256  # the very data it was fitted to
    plain = load_scenario(ROOT / "scenarios" / "public" / PUBLIC[name])
    assert f"--scenario scenarios/public/{PUBLIC[name]}" in artifact.provenance.command
    scenario = plain.model_copy(update={"cost": FittedCostConfig(artifact=str(path))})
    cost = cost_model_for(scenario)
    assert isinstance(cost, FittedCost) and cost.params == artifact.parameters
    # The base the fit adjusted: GPU-only (its fitted overhead stands for the CPU work).
    base = cost_model_for(plain, engine_cpu=False)
    # LLMServingSim's queued_ts: counted from the replay's intake, as calibrate counted.
    assert run.meta.get("latency_from") == ENGINE_INTAKE
    fit_run = FitRun("r", plain, run.requests, base, from_intake=True)
    rows = target_rows([fit_run], [Target(0)], cost.params)
    recorded = artifact.errors["in_sample"]["rows"]
    for now, then in zip(rows, recorded, strict=True):
        assert now["metric"] == then["metric"]
        for kind in ("base_err_pct", "fitted_err_pct"):
            assert now[kind] == pytest.approx(then[kind], abs=0.011)


@pytest.mark.parametrize("rate", [2, 5])
def test_the_committed_cpu_runs_are_measure_folders_of_the_tiny_model(rate: int) -> None:
    run = load_measured_run(BLACKBOX / f"cpu-tiny-rate{rate}")
    check_run(run, "r", model_preset("tiny"), hardware_preset("cpu-2core"))
    assert run.meta["format"] == "servesim-measure" and len(run.requests) > 20


# The public artifacts' names in docs/validation.md's tables.
DOC_NAMES = {
    "rtx4090-llama-3.1-8b": "RTX 4090 Llama-3.1-8B",
    "rtxpro6000-llama-3.1-8b": "RTX PRO 6000 Llama-3.1-8B",
    "rtxpro6000-qwen3-32b-tp2": "RTX PRO 6000 Qwen3-32B TP 2",
}


def _pct(errors: dict[str, float]) -> str:
    """p50 / p90 / p99 as docs/validation.md writes them (one decimal, U+2212 minus)."""
    return " / ".join(f"{errors[q]:+.1f}".replace("-", "\u2212") for q in ("p50", "p90", "p99"))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_the_docs_tables_give_each_public_artifacts_own_figures(name: str) -> None:
    # docs/validation.md, "Public vLLM runs": the held-out and in-sample rows are read
    # from the committed artifacts, so a refit that leaves the page behind fails here.
    doc = (ROOT / "docs" / "validation.md").read_text()
    errors = json.loads((BLACKBOX / f"{name}.json").read_text())["errors"]

    def fit(params: dict[str, float]) -> str:
        return (
            f"{params['step_overhead_s'] * 1e3:+.2f} ms, prefill \u00d7"
            f"{params['prefill_multiplier']:.3f}, decode \u00d7{params['decode_multiplier']:.3f}"
        )

    (fold,) = errors["cross_validation"]
    in_sample = errors["in_sample"]
    for params, rows in (
        (fold["parameters"], fold["held_out"]),
        (in_sample["parameters"], in_sample["rows"]),
    ):
        ttft, tpot = rows
        expected = (
            f"| {DOC_NAMES[name]} | {fit(params)} | TTFT | {_pct(ttft['base_err_pct'])} % | "
            f"{_pct(ttft['fitted_err_pct'])} % |\n"
            f"| | | TPOT | {_pct(tpot['base_err_pct'])} % | {_pct(tpot['fitted_err_pct'])} % |"
        )
        assert expected in doc, expected


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_the_docs_engine_cpu_in_sample_rows_are_the_artifacts(name: str) -> None:
    # docs/validation.md, "The engine's CPU work and the way in": the in-sample rows.
    doc = (ROOT / "docs" / "validation.md").read_text()
    written = json.loads((BLACKBOX / "engine-cpu" / f"{name}.json").read_text())
    (coefficient,) = written["coefficients"]
    assert coefficient["name"] == "non_overlapped_s"

    def ms(value_s: float) -> str:
        return "0" if value_s == 0 else f"{value_s * 1e3:.2f}"  # an interval's end at its bound

    interval = f"[{ms(coefficient['low_s'])}, {ms(coefficient['high_s'])}]"
    serial = f"serial {ms(coefficient['value_s'])} ms {interval}"
    ttft, tpot = written["errors"]["in_sample"]["rows"]
    expected = (
        f"| {DOC_NAMES[name]} | {serial} | TTFT | {_pct(ttft['base_err_pct'])} % | "
        f"{_pct(ttft['fitted_err_pct'])} % |\n"
        f"| | | TPOT | {_pct(tpot['base_err_pct'])} % | {_pct(tpot['fitted_err_pct'])} % |"
    )
    assert expected in doc, expected
