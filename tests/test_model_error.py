"""Every answer carries its model error (issue 41, item 5).

The shipped table (``sim/cost/model_error.json``) must agree with the committed
validation results it cites; ``capacity`` and ``plan`` print and record the
error of the cost source that priced them, and ``plan --headroom`` defaults to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.api.build import cost_model_for
from sim.cli import main
from sim.cost.model_error import model_error_for, model_error_table
from sim.scenario import load_scenario
from tests.cli_errors import one_line_error

ROOT = Path(__file__).resolve().parents[1]

# The public runs' scenarios, by the run name benchmarks/public_runs.py gives each.
PUBLIC_SCENARIOS = {
    "rtx4090-llama-3.1-8b": "rtx4090_llama31_8b.yaml",
    "rtxpro6000-llama-3.1-8b": "rtxpro6000_llama31_8b.yaml",
    "rtxpro6000-llama-3.1-8b-profile": "rtxpro6000_llama31_8b_profile.yaml",
    "rtxpro6000-qwen3-32b-tp2": "rtxpro6000_qwen3_32b_tp2.yaml",
    "rtxpro6000-qwen3-32b-tp2-profile": "rtxpro6000_qwen3_32b_tp2_profile.yaml",
    "rtxpro6000-qwen3-30b-a3b-dp2-ep2": "rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml",
    "rtxpro6000-qwen3-30b-a3b-dp2-ep2-profile": "rtxpro6000_qwen3_30b_a3b_dp2_ep2_profile.yaml",
}

# A small scenario; "auto" prices Llama-3.1-8B on an H100 from kernel tables.
SCENARIO: dict[str, Any] = {
    "name": "modelerr",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": "h100",
    "cost": {"kind": "auto"},
    "engine": {"max_model_len_tokens": 2048},
    "workload": {
        "kind": "synthetic",
        "num_requests": 40,
        "arrival": {"kind": "poisson", "rate_per_s": 10},
        "prompt_tokens": {"kind": "fixed", "tokens": 200},
        "output_tokens": {"kind": "fixed", "tokens": 20},
    },
}
PLAN_SPACE: dict[str, Any] = {
    "gpus": ["h100"],
    "tensor_parallel_sizes": [1],
    "max_num_seqs": [64],
    "max_num_batched_tokens": [2048],
    "chunked_prefill": [True],
    "refine": False,
    "max_loads": 6,
}


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _public_p50_errors() -> dict[str, dict[str, float]]:
    """Each public run's signed TTFT and TPOT p50 error (%), from the committed results."""
    rows = json.loads((ROOT / "docs/validation/public/results.json").read_text())
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        out.setdefault(row["run"], {})[row["metric"]] = row["p50_err_pct"]
    return out


def test_public_kinds_agree_with_the_committed_public_runs() -> None:
    errors = _public_p50_errors()
    listed: list[str] = []
    for kind, entry in model_error_table().sources.items():
        if entry.results != "docs/validation/public/results.json":
            continue
        listed += entry.rows
        # The worst |p50 error| over the kind's rows, recomputed from the file.
        assert entry.ttft_p50_error_pct == max(abs(errors[r]["ttft"]) for r in entry.rows), kind
        assert entry.tpot_p50_error_pct == max(abs(errors[r]["tpot"]) for r in entry.rows), kind
        assert "benchmarks/public_runs.py" in entry.command
    # Every committed public run counts in exactly one kind.
    assert sorted(listed) == sorted(errors)


def test_cpu_calibration_agrees_with_the_committed_fidelity_study() -> None:
    entry = model_error_table().sources["cpu_calibration"]
    results = json.loads((ROOT / entry.results).read_text())
    ttft, tpot = [], []
    for run in entry.rows:
        # The out-of-sample prediction: the calibrated curve alone ("microbenchmarks —").
        (micro,) = (
            p
            for name, p in results[run]["predictions"].items()
            if name.startswith("microbenchmarks —")
        )
        ttft.append(abs(micro["ttft"]["error_pct"]["p50"]))
        tpot.append(abs(micro["tpot"]["error_pct"]["p50"]))
    assert sorted(entry.rows) == sorted(k for k in results if k.endswith("pct"))
    assert entry.ttft_p50_error_pct == pytest.approx(max(ttft), abs=0.005)
    assert entry.tpot_p50_error_pct == pytest.approx(max(tpot), abs=0.005)


@pytest.mark.parametrize("run", sorted(PUBLIC_SCENARIOS))
def test_each_public_scenario_is_read_as_the_kind_that_lists_its_run(run: str) -> None:
    path = ROOT / "scenarios/public" / PUBLIC_SCENARIOS[run]
    error = model_error_for(cost_model_for(load_scenario(path, [])))
    assert error.kind is not None and error.validated is not None
    assert run in error.validated.rows


def _capacity(tmp_path: Path, sets: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    scenario = _write(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    code = main(
        ["capacity", str(scenario), "--slo", "ttft_mean_ms=2000", "--num-requests", "40"]
        + ["--seeds", "1", "--max-sims", "3", "-q", "--out", str(out)]
        + [a for s in sets for a in ("--set", s)]
    )
    assert code == 0
    return capsys.readouterr().out, json.loads((out / "capacity.json").read_text())


def test_capacity_priced_by_kernel_tables_prints_their_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stdout, doc = _capacity(tmp_path, [], capsys)
    entry = model_error_table().sources["kernels_one_gpu"]
    line = next(x for x in stdout.splitlines() if x.startswith("model error:"))
    assert f"±{entry.ttft_p50_error_pct:.1f} % TTFT p50" in line
    assert f"±{entry.tpot_p50_error_pct:.1f} % TPOT p50" in line
    assert "kernel tables, one GPU" in line
    assert doc["model_error"]["kind"] == "kernels_one_gpu"
    assert doc["model_error"]["ttft_p50_error_pct"] == entry.ttft_p50_error_pct
    assert not any("model error" in c for c in doc["caveats"])


def test_capacity_priced_by_the_roofline_says_it_has_no_validated_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stdout, doc = _capacity(tmp_path, ["cost.kind=roofline"], capsys)
    assert "no validated error (uncalibrated roofline)" in stdout
    assert any("CAVEAT:" in x and "no validated error" in x for x in stdout.splitlines())
    assert doc["model_error"]["kind"] is None
    assert doc["model_error"]["ttft_p50_error_pct"] is None
    assert any("no validated error (uncalibrated roofline)" in c for c in doc["caveats"])


def _plan(tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    scenario = _write(tmp_path / "s.yaml", SCENARIO)
    plan_file = _write(tmp_path / "plan.yaml", PLAN_SPACE)
    out = tmp_path / "out"
    code = main(
        [
            "plan",
            str(scenario),
            "--plan",
            str(plan_file),
            "--slo",
            "ttft_mean_ms=2000",
            "--target-rate",
            "10",
            "--num-requests",
            "40",
            "--workers",
            "1",
            "-q",
            "--out",
            str(out),
            *extra,
        ]
    )
    assert code == 0
    return capsys.readouterr().out, json.loads((out / "plan.json").read_text())


def test_plan_headroom_defaults_to_the_model_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stdout, doc = _plan(tmp_path, [], capsys)
    entry = model_error_table().sources["kernels_one_gpu"]
    headroom_pct = max(entry.ttft_p50_error_pct, entry.tpot_p50_error_pct)
    assert doc["headroom"]["pct"] is None
    assert doc["headroom"]["source"] == "each configuration's model error"
    # The fleet is sized for the target rate plus its cost source's error.
    assert doc["target_rate_per_s"] == 10
    assert doc["best"]["sized_rate_per_s"] == pytest.approx(10 * (1 + headroom_pct / 100))
    assert f"sized for {10 * (1 + headroom_pct / 100):.4g}" in stdout
    assert doc["model_error"]["kind"] == "kernels_one_gpu"
    assert "model error: ±" in stdout and "kernel tables, one GPU" in stdout


def test_an_explicit_headroom_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = _plan(tmp_path, ["--headroom", "5"], capsys)
    assert doc["headroom"]["pct"] == 5 and doc["headroom"]["source"] == "--headroom"
    assert doc["best"]["sized_rate_per_s"] == pytest.approx(10.5)


def test_a_negative_headroom_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _write(tmp_path / "s.yaml", SCENARIO)
    message = one_line_error(
        capsys,
        [
            "plan",
            str(scenario),
            "--slo",
            "ttft_mean_ms=2000",
            "--target-rate",
            "10",
            "--headroom",
            "-5",
        ],
    )
    assert "--headroom" in message


def test_plan_shows_each_configurations_model_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stdout, doc = _plan(tmp_path, [], capsys)
    entry = model_error_table().sources["kernels_one_gpu"]
    cell = f"±{entry.ttft_p50_error_pct:.1f} / ±{entry.tpot_p50_error_pct:.1f} %"
    header = next(x for x in stdout.splitlines() if x.startswith("#"))
    assert "model error (TTFT/TPOT p50)" in header
    assert any(x.startswith("1 ") and cell in x for x in stdout.splitlines())
    # The verdict names the best configuration's model error, and plan.json records it.
    assert f"  model error: ±{entry.ttft_p50_error_pct:.1f} % TTFT p50" in stdout
    assert doc["best"]["model_error"]["kind"] == "kernels_one_gpu"


def test_a_roofline_plan_has_no_headroom_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stdout, doc = _plan(tmp_path, ["--set", "cost.kind=roofline"], capsys)
    assert doc["best"]["sized_rate_per_s"] == pytest.approx(10)  # no error, no headroom
    assert doc["best"]["model_error"]["kind"] is None
    assert any("no validated error (uncalibrated roofline)" in c for c in doc["caveats"])
    assert "caveat: model error: no validated error (uncalibrated roofline)" in stdout
    assert "none validated" in stdout


def test_each_configuration_is_sized_for_its_own_model_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The H100 is priced from kernel tables (a validated error), the A10G on the
    # roofline (none): one plan-wide headroom would size one of them wrongly.
    global PLAN_SPACE
    saved = PLAN_SPACE
    PLAN_SPACE = {**saved, "gpus": ["h100", "a10g"], "prune": False}
    try:
        _, doc = _plan(tmp_path, [], capsys)
    finally:
        PLAN_SPACE = saved
    sized = {c["gpu"]: c for c in doc["configurations"]}
    entry = model_error_table().sources["kernels_one_gpu"]
    headroom = max(entry.ttft_p50_error_pct, entry.tpot_p50_error_pct) / 100
    assert sized["h100"]["model_error"]["kind"] == "kernels_one_gpu"
    assert sized["h100"]["sized_rate_per_s"] == pytest.approx(10 * (1 + headroom))
    assert sized["a10g"]["model_error"]["kind"] is None
    assert sized["a10g"]["sized_rate_per_s"] == pytest.approx(10)
