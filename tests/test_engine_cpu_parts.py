"""The engine's CPU work as its parts: the price of each part, what a fit of them may
ask (identification), the intervals it reports, and older scenarios and artifacts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_fit_engine_cpu import START, roofline_scenario, scenario_dict, synthetic_run

from sim import api
from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost, with_cpu_s
from sim.cost.fitted_cpu import EngineCpuFitValues, load_engine_cpu_artifact
from sim.errors import ConfigError
from sim.scenario import Scenario, scenario_from_dict
from sim.scenario.vllm_versions import V1_CPU_ESTIMATE
from sim.validation.fit import Target, fit_engine_cpu
from sim.validation.identify import (
    gauss_newton_errors,
    identification_problems,
    identified,
    intervals,
    jacobian_problems,
)
from sim.validation.runs import REQUEST_COLUMNS, ImportedRun

ROOT = Path(__file__).resolve().parent.parent
# A format-1 artifact as it was shipped (the RTX 4090 one, before its refit in format 2).
V1_ARTIFACT = ROOT / "tests/data/engine_cpu/format-1-rtx4090-llama-3.1-8b.json"
PARTS = EngineCpuConfig(
    per_step_s=1e-3,
    scheduler_per_seq_s=8e-6,
    sampling_per_seq_s=2e-5,
    per_token_s=3e-7,
    non_overlapped_s=2e-4,
)


class FlatGpu:
    """A GPU-only model whose every step takes ``gpu_s``."""

    label = "flat"

    def __init__(self, gpu_s: float) -> None:
        self.gpu_s = gpu_s

    def step_s(self, shape: StepShape) -> float:
        return self.gpu_s


def cpu_only_s(config: EngineCpuConfig, num_seqs: int, num_tokens: int) -> float:
    """A step's overlappable CPU time (s) through the one rule (``with_cpu_s``, on the
    slots ``EngineCpuCost`` fills): serial, no GPU time and no non-overlapped part, so
    the price is the CPU sum alone (0 + cpu + 0 is cpu to the bit)."""
    no_wait = config.model_copy(update={"non_overlapped_s": 0.0})
    cost = EngineCpuCost(FlatGpu(0.0), EngineCpu(no_wait, False, "cpu only"))  # type: ignore[arg-type]
    return with_cpu_s(cost.costs, 0.0, num_seqs, num_tokens)


def test_each_part_adds_its_own_count_to_a_steps_cpu_work() -> None:
    # 6 sequences (2 prefilling 500 tokens in all, 4 decoding): T = 504 tokens.
    # By hand: 1 ms + (8 + 20) us * 6 + 0.3 us * 504 = 1 + 0.168 + 0.1512 = 1.3192 ms.
    assert cpu_only_s(PARTS, 6, 504) == pytest.approx(1.3192e-3, rel=1e-12)
    shape = StepShape(num_prefill_seqs=2, num_prefill_tokens=500, num_decode_seqs=4)
    serial = EngineCpuCost(FlatGpu(5e-3), EngineCpu(PARTS, False, "parts"))  # type: ignore[arg-type]
    assert serial.step_s(shape) == pytest.approx(0.2e-3 + 1.3192e-3 + 5e-3, rel=1e-12)
    # Overlapped: the GPU's 5 ms hides the 1.32 ms; a 0.5 ms GPU step does not.
    hidden = EngineCpuCost(FlatGpu(5e-3), EngineCpu(PARTS, True, "parts"))  # type: ignore[arg-type]
    assert hidden.step_s(shape) == pytest.approx(0.2e-3 + 5e-3, rel=1e-12)
    shown = EngineCpuCost(FlatGpu(0.5e-3), EngineCpu(PARTS, True, "parts"))  # type: ignore[arg-type]
    assert shown.step_s(shape) == pytest.approx(0.2e-3 + 1.3192e-3, rel=1e-12)


def test_the_two_per_sequence_parts_price_as_their_sum() -> None:
    # Moving work between the scheduler's part and the rest changes no price.
    moved = PARTS.model_copy(update={"scheduler_per_seq_s": 2.8e-5, "sampling_per_seq_s": 0.0})
    for num_seqs, num_tokens in ((1, 1), (64, 64), (256, 2048)):
        assert cpu_only_s(moved, num_seqs, num_tokens) == pytest.approx(
            cpu_only_s(PARTS, num_seqs, num_tokens), rel=1e-12
        )


def test_the_default_estimate_keeps_its_13_us_per_sequence_all_in_the_scheduler() -> None:
    # The published figure (12.7 us per running request, a profile of vLLM 0.27's
    # scheduler) is the scheduler's; nothing is assumed for the rest.
    assert V1_CPU_ESTIMATE.scheduler_per_seq_s == 1.3e-5
    assert V1_CPU_ESTIMATE.sampling_per_seq_s == 0.0
    assert V1_CPU_ESTIMATE.per_seq_s == 1.3e-5


def test_a_scenario_with_the_old_whole_per_seq_s_is_one_line_naming_both_parts() -> None:
    data = scenario_dict(5.0)
    data["engine"]["cpu"] = {
        "per_step_s": 0.0,
        "per_seq_s": 1e-5,
        "per_token_s": 0.0,
        "non_overlapped_s": 0.0,
    }
    with pytest.raises(ConfigError) as error:
        scenario_from_dict(data, "old.yaml")
    message = str(error.value)
    assert "\n" not in message
    assert "old.yaml" in message
    assert "scheduler_per_seq_s" in message and "sampling_per_seq_s" in message


def test_a_format_1_artifact_loads_with_its_price_kept(tmp_path: Path) -> None:
    data = json.loads(V1_ARTIFACT.read_text())
    assert data["format_version"] == 1
    old = data["cpu"]
    copy = tmp_path / "v1.json"
    copy.write_text(json.dumps(data))
    artifact = load_engine_cpu_artifact(copy)
    assert artifact.format_version == 2
    assert artifact.cpu is not None
    # The whole per-sequence work, fitted as one, priced the same: x + 0.0 is x.
    assert artifact.cpu.per_seq_s == old["per_seq_s"]
    for num_seqs, num_tokens in ((1, 1), (200, 2048)):
        assert cpu_only_s(artifact.cpu, num_seqs, num_tokens) == (
            old["per_step_s"] + old["per_seq_s"] * num_seqs + old["per_token_s"] * num_tokens
        )
    assert artifact.coefficients == []  # format 1 had no intervals


def test_both_per_sequence_parts_free_at_once_are_refused_naming_them() -> None:
    run = synthetic_run(5.0, START)
    with pytest.raises(ValueError, match="scheduler_per_seq_s and sampling_per_seq_s"):
        fit_engine_cpu([run], [Target(0)], ("scheduler_per_seq_s", "sampling_per_seq_s"), 5)


def test_per_step_and_non_overlapped_on_synchronous_runs_are_refused() -> None:
    run = synthetic_run(5.0, START)  # synchronous: both added to every step
    with pytest.raises(ValueError, match="per_step_s and non_overlapped_s"):
        fit_engine_cpu([run], [Target(0)], ("per_step_s", "non_overlapped_s"), 5)


def test_a_zero_column_or_proportional_columns_are_named() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=6), rng.normal(size=6)
    free = ("per_step_s", "sampling_per_seq_s", "per_token_s")
    # per_token_s moves nothing; the other two are independent.
    zero = jacobian_problems(free, np.column_stack([a, b, np.zeros(6)]))
    assert [names for names, _ in zero] == [("per_token_s",)]
    assert "hides behind the GPU step" in zero[0][1]
    # per_token_s's column is 3 x per_step_s's: only their combination is informed.
    alike = jacobian_problems(free, np.column_stack([a, b, 3.0 * a]))
    assert len(alike) == 1
    assert set(alike[0][0]) == {"per_step_s", "per_token_s"}
    assert "not identified apart" in alike[0][1]
    assert identified(free, alike) == ("per_step_s", "sampling_per_seq_s") or identified(
        free, alike
    ) == ("sampling_per_seq_s", "per_token_s")
    assert jacobian_problems(free, np.column_stack([a, b, rng.normal(size=6)])) == []


def test_gauss_newton_errors_are_ols_standard_errors_for_a_line() -> None:
    # y = 2 + 0.5 x + noise; residuals y - X beta at the OLS fit, Jacobian -X.
    x = np.arange(10.0)
    y = 2.0 + 0.5 * x + np.array([0.3, -0.2, 0.1, 0.4, -0.5, 0.2, -0.1, 0.0, 0.3, -0.4])
    design = np.column_stack([np.ones_like(x), x])
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    at = y - design @ beta
    errors = gauss_newton_errors(at, -design)
    # The textbook slope error: sqrt(s2 / Sxx), s2 = SSR / (n - 2).
    s2 = float(at @ at) / (10 - 2)
    sxx = float(((x - x.mean()) ** 2).sum())
    assert errors[1] == pytest.approx(math.sqrt(s2 / sxx), rel=1e-9)
    # And the intercept's: sqrt(s2 * (1/n + mean^2 / Sxx)).
    assert errors[0] == pytest.approx(math.sqrt(s2 * (1 / 10 + x.mean() ** 2 / sxx)), rel=1e-9)
    # Undefined with no degrees of freedom, or a singular J'J.
    assert gauss_newton_errors(at[:2], -design[:2]) == [None, None]
    assert gauss_newton_errors(at, np.column_stack([x, 2 * x])) == [None, None]


def test_cpu_work_hidden_behind_the_gpu_step_is_not_identified() -> None:
    # Overlapped, the linear base's >= 1 ms steps hide START's ~0.4 ms + 13 us/seq
    # (16 sequences at most: 0.6 ms) in every step: per_step_s moves no latency,
    # while the part no mode hides does.
    run = synthetic_run(20.0, START, overlapped=True)
    problems = identification_problems([run], [Target(0)], ("per_step_s", "non_overlapped_s"))
    assert [names for names, _ in problems] == [("per_step_s",)]
    assert "per_step_s is not identified" in problems[0][1]


def test_a_fits_interval_holds_the_truth_and_narrows_with_more_runs() -> None:
    # The part no mode hides, 1.5 ms, under async scheduling (the steps hide the rest).
    truth = START.model_copy(update={"non_overlapped_s": 1.5e-3})
    runs = [synthetic_run(20.0, truth, overlapped=True, seed=s) for s in range(2)]
    free = ("non_overlapped_s",)
    one = fit_engine_cpu(runs[:1], [Target(0)], free, 30).params
    two = fit_engine_cpu(runs, [Target(0), Target(1)], free, 30).params
    assert isinstance(one, EngineCpuFitValues) and isinstance(two, EngineCpuFitValues)
    [narrow] = intervals(runs, [Target(0), Target(1)], free, two)
    [wide] = intervals(runs[:1], [Target(0)], free, one)
    for row in (narrow, wide):
        assert row.low_s is not None and row.high_s is not None and row.std_error_s is not None
        assert row.low_s <= 1.5e-3 <= row.high_s
    assert (narrow.degrees_of_freedom, wide.degrees_of_freedom) == (11, 5)  # 6 m per run - 1


def measured_folder(tmp_path: Path, truth: EngineCpuConfig) -> tuple[Path, Path]:
    """A synchronous roofline scenario and a 'measured' run of it with CPU work ``truth``."""
    data = roofline_scenario(tmp_path)
    data["frontend"] = {"way_in_s_per_request": 0.0, "tokenize_s_per_token": 0.0}
    data["workload"]["arrival"]["rate_per_s"] = 40
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    measured = api.run(
        Scenario.model_validate({**data, "engine": {**data["engine"], "cpu": truth.model_dump()}})
    )
    columns = measured.requests[list(REQUEST_COLUMNS)]
    ImportedRun(columns, {"format": "test", "model": "tiny"}).write(tmp_path / "run")
    return tmp_path / "s.yaml", tmp_path / "run"


def test_calibrate_refuses_a_free_set_the_run_cannot_identify_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured_folder(tmp_path, START)
    argv = ["calibrate", "--model", "tiny", "--from-run", str(run), "--scenario", str(scenario),
            "--fit-kind", "engine-cpu", "--free", "scheduler_per_seq_s,sampling_per_seq_s",
            "--max-evals", "5", "--out", str(tmp_path / "cpu.json")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "scheduler_per_seq_s and sampling_per_seq_s" in err
    assert not (tmp_path / "cpu.json").exists()


def test_calibrate_drops_what_the_default_set_cannot_identify_and_reports_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = START.model_copy(update={"per_step_s": 2e-3})
    scenario, run = measured_folder(tmp_path, truth)
    out = tmp_path / "cpu.json"
    argv = ["calibrate", "--model", "tiny", "--from-run", str(run), "--scenario", str(scenario),
            "--fit-kind", "engine-cpu", "--no-cross-validation", "--max-evals", "25",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # Synchronous: per_step_s and non_overlapped_s are both added to every step.
    assert "not fitted: per_step_s and non_overlapped_s" in printed
    assert "95 % interval" in printed
    written = load_engine_cpu_artifact(out)
    assert written.fit.free_parameters == ["per_step_s", "sampling_per_seq_s"]
    assert [c.name for c in written.coefficients] == ["per_step_s", "sampling_per_seq_s"]
    assert written.held_source is not None and "estimate" in written.held_source
    assert written.interval_method is not None and "Gauss-Newton" in written.interval_method
    step, rest = written.coefficients
    for row in (step, rest):
        assert row.std_error_s is not None and row.std_error_s > 0
        assert row.low_s is not None and row.high_s is not None
        assert row.low_s <= row.value_s <= row.high_s
    # The truth has no per-sequence work besides the scheduler's: its interval holds 0.
    assert rest.low_s == 0.0
    # The constant per step stands for the truth's 2 ms plus the 0.1 ms non-overlapped
    # term (both added to every step of a synchronous engine); at the 16-sequence cap the
    # fitted CPU work of a step is that 2.1 ms within 10 % (the two trade off nearly
    # one for one at a batch that hardly changes).
    assert step.value_s + 16 * rest.value_s == pytest.approx(2.1e-3, rel=0.1)
