"""The engine-CPU fit: recovering known coefficients, phase folds, the artifact, naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from sim import api
from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.fitted import FitSummary, FittedRunInfo, save_fitted_artifact
from sim.cost.fitted_cpu import (
    EngineCpuArtifact,
    EngineCpuFitValues,
    EngineCpuProvenance,
    load_engine_cpu_artifact,
)
from sim.errors import ConfigError
from sim.scenario import Scenario, load_scenario, scenario_from_dict
from sim.validation.fit import (
    WAY_IN,
    FitRun,
    Target,
    cross_validate,
    engine_cpu_start,
    fit_engine_cpu,
    in_flight_at_arrival,
    objective_value,
    phase_folds,
    phase_split,
    score,
    target_rows,
)
from sim.validation.fit_runs import MEASURE_FORMAT, load_measured_run, run_digest
from sim.validation.intake import ENGINE_INTAKE
from sim.validation.runs import REQUEST_COLUMNS, ImportedRun

LINEAR = {
    "kind": "linear",
    "step_overhead_s": 0.001,
    "per_prefill_token_s": 5e-5,
    "per_decode_seq_s": 1e-3,
    "per_context_token_s": 1e-7,
}
START = EngineCpuConfig(
    per_step_s=4e-4,
    scheduler_per_seq_s=1.3e-5,
    sampling_per_seq_s=0.0,
    per_token_s=1e-7,
    non_overlapped_s=1e-4,
)


def scenario_dict(rate_per_s: float, seed: int = 0, **engine: Any) -> dict[str, Any]:
    return {
        "name": f"cpu-fit-{rate_per_s:g}",
        "seed": seed,
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": LINEAR,
        "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 256},
        "engine": {"num_kv_blocks": 4096, "async_scheduling": False, **engine},
        "frontend": {"way_in_s_per_request": 0.0, "tokenize_s_per_token": 0.0},
        "workload": {
            "kind": "synthetic",
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 32, "max_tokens": 600},
            "output_tokens": {"kind": "uniform", "min_tokens": 4, "max_tokens": 40},
        },
    }


def synthetic_run(
    rate_per_s: float,
    truth: EngineCpuConfig,
    overlapped: bool = False,
    way_in_s: float = 0.0,
    seed: int = 0,
) -> FitRun:
    """A 'measured' run: the simulator with the engine CPU work ``truth`` around the linear
    base (which stands for a GPU-only model here), replayed from the estimate ``START``."""
    data = scenario_dict(rate_per_s, seed)
    s = Scenario.model_validate(data)
    truly = s.model_copy(update={"frontend": s.frontend.model_copy(update={WAY_IN: way_in_s})})
    measured = api.run(
        truly, wrap_cost=lambda base: EngineCpuCost(base, EngineCpu(truth, overlapped, "truth"))
    )
    return FitRun(
        s.name,
        s,
        measured.requests,
        api.cost_model_for(s),
        engine_cpu=EngineCpu(START, overlapped, "estimate"),
        arrivals_include_way_in=way_in_s > 0,
    )


def test_recovers_per_step_and_per_sequence_cpu_work_from_two_loads() -> None:
    # The scheduler's part held at START's; the rest per sequence brings the sum to 200 us.
    truth = START.model_copy(update={"per_step_s": 2e-3, "sampling_per_seq_s": 1.87e-4})
    runs = [synthetic_run(5.0, truth), synthetic_run(40.0, truth, seed=1)]
    start = score(runs, [Target(0), Target(1)], EngineCpuFitValues(START, 0.0))
    assert objective_value(start) > 1e-3  # the estimate is visibly wrong
    outcome = fit_engine_cpu(runs, [Target(0), Target(1)], ("per_step_s", "sampling_per_seq_s"), 60)
    assert outcome.value < 0.01 * outcome.base_value
    got = outcome.params
    assert isinstance(got, EngineCpuFitValues)
    assert got.cpu.per_step_s == pytest.approx(2e-3, rel=0.15)
    assert got.cpu.per_seq_s == pytest.approx(2e-4, rel=0.15)
    assert got.cpu.scheduler_per_seq_s == START.scheduler_per_seq_s
    # What was not free stays at the start; the way in was not fitted.
    assert got.cpu.per_token_s == START.per_token_s
    assert got.cpu.non_overlapped_s == START.non_overlapped_s


def test_recovers_the_non_overlapped_part_under_async_scheduling() -> None:
    # The linear base's step (>= 1 ms) is longer than the CPU work: only the part no
    # mode hides shows in the latencies.
    truth = START.model_copy(update={"non_overlapped_s": 1.5e-3})
    run = synthetic_run(20.0, truth, overlapped=True)
    outcome = fit_engine_cpu([run], [Target(0)], ("non_overlapped_s",), 30)
    assert isinstance(outcome.params, EngineCpuFitValues)
    assert outcome.params.cpu.non_overlapped_s == pytest.approx(1.5e-3, rel=0.05)


def test_recovers_the_way_in_where_arrivals_include_it() -> None:
    run = synthetic_run(10.0, START, way_in_s=0.03)
    outcome = fit_engine_cpu([run], [Target(0)], (WAY_IN,), 30)
    assert isinstance(outcome.params, EngineCpuFitValues)
    assert outcome.params.way_in_s_per_request == pytest.approx(0.03, rel=0.05)
    assert outcome.params.cpu == START


def test_what_the_runs_cannot_inform_is_refused() -> None:
    run = synthetic_run(10.0, START)  # arrivals at the engine: no way in in them
    with pytest.raises(ValueError, match="queue times"):
        fit_engine_cpu([run], [Target(0)], (WAY_IN,), 5)
    whole_step = FitRun(run.name, run.scenario, run.requests, run.base)  # no engine CPU
    with pytest.raises(ValueError, match="times whole steps"):
        fit_engine_cpu([whole_step], [Target(0)], ("per_step_s",), 5)
    with pytest.raises(ValueError, match="subset"):
        fit_engine_cpu([run], [Target(0)], ("per_step_s", "decode_multiplier"), 5)


def table(arrivals: list[float], finishes: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {"request_id": range(len(arrivals)), "arrival_s": arrivals, "finish_s": finishes}
    )


def test_in_flight_at_arrival_hand_traced() -> None:
    # 0: [0, 10); 1: [1, 2); 2: [3, 4) (1 done); 3: [5, ...) never served; 4: [6, 7)
    requests = table([0.0, 1.0, 3.0, 5.0, 6.0], [10.0, 2.0, 4.0, float("nan"), 7.0])
    assert in_flight_at_arrival(requests).tolist() == [0, 1, 1, 1, 1]


def test_phase_split_is_at_the_median_load() -> None:
    # In flight at arrival: 0, 1, 2, 3 (none done yet), 3 (3 done at 5, 4 in), 3 -> median 2.5.
    requests = table([0.0, 1.0, 2.0, 3.0, 6.0, 9.0], [20.0, 20.0, 20.0, 5.0, 8.0, 20.0])
    counts = in_flight_at_arrival(requests).tolist()
    assert counts == [0, 1, 2, 3, 3, 3]
    low, high = phase_split(requests)
    assert low.request_ids == (0, 1, 2) and high.request_ids == (3, 4, 5)
    assert "low load" in low.label and "saturated" in high.label
    with pytest.raises(ValueError, match="median load"):
        phase_split(table([0.0, 5.0], [1.0, 6.0]))  # no load at all: one phase


def test_phase_folds_leave_one_phase_out_and_runs_leave_one_run_out() -> None:
    run = synthetic_run(40.0, START)
    folds = phase_folds([run])
    assert len(folds) == 2
    (train,), (test,) = folds[0].train, folds[0].test
    assert folds[1].train == (test,) and folds[1].test == (train,)
    assert train.request_ids is not None and test.request_ids is not None
    assert not set(train.request_ids) & set(test.request_ids)
    assert sorted(train.request_ids + test.request_ids) == list(range(len(run.requests)))
    other = synthetic_run(5.0, START, seed=1)
    two = phase_folds([run, other])
    assert [f.name for f in two] == [f"leave out {run.name}", f"leave out {other.name}"]
    assert [f.test for f in two] == [(Target(0),), (Target(1),)]
    assert [f.train for f in two] == [(Target(1),), (Target(0),)]


def test_cross_validation_beats_the_estimate_on_held_out_phases() -> None:
    truth = START.model_copy(update={"per_step_s": 3e-3})
    run = synthetic_run(30.0, truth)
    folds = cross_validate([run], ("per_step_s",), 20)
    assert [f["fold"].split(": ")[1].split(" (")[0] for f in folds] == ["low load", "saturated"]
    for fold in folds:
        assert fold["parameters"]["per_step_s"] == pytest.approx(3e-3, rel=0.1)
        for row in fold["held_out"]:
            assert row["requests"] != "all"
            base = max(abs(v) for v in row["base_err_pct"].values())
            fitted = max(abs(v) for v in row["fitted_err_pct"].values())
            assert fitted < 0.25 * base


def artifact(cpu: EngineCpuConfig, way_in_s: float | None) -> EngineCpuArtifact:
    return EngineCpuArtifact(
        provenance=EngineCpuProvenance(
            tool_version="test",
            created_utc="2026-12-02T00:00:00Z",
            command="servesim calibrate",
            model="tiny",
            hardware="cpu-2core",
            vllm_version="0.19.0",
            async_scheduling=True,
            runs=[FittedRunInfo(source="run", format="test", num_requests=1, sha256="0" * 64)],
        ),
        base_cost={"kind": "roofline"},
        base_cost_label="roofline",
        cpu=cpu,
        way_in_s_per_request=way_in_s,
        fit=FitSummary(
            free_parameters=["per_step_s"],
            objective="o",
            objective_value=0.0,
            base_objective_value=1.0,
            num_evaluations=1,
            optimiser="nm",
        ),
    )


FITTED = EngineCpuConfig(
    per_step_s=3e-3,
    scheduler_per_seq_s=2e-4,
    sampling_per_seq_s=0.0,
    per_token_s=1e-6,
    non_overlapped_s=5e-4,
)


def test_artifact_round_trips(tmp_path: Path) -> None:
    written = artifact(FITTED, 0.02)
    save_fitted_artifact(written, tmp_path / "a" / "cpu.json")
    assert load_engine_cpu_artifact("a/cpu.json", tmp_path) == written
    assert load_engine_cpu_artifact(tmp_path / "a" / "cpu.json").way_in_s_per_request == 0.02


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "artifact not found"),
        ("{", "not valid JSON"),
        ('{"format": "servesim-fitted-cost", "format_version": 1}', "not a fitted engine-CPU"),
        ('{"format": "servesim-fitted-engine-cpu", "format_version": 9}', "format_version 9"),
    ],
)
def test_a_bad_artifact_is_one_line(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "cpu.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as error:
        load_engine_cpu_artifact(path)
    assert "\n" not in str(error.value) and str(path) in str(error.value)
    assert expected.lower() in str(error.value).lower()


def roofline_scenario(tmp_path: Path, **engine: Any) -> dict[str, Any]:
    data = scenario_dict(10.0, **engine)
    data["cost"] = {"kind": "roofline"}
    del data["frontend"]
    return data


def test_a_scenario_naming_the_artifact_prices_steps_with_its_coefficients(
    tmp_path: Path,
) -> None:
    save_fitted_artifact(artifact(FITTED, 0.02), tmp_path / "fits" / "cpu.json")
    data = roofline_scenario(tmp_path, cpu_artifact="fits/cpu.json")
    s = scenario_from_dict(data, "s.yaml", tmp_path)
    assert s.engine.cpu == FITTED and s.frontend.way_in_s_per_request == 0.02
    assert s.engine_cpu.given and "cpu.json" in s.engine_cpu.source
    cost = api.cost_model_for(s)
    assert isinstance(cost, EngineCpuCost)
    shape = StepShape(num_prefill_seqs=1, num_prefill_tokens=100, num_decode_seqs=3,
                      num_decode_context_tokens=300)  # fmt: skip
    gpu_s = cost.gpu.step_s(shape)
    cpu_s = 3e-3 + 2e-4 * 4 + 1e-6 * 103  # per step + per sequence + per token
    assert cost.step_s(shape) == pytest.approx(5e-4 + cpu_s + gpu_s, rel=1e-12)  # serial
    # Validated again (a dump, as sweeps do), it is the same scenario.
    again = scenario_from_dict(s.model_dump(mode="json"), "again", tmp_path)
    assert again.engine.cpu == FITTED and again.frontend == s.frontend
    # Through the file loader: the path is from the scenario's folder.
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_scenario(path).engine.cpu == FITTED


def test_a_way_in_only_artifact_suits_a_whole_step_cost(tmp_path: Path) -> None:
    # Fitted on a base that times whole steps: no CPU coefficients, only the way in.
    save_fitted_artifact(artifact(FITTED, 0.02).model_copy(update={"cpu": None}),
                             tmp_path / "cpu.json")  # fmt: skip
    data = scenario_dict(10.0, cpu_artifact="cpu.json")  # linear: whole steps
    del data["frontend"]
    s = scenario_from_dict(data, "s", tmp_path)
    assert s.engine.cpu is None and s.frontend.way_in_s_per_request == 0.02
    assert not isinstance(api.cost_model_for(s), EngineCpuCost)  # nothing added, nothing refused


def test_an_artifact_without_a_way_in_keeps_the_scenarios(tmp_path: Path) -> None:
    save_fitted_artifact(artifact(FITTED, None), tmp_path / "cpu.json")
    data = roofline_scenario(tmp_path, cpu_artifact="cpu.json")
    data["frontend"] = {"way_in_s_per_request": 0.05}
    assert scenario_from_dict(data, "s", tmp_path).frontend.way_in_s_per_request == 0.05


@pytest.mark.parametrize(
    ("engine", "frontend", "expected"),
    [
        ({"cpu": START.model_dump()}, {}, "engine.cpu and engine.cpu_artifact"),
        ({}, {"way_in_s_per_request": 0.05}, "frontend.way_in_s_per_request and"),
        ({"cpu_artifact": "missing.json"}, {}, "artifact not found"),
    ],
)
def test_a_conflict_or_a_missing_artifact_is_one_line(
    tmp_path: Path, engine: dict[str, Any], frontend: dict[str, Any], expected: str
) -> None:
    save_fitted_artifact(artifact(FITTED, 0.02), tmp_path / "cpu.json")
    data = roofline_scenario(tmp_path, **{"cpu_artifact": "cpu.json", **engine})
    data["frontend"] = frontend
    with pytest.raises(ConfigError) as error:
        scenario_from_dict(data, "s.yaml", tmp_path)
    assert "\n" not in str(error.value) and expected.lower() in str(error.value).lower()


def test_calibrate_fit_kind_engine_cpu_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = START.model_copy(update={"per_step_s": 2e-3})
    data = roofline_scenario(tmp_path)
    data["frontend"] = {"way_in_s_per_request": 0.0, "tokenize_s_per_token": 0.0}
    data["workload"]["arrival"]["rate_per_s"] = 40
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    measured = api.run(
        Scenario.model_validate({**data, "engine": {**data["engine"], "cpu": truth.model_dump()}})
    )
    columns = measured.requests[list(REQUEST_COLUMNS)]
    ImportedRun(columns, {"format": "test", "model": "tiny"}).write(tmp_path / "run")
    out = tmp_path / "out" / "cpu.json"
    argv = ["calibrate", "--model", "tiny", "--from-run", str(tmp_path / "run"), "--scenario",
            str(tmp_path / "s.yaml"), "--fit-kind", "engine-cpu", "--free", "per_step_s",
            "--max-evals", "15", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "low load" in printed and "way_in_s_per_request not fitted" in printed
    written = load_engine_cpu_artifact(out)
    assert written.cpu is not None
    assert written.cpu.per_step_s == pytest.approx(2e-3, rel=0.1)
    assert written.way_in_s_per_request is None and written.base_cost["kind"] == "roofline"
    assert written.provenance.vllm_version == Scenario.model_validate(data).engine.vllm_version
    assert not written.provenance.async_scheduling
    assert len(written.errors["cross_validation"]) == 2
    assert json.loads(out.read_text())["format"] == "servesim-fitted-engine-cpu"
    # The way in cannot be fitted from these arrivals: one line.
    argv[argv.index("per_step_s")] = WAY_IN
    argv[-1] = str(tmp_path / "way-in.json")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "queue times" in err
    # A scenario naming the artifact replays as the fitted coefficients do.
    named = {**data, "engine": {**data["engine"], "cpu_artifact": "out/cpu.json"}}
    a = api.run(scenario_from_dict(named, "named", tmp_path), base_dir=tmp_path)
    direct = {**data, "engine": {**data["engine"], "cpu": written.cpu.model_dump()}}
    b = api.run(Scenario.model_validate(direct))
    np.testing.assert_array_equal(a.requests["finish_s"], b.requests["finish_s"])


ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "docs" / "validation" / "blackbox" / "engine-cpu").glob("*.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_engine_cpu_artifacts_load_and_improve_on_their_base(path: Path) -> None:
    written = load_engine_cpu_artifact(path)
    assert written.fit.objective_value < written.fit.base_objective_value
    assert written.provenance.command.startswith("servesim calibrate")
    assert written.way_in_s_per_request is None  # queue-time arrivals: no way in
    assert len(written.errors["cross_validation"]) == 2  # one run: two phases


def test_the_rtx4090_engine_cpu_artifact_reproduces_its_recorded_errors() -> None:
    path = ROOT / "docs" / "validation" / "blackbox" / "engine-cpu" / "rtx4090-llama-3.1-8b.json"
    written = load_engine_cpu_artifact(path)
    (info,) = written.provenance.runs
    run = load_measured_run(ROOT / info.source)
    assert run_digest(run.requests) == info.sha256
    folder = ROOT / "scenarios" / "public"
    plain = load_scenario(folder / "rtx4090_llama31_8b.yaml")
    data = plain.model_dump(mode="json")
    data["engine"]["cpu_artifact"] = str(path)
    named = scenario_from_dict(data, "named", folder)
    cost = api.cost_model_for(named)
    assert isinstance(cost, EngineCpuCost) and cost.cpu.config == written.cpu
    gpu = api.cost_model_for(plain, engine_cpu=False)
    # LLMServingSim's queued_ts: counted from the replay's intake, as calibrate counted.
    assert run.meta.get("latency_from") == ENGINE_INTAKE
    fit_run = FitRun("r", plain, run.requests, gpu, engine_cpu=plain.engine_cpu, from_intake=True)
    assert written.cpu is not None
    rows = target_rows(
        [fit_run], [Target(0)], EngineCpuFitValues(written.cpu), engine_cpu_start([fit_run])
    )
    for now, then in zip(rows, written.errors["in_sample"]["rows"], strict=True):
        assert now["metric"] == then["metric"]
        for kind in ("base_err_pct", "fitted_err_pct"):
            assert now[kind] == pytest.approx(then[kind], abs=0.011)


def test_calibrate_fits_the_way_in_alone_on_a_whole_step_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A linear cost times whole steps: no CPU coefficients to fit; send-time arrivals (a
    # measure folder's format): the way in is, by default, and alone.
    data = scenario_dict(10.0)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    truly = {**data, "frontend": {"way_in_s_per_request": 0.03, "tokenize_s_per_token": 0.0}}
    measured = api.run(Scenario.model_validate(truly))
    meta = {"format": MEASURE_FORMAT, "model": "tiny"}
    ImportedRun(measured.requests[list(REQUEST_COLUMNS)], meta).write(tmp_path / "run")
    out = tmp_path / "way-in.json"
    argv = ["calibrate", "--model", "tiny", "--from-run", str(tmp_path / "run"), "--scenario",
            str(tmp_path / "s.yaml"), "--fit-kind", "engine-cpu", "--max-evals", "20",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert f"fitting {WAY_IN} of linear" in capsys.readouterr().out
    written = load_engine_cpu_artifact(out)
    assert written.cpu is None and written.fit.free_parameters == [WAY_IN]
    assert written.way_in_s_per_request == pytest.approx(0.03, rel=0.05)
