"""Validation: comparison statistics, the engine-overhead fit, and a real CPU validation."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from decode_runs import run_prices

from calibration.compare_measured import load_measured, validate, write_validation
from calibration.fit import fit_engine_overhead
from sim import api
from sim.cli import main as cli_main
from sim.cost.base import CostModel, StepShape
from sim.cost.calibrated import CalibratedCost, load_artifact
from sim.cost.fitted import ScaledCost
from sim.cost.linear import LinearCost
from sim.metrics.report import summary_to_json
from sim.scenario import Scenario, load_scenario
from sim.validation.match import LAYOUT_SETTINGS
from sim.validation.predict import (
    Latencies,
    compare,
    ks_distance,
    measured_latencies,
    paired_error,
    predict,
    requests_as_work,
    simulated_latencies,
    stats_ms,
    within_targets,
)

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
SMOLLM2 = ROOT / "scenarios" / "validate_smollm2_cpu.yaml"


# -- statistics ------------------------------------------------------------------
def test_ks_distance_bounds() -> None:
    a = np.array([1.0, 2.0, 3.0])
    assert ks_distance(a, a.copy()) == 0.0
    assert ks_distance(a, a + 10) == 1.0
    d = ks_distance(a, np.array([1.0, 2.0, 4.0, 5.0]))
    assert d is not None and 0 < d < 1
    assert ks_distance(a, np.empty(0)) is None


def test_stats_ms_and_paired_error() -> None:
    s = stats_ms(np.array([0.001, 0.002, 0.003]))
    assert s["mean"] == pytest.approx(2.0) and s["p50"] == pytest.approx(2.0)
    assert stats_ms(np.empty(0))["p99"] is None
    a = pd.DataFrame({"x": [1.0, 2.0, 4.0]}, index=[0, 1, 2])
    b = pd.DataFrame({"x": [1.5, 2.0]}, index=[0, 1])
    err = paired_error(a, b, "x")
    assert err["count"] == 2 and err["median"] == pytest.approx(0.25)


def _lat(scale: float) -> Latencies:
    frame = (
        pd.DataFrame(
            {"ttft_s": [0.1, 0.2, 0.3], "tpot_s": [0.01, 0.02, 0.03], "e2el_s": [1.0, 2.0, 3.0]}
        )
        * scale
    )
    return Latencies(frame, np.array([0.01, 0.02, 0.015]) * scale)


def test_compare_identical_is_exact_and_scaled_is_off_by_the_factor() -> None:
    same = compare(_lat(1.0), _lat(1.0))
    assert all(same[m]["error_pct"]["p50"] == pytest.approx(0.0) for m in same)
    assert all(same[m]["ks"] == 0.0 for m in same)
    assert within_targets(same) == {"ttft": True, "tpot": True}
    off = compare(_lat(1.0), _lat(1.5))
    assert off["ttft"]["error_pct"]["p90"] == pytest.approx(50.0)
    assert off["tpot"]["paired"]["median"] == pytest.approx(0.5)
    assert within_targets(off) == {"ttft": False, "tpot": False}


def test_requests_as_work_needs_a_whole_run() -> None:
    frame = pd.DataFrame(
        {
            "request_id": [1, 0],
            "arrival_s": [0.5, 0.1],
            "num_prompt_tokens": [5, 6],
            "num_output_tokens": [2, 3],
        }
    )
    work = requests_as_work(frame)
    assert work.arrival_s.tolist() == [0.1, 0.5]
    with pytest.raises(ValueError, match=r"0\.\.n-1"):
        requests_as_work(frame.iloc[:1])


# -- the overhead cost and its fit --------------------------------------------------
def test_engine_overhead_cost_is_consistent_between_entry_points() -> None:
    base = LinearCost(step_overhead_s=0.002, per_decode_seq_s=0.001, per_context_token_s=1e-6)
    cost = ScaledCost(base, 1.1, 0.0005, 0.0002, source="engine step log")
    steps = run_prices(cost, 4, 400, 3)
    for j in range(3):
        shape = StepShape(num_decode_seqs=4, num_decode_context_tokens=400 + 4 * j)
        assert steps[j] == pytest.approx(cost.step_s(shape))
    assert cost.step_s(StepShape()) == 0.0
    assert "ms/step" in cost.label
    with pytest.raises(ValueError):
        ScaledCost(base, 0.0, 0.0, 0.0)
    scaled = ScaledCost(base, 1.5)
    assert run_prices(scaled, 2, 10, 2)[0] == pytest.approx(
        1.5 * base.step_s(StepShape(num_decode_seqs=2, num_decode_context_tokens=10))
    )


def test_fit_recovers_known_overhead() -> None:
    base = LinearCost(step_overhead_s=0.004, per_decode_seq_s=0.001, per_prefill_token_s=5e-5)
    rng = np.random.default_rng(0)
    seqs = rng.integers(1, 30, 300)
    prefill = rng.integers(0, 200, 300) * (rng.random(300) < 0.2)
    rows = []
    t = 0.0
    for s, p in zip(seqs, prefill, strict=True):
        shape = StepShape(
            num_prefill_seqs=int(p > 0),
            num_prefill_tokens=int(p),
            num_decode_seqs=int(s),
            num_decode_context_tokens=int(s) * 100,
        )
        busy = 1.2 * base.step_s(shape) + 0.0007 + 0.0001 * (s + (p > 0))
        rows.append(
            {
                "start_s": t,
                "done_s": t + busy,
                **{
                    "num_prefill_seqs": shape.num_prefill_seqs,
                    "num_prefill_tokens": shape.num_prefill_tokens,
                    "prefill_attention_pairs": 0,
                    "prefill_kv_read_tokens": 0,
                    "num_decode_seqs": shape.num_decode_seqs,
                    "num_decode_context_tokens": shape.num_decode_context_tokens,
                },
            }
        )
        t += busy
    fit = fit_engine_overhead(pd.DataFrame(rows), base)
    assert fit.factor == pytest.approx(1.2, rel=1e-3)
    assert fit.per_step_s == pytest.approx(0.0007, rel=1e-2)
    assert fit.per_seq_s == pytest.approx(0.0001, rel=1e-2)


# -- plumbing on a simulated "measurement" (fast, no torch timing) ------------------------
def _fake_measured_dir(tmp_path: Path, overrides: list[str]) -> Path:
    """A simulated run written like a measure folder (its token times from the step log)."""
    scenario = load_scenario(SCENARIO, overrides)
    result = api.run(scenario)
    out = tmp_path / "measured"
    out.mkdir()
    result.requests.to_parquet(out / "requests.parquet")
    rows = []
    for rid in result.requests["request_id"]:
        for i, t in enumerate(result.token_times_s(int(rid))):
            rows.append((int(rid), i, float(t), 0))
    pd.DataFrame(rows, columns=["request_id", "token_index", "time_s", "token_id"]).to_parquet(
        out / "tokens.parquet"
    )
    result.steps.assign(done_s=result.steps["end_s"]).to_parquet(out / "steps.parquet")
    # As measure writes it: the settings that ran and the reference engine's layout.
    settings = {**result.summary["engine_settings"], **dict.fromkeys(LAYOUT_SETTINGS, 1)}
    summary = {**result.summary, "mode": "measured", "engine_settings": settings}
    (out / "summary.json").write_text(summary_to_json(summary))
    return out


def test_validate_of_a_simulated_run_is_exact_and_scaled_cost_misses(tmp_path: Path) -> None:
    overrides = ["workload.duration_s=15"]
    measured = load_measured(_fake_measured_dir(tmp_path, overrides))
    scenario = load_scenario(SCENARIO, overrides)
    exact = validate(scenario, measured, base_dir=SCENARIO.parent)
    (comparison,) = exact.comparisons.values()
    for metric in ("ttft", "tpot", "e2el"):
        assert comparison[metric]["error_pct"]["p50"] == pytest.approx(0.0, abs=1e-6)
    # Same gaps, computed two ways (end - start vs consecutive ends): equal to rounding.
    assert comparison["itl"]["ks"] == pytest.approx(0.0, abs=0.01)
    cost = ScaledCost(api.cost_model_for(scenario), 1.5)
    off = validate(scenario, measured, cost=cost)
    assert within_targets(next(iter(off.comparisons.values()))) == {"ttft": False, "tpot": False}
    paths = write_validation(exact, tmp_path / "report", "test")
    assert {p.name for p in paths} == {"report.md", "validation.json", "cdf.png"}
    assert "TTFT" in (tmp_path / "report" / "report.md").read_text()
    assert json.loads((tmp_path / "report" / "validation.json").read_text())["predictions"]


def test_validate_cli_with_two_runs_and_an_overhead_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fake_measured_dir(tmp_path, ["workload.duration_s=10"])
    # The same requests measured again, each finishing 1 ms later (the same run twice
    # would be refused: its noise floor would be 0).
    again = tmp_path / "again"
    shutil.copytree(run, again)
    requests = pd.read_parquet(again / "requests.parquet")
    requests.assign(finish_s=requests["finish_s"] + 1e-3).to_parquet(again / "requests.parquet")
    code = cli_main(
        [
            "validate",
            str(SCENARIO),
            "--set",
            "workload.duration_s=10",
            "--measured",
            str(run),
            "--measured",
            str(again),
            "--overhead-from",
            str(run),
            "--out",
            str(tmp_path / "v"),
        ]
    )
    assert code == 2  # the overhead must come from another run
    assert "another run" in capsys.readouterr().err
    code = cli_main(
        [
            "validate",
            str(SCENARIO),
            "--set",
            "workload.duration_s=10",
            "--measured",
            str(run),
            "--measured",
            str(again),
            "--out",
            str(tmp_path / "v"),
        ]
    )
    assert code == 0
    report = (tmp_path / "v" / "report.md").read_text()
    assert "noise" in report.lower()


def test_validate_rejects_a_folder_that_is_not_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(
        ["validate", str(SCENARIO), "--measured", str(tmp_path), "--out", str(tmp_path)]
    )
    assert code == 2
    assert "not a servesim measure folder" in capsys.readouterr().err


# -- a real validation on this CPU --------------------------------------------------
TOLERANCE_PCT = 35.0
# 1 req/s: ~38 % of SmolLM2-135M's measured saturation (2.6 req/s), 23 requests.
# At 1.5 req/s (~58 %) the batch sat at 3-4, where a decode step on this CPU jumps
# from ~55 to ~90 ms, so the error amplified the machine's drift: simulated with four
# calibrations of this host, a machine 10 % slower than at calibration moved the
# worse p50 error (TTFT or TPOT) to -17..-30 %, 20 % slower to -35..-47 % (a
# failure). At 1 req/s: -15..-20 % and -28..-34 %. The 1.5x model still misses by
# +50 % or more (test_the_validation_load_tolerates_drift_and_...).
VALIDATION_OVERRIDES = ("workload.duration_s=30", "workload.arrival.rate_per_s=1.0")
# A phase during which our thread got less of a core than this lost it to another
# process (quiet: calibration ~0.95 with its start-up, a measured run >= 0.997; a
# busy neighbour: 0.5-0.8, steps up to 2x as long). Such a phase is run once more: a
# spell of contention in one phase but not the other is what made this test fail
# before. The test skips only if the second try lost the core on an overloaded machine.
MIN_CPU_SHARE = 0.9


def _calibrate_ci(artifact: Path) -> float:
    """Calibrate SmolLM2-135M on grid ``ci`` into ``artifact``; the CPU share it got."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "calibration.cli",
            "--model",
            "smollm2-135m",
            "--grid",
            "ci",  # every batch size to 12: CPU kernels switch with the row count
            "--temperature",
            "0",
            "--threads",
            "1",
            "--out",
            str(artifact),
            "--no-progress",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu_s / (time.perf_counter() - start)


@pytest.mark.slow
def test_cpu_validation_holds_and_a_cost_model_off_by_1_5x_fails(tmp_path: Path) -> None:
    """Measure 30 s of SmolLM2-135M at ~38 % load; predict it from fresh microbenchmarks.

    Tolerance: |error| <= 35 % on p50 TTFT and p50 TPOT. SmolLM2, not the tiny
    model: the tiny model's step time depends on the steps before it (cache
    residency, docs/validation.md), which put this test's p50 errors at -18 % to
    -28 % on a quiet machine, close to the bound. SmolLM2's errors in the fidelity
    study were within ±10 % while the machine held its speed, and up to -26 %
    while it slowed by up to 22 %, the measured drift of this host. A cost model
    off by 1.5x moves p50 TPOT by +50 % or more and TTFT similarly: a clear
    failure. The artifact is calibrated in this test (grid ``ci``: only the
    shapes this run reaches, ~1 min, greedy as the engine) right before the
    measurement, both on one torch thread, so that both sides see the same
    machine. A phase that lost the core to another process is run once more; if
    it lost it again while other processes wanted more cores than the machine
    has (1-minute load average above the core count), the test skips, saying so
    with the CPU shares, loads and errors: such timings measure the neighbours. In
    CI (``CI`` set) it never skips: it tries up to four times, then fails with
    those figures, so a busy CI cannot silently drop the only end-to-end validation.
    A host whose speed drifts between calibrating and measuring (seen in full
    suites on a shared VM: -32 % in one run, the 1.5x model at only +33 % in another)
    can spoil one attempt, so a failed attempt is made once more from scratch;
    both must miss for the test to fail, and a wrong model misses both.
    """
    outcomes = []
    # In CI this is the only end-to-end validation: a busy machine gets more tries
    # there, and then fails loudly with its load figures instead of skipping.
    in_ci = bool(os.environ.get("CI"))
    attempts, num_busy = (4 if in_ci else 2), 0
    for attempt in range(attempts):
        outcome = _validation_attempt(tmp_path / f"attempt-{attempt}")
        good, bad, machine, busy = outcome
        if busy:
            # Twice in a row other processes wanted more cores than the machine has:
            # the timings measure them, not the model, so there is nothing to validate.
            num_busy += 1
            why = (
                f"the machine was too busy to time a model on one core: {machine}; "
                f"p50 TTFT and TPOT errors {good}, 1.5x model {bad}"
            )
            if not in_ci:
                pytest.skip(why)
            if attempt == attempts - 1:
                pytest.fail(f"CI could not give the validation a core in {num_busy} tries: {why}")
            continue
        outcomes.append(outcome[:3])
        if all(abs(e) <= TOLERANCE_PCT for e in good) and any(abs(e) > TOLERANCE_PCT for e in bad):
            return
        if len(outcomes) == 2:
            break
    # Both attempts (each a fresh calibration and measurement) missed: a drift of
    # the host between calibrating and measuring can spoil one, rarely two.
    raise AssertionError(f"(good errors, 1.5x errors, machine) per attempt: {outcomes}")


def _validation_attempt(
    folder: Path,
) -> tuple[tuple[float, float], tuple[float, float], str, bool]:
    """Calibrate, measure and predict once: p50 errors of the calibrated model and of
    it 1.5x slower, the machine's state, and whether it was too busy to judge."""
    folder.mkdir(parents=True)
    artifact = folder / "artifact.json"
    # (CPU share, 1-minute load average after) of each try of each phase.
    calibrations = [(_calibrate_ci(artifact), os.getloadavg()[0])]
    if calibrations[-1][0] < MIN_CPU_SHARE:
        calibrations.append((_calibrate_ci(artifact), os.getloadavg()[0]))
    overrides = [*VALIDATION_OVERRIDES, f"cost.artifact={artifact}"]
    runs: list[tuple[float, float]] = []
    for attempt in range(2):
        out = folder / f"measured-{attempt}"
        argv = ["measure", str(SMOLLM2), "--out", str(out), "-q", "--threads", "1"]
        assert cli_main([*argv, *(x for o in overrides for x in ("--set", o))]) == 0
        measured = load_measured(out)
        runs.append((float(measured.summary["forward_cpu_share"]), os.getloadavg()[0]))
        if runs[-1][0] >= MIN_CPU_SHARE:
            break
    machine = f"(CPU share, load average): calibration {calibrations}, measured runs {runs}"
    scenario = load_scenario(SMOLLM2, overrides)
    cost = CalibratedCost.from_artifact(load_artifact(artifact))

    def p50_errors(model: CostModel) -> tuple[float, float]:
        c = compare(
            measured_latencies(measured.requests, measured.tokens),
            simulated_latencies(predict(scenario, measured.requests, model)),
        )
        return c["ttft"]["error_pct"]["p50"], c["tpot"]["error_pct"]["p50"]

    num_cores = os.cpu_count() or 1
    busy = any(
        share < MIN_CPU_SHARE and load > num_cores for share, load in (calibrations[-1], runs[-1])
    )
    return p50_errors(cost), p50_errors(ScaledCost(cost, 1.5)), machine, busy


def _validation_scenario() -> tuple[Scenario, pd.DataFrame]:
    """The CPU validation test's scenario (shipped artifact) and its simulated requests."""
    scenario = load_scenario(SMOLLM2, list(VALIDATION_OVERRIDES))
    return scenario, api.run(scenario).requests


def test_the_ci_grid_spans_every_step_of_the_validation_run() -> None:
    # The fit interpolates well and extrapolates badly: grid ``ci`` must reach every
    # step the CPU validation run makes, also priced 1.5x (the cost model that must
    # fail, whose slower steps let more requests pile up) or measured on a machine
    # 1.5x slower than its calibration.
    profile = pytest.importorskip("calibration.profile")
    grid = profile.build_grid("ci")
    decode = [p for p in grid.points if p.section == "decode"]
    mixed = [p for p in grid.points if p.section == "mixed"]
    prefill = [p for p in grid.points if p.section == "prefill"]
    scenario, requests = _validation_scenario()
    base = api.cost_model_for(scenario)
    for scale in (1.0, 1.5):
        steps = predict(scenario, requests, ScaledCost(base, scale)).steps
        has_prefill = steps["num_prefill_tokens"] > 0
        assert steps["num_decode_seqs"].max() <= max(len(p.decode_contexts) for p in decode)
        both = steps[has_prefill & (steps["num_decode_seqs"] > 0)]
        assert both["num_decode_seqs"].max() <= max(len(p.decode_contexts) for p in mixed)
        assert both["num_prefill_tokens"].max() <= max(p.shape.num_prefill_tokens for p in mixed)
        alone = steps[has_prefill & (steps["num_decode_seqs"] == 0)]
        assert alone["num_prefill_tokens"].max() <= max(p.shape.num_prefill_tokens for p in prefill)
    # Contexts: no sequence outgrows max_model_len, the grid's longest decode context.
    assert scenario.engine.max_model_len_tokens is not None
    assert max(max(p.decode_contexts) for p in decode) >= scenario.engine.max_model_len_tokens
    # A prompt longer than the chunk budget resumes on top of a cached chunk.
    assert any(p.prefill_chunks[0][1] > 0 for p in prefill)


def test_the_validation_load_tolerates_drift_and_still_catches_a_1_5x_model() -> None:
    """The CPU validation test's operating point, simulated against itself.

    "Measured" is the simulator with the shipped SmolLM2 curve times ``speed``: a
    machine 15 % faster to 20 % slower than at calibration, this host's drift
    within minutes (docs/validation.md). The prediction is the curve itself, or
    the curve times 1.5. The first must stay within the tolerance and the 1.5x
    model must miss it, at every such speed. At 1.5 req/s the batch sat on the
    3 -> 4 step of this CPU's decode cost, and the first check failed at both
    ends (p50 TPOT +53 % at 0.85, TTFT -35 % at 1.2). A recalibrated shipped
    artifact that fails this asks for the operating point to be chosen again.
    """
    scenario, requests = _validation_scenario()
    base = api.cost_model_for(scenario)
    assert isinstance(base, CalibratedCost)  # the shipped artifact, not a roofline guess
    good = simulated_latencies(predict(scenario, requests, base))
    bad = simulated_latencies(predict(scenario, requests, ScaledCost(base, 1.5)))
    for speed in (0.85, 0.9, 1.0, 1.1, 1.2):
        measured = simulated_latencies(predict(scenario, requests, ScaledCost(base, speed)))
        good_errors = compare(measured, good)
        bad_errors = compare(measured, bad)
        for metric in ("ttft", "tpot"):
            assert abs(good_errors[metric]["error_pct"]["p50"]) <= TOLERANCE_PCT, (speed, metric)
        assert any(abs(bad_errors[m]["error_pct"]["p50"]) > TOLERANCE_PCT for m in ("ttft", "tpot"))
